"""Fault injection for tests (host backend, CPU devices): make a rank miss a collective or stop in the middle of
one, shorten the wait limit."""

from __future__ import annotations

import contextlib

from jax_mscclpp._native import native
from jax_mscclpp.communicator import Communicator


def skip_next_calls(comm: Communicator, device, calls: int = 1) -> None:
    """The rank of ``device`` in ``comm`` returns at once from its next ``calls`` collective calls without taking
    part, as a lost peer would: the other ranks of its group reach their wait limit and report a timeout."""
    native.skip_next_calls(comm.id, comm._partition(device), calls)


def stop_mid_call(comm: Communicator, device, exchanges: int = 1) -> None:
    """The rank of ``device`` in ``comm`` stops its next built-in collective call after ``exchanges`` exchanges
    with its peers (a two-phase all_reduce has two per round), as a peer lost mid-call would: it tells no one, its
    own call fails, and the other ranks of its group reach their wait limit."""
    native.stop_mid_call(comm.id, comm._partition(device), exchanges)


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
