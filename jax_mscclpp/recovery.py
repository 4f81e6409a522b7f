"""Going on after a failed collective call (a timeout, a lost or stopped peer, ranks in mismatched calls).

A failure leaves the group of ranks it happened in out of step, so the host backend refuses every later call on
that communicator ("unusable after an earlier failure"), as GPU communicators do where failing kernels stop rather
than trap (``JAX_MSCCLPP_TRAP_ON_FAILURE=0``; a trap ends the process's GPU work: docs/reliability.md). The process
stays usable:

- a program lowered after the failure gets a fresh communicator for the same mesh and axes by itself (lowering
  replaces a cached one that a failure left unusable, ``Communicator.drop_unusable``; until then the failed one's
  ``errors()`` stay readable);
- programs compiled before the failure hold the failed communicator's id; ``reset()`` destroys every
  communicator and clears JAX's caches, so that calling them again lowers them with fresh ones.

The status code of a failed call says what happened, by the failure at the root (``ffi/host_failure_status.h``):
ABORTED for ranks in different calls, DEADLINE_EXCEEDED for a wait that timed out; a call refused on an unusable
communicator says so in its message, with the code of the failure behind it.
"""

from __future__ import annotations

import logging

from .communicator import Communicator

logger = logging.getLogger("jax_mscclpp.recovery")


def reset() -> int:
    """Destroys every communicator of this process and clears JAX's compilation caches, so that every program is
    lowered again on its next call, with fresh communicators. Returns how many communicators were destroyed.

    Call it after a failed collective call, before running again programs compiled before the failure; also the
    way to free every communicator's scratch. It first waits for every program whose results are still alive
    (``jax.live_arrays()``): JAX dispatches asynchronously, so a program called just before may not have run yet,
    and destroying its communicator under it would leave the ranks that had started waiting, until their time
    limit, for those that had not. A program whose results were all dropped is not waited for: it must not be
    running meanwhile."""
    import jax

    for array in jax.live_arrays():
        try:
            array.block_until_ready()
        except Exception:  # noqa: BLE001 - a failed program's results: its failure was reported where it was read
            pass
    live = Communicator.live()
    for comm in live:
        comm.destroy()
    jax.clear_caches()
    logger.info("reset: destroyed %d communicator(s) and cleared JAX's caches", len(live))
    return len(live)


__all__ = ["reset"]
