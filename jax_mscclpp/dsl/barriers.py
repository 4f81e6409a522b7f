"""Barrier placement inside thread blocks.

The threads of a thread block split each data operation among themselves, each operation its own way, so
two data operations that touch a common chunk (at least one writing it) need a barrier between them unless a
barrier point (an operation with a synchronization role in the op table: barrier, signal, wait, flush,
put_with_signal) already separates them. A barrier point with chunk operands (put_with_signal) is one after
its data step (PLAN.md, "Execution model"): its own accesses are checked like any data operation's first.

Placement tracks, per thread block, the chunks read and written since the last barrier point (their last
writer and active readers) and puts a barrier right before the first operation that conflicts. Existing
barriers (written in the DSL or left by an earlier pass) are dropped first and re-derived, so a barrier that
orders nothing, or a second one back to back, never reaches the plan. Placing each barrier as late as
possible gives the fewest barriers.
"""

from __future__ import annotations

from .access import add_pending, conflicts, is_barrier_point, op_accesses
from .ops import BARRIER_OP


def place_barriers(plan: dict) -> None:
    """Rewrite every thread block of ``plan`` in place with exactly the barriers it needs."""
    for rank, rank_plan in enumerate(plan["ranks"]):
        for block in rank_plan["threadblocks"]:
            block["ops"] = _with_barriers(block["ops"], rank, rank_plan["channels"])


def _with_barriers(ops: list, rank: int, channels: list) -> list:
    out: list = []
    pending: dict = {}  # chunk key -> written since the last barrier point?
    for op in ops:
        if op["op"] == BARRIER_OP:
            continue
        reads, writes = op_accesses(op, rank, channels)
        if conflicts(reads, writes, pending):
            out.append({"op": BARRIER_OP})
            pending = {}
        add_pending(reads, writes, pending)
        if is_barrier_point(op):  # after its data step
            pending = {}
        out.append(op)
    return out
