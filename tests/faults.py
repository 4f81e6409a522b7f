"""Fault injection for the tests: make a rank miss a collective, shorten the wait limit."""

from __future__ import annotations

import contextlib

from jax_mscclpp._native import native
from jax_mscclpp.communicator import Communicator


def skip_next_calls(comm: Communicator, device, calls: int = 1) -> None:
    """The rank of ``device`` in ``comm`` returns at once from its next ``calls`` collective calls without taking
    part, as a lost peer would: the other ranks of its group reach their wait limit and report a timeout."""
    native.skip_next_calls(comm.id, comm._partition(device), calls)


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
