"""Fault injection for tests (host backend, CPU devices): make a rank miss a collective or stop in the middle of
one, shorten the wait limit.

The first two need the native module's fault hooks, which only the testing build has
(``-C cmake.define.JAX_MSCCLPP_TESTING=ON``, the default where a GPU is visible): ``HOOKS_BUILT`` says whether this
one has them; without them they raise ``RuntimeError``. ``timeout`` works in every build."""

from __future__ import annotations

import contextlib

from jax_mscclpp._native import native
from jax_mscclpp.communicator import Communicator

HOOKS_BUILT = hasattr(native, "skip_next_calls")


def _hooks():
    if not HOOKS_BUILT:
        raise RuntimeError("jax_mscclpp.testing.faults: this build has no fault hooks; they come with the testing "
                           "build (pip install -e . -C cmake.define.JAX_MSCCLPP_TESTING=ON)")
    return native


def skip_next_calls(comm: Communicator, device, calls: int = 1) -> None:
    """The rank of ``device`` in ``comm`` returns at once from its next ``calls`` collective calls without taking
    part, as a lost peer would: the other ranks of its group reach their wait limit and report a timeout."""
    _hooks().skip_next_calls(comm.id, comm._partition(device), calls)


def stop_mid_call(comm: Communicator, device, exchanges: int = 1) -> None:
    """The rank of ``device`` in ``comm`` stops its next built-in collective call after ``exchanges`` exchanges
    with its peers (a two-phase all_reduce has two per round), as a peer lost mid-call would: it tells no one, its
    own call fails, and the other ranks of its group reach their wait limit."""
    _hooks().stop_mid_call(comm.id, comm._partition(device), exchanges)


@contextlib.contextmanager
def timeout(seconds: float):
    """Sets the wait limit (``JAX_MSCCLPP_TIMEOUT_S``) of the host backend and every GPU rank for calls run inside
    the block."""
    previous = native.timeout_seconds()
    native.set_timeout_seconds(seconds)
    try:
        yield
    finally:
        native.set_timeout_seconds(previous)
