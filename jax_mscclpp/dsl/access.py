"""Which chunks a plan operation reads and writes, read off its row of the op table (ops.py).

A chunk key is ``(rank, buffer, index)``. Remote chunks are resolved through the operation's channel: the
peer of a memory/port channel, every member of a switch channel. Lowering uses this to place barriers and to
find fusable chains; the verifier and the simulator use ``placed_refs`` to run operations.
"""

from __future__ import annotations

import dataclasses

from .ops import LOCAL, READ, REF, REFS, Operand, spec_of


@dataclasses.dataclass(frozen=True)
class Placed:
    """One chunk reference of an operation, on the rank whose memory it names. ``channel`` is the channel it
    goes through (the sender of packets it reads is that channel's peer); None for references of a local
    operation."""

    operand: Operand
    rank: int
    ref: dict
    channel: int | None
    path: tuple = ()  # where ``ref`` sits in the operation: (field,), (field, k) or (field, k, entry key)


def chunk_keys(rank: int, ref: dict) -> list[tuple[int, str, int]]:
    return [(rank, ref["buffer"], ref["index"] + t) for t in range(ref["count"])]


def channel_ranks(channel: dict) -> list[int]:
    """The ranks whose memory an operation on ``channel`` addresses remotely."""
    return list(channel["peers"]) if channel["type"] == "switch" else [channel["peer"]]


def operand_refs(operand: Operand, op: dict) -> list[tuple[dict, int | None]]:
    """(reference, channel it goes through) for each chunk reference of ``operand`` in ``op``."""
    return [(ref, channel) for ref, channel, _ in _operand_paths(operand, op)]


def _operand_paths(operand: Operand, op: dict) -> list[tuple[dict, int | None, tuple]]:
    """(reference, channel, path in ``op``) for each chunk reference of ``operand`` in ``op``."""
    field, value = operand.field, op[operand.field]
    if operand.shape == REF:
        return [(value, op.get("channel"), (field,))]
    if operand.shape == REFS:
        return [(ref, None, (field, k)) for k, ref in enumerate(value)]
    key = operand.entry_key
    return [(item[key], item["channel"], (field, k, key)) for k, item in enumerate(value)]


def with_ref(op: dict, path: tuple, ref: dict) -> dict:
    """A copy of ``op`` whose chunk reference at ``path`` (``Placed.path``) is ``ref``."""
    op = dict(op)
    if len(path) == 1:
        op[path[0]] = ref
        return op
    items = list(op[path[0]])
    items[path[1]] = ref if len(path) == 2 else {**items[path[1]], path[2]: ref}
    op[path[0]] = items
    return op


def placed_refs(op: dict, rank: int, channels: list[dict]) -> list[Placed]:
    """Every chunk reference of ``op`` running on ``rank`` (whose channel list is ``channels``), in operand
    order, a remote reference once per rank it reaches."""
    placed = []
    for operand in spec_of(op["op"]).operands:
        for ref, channel, path in _operand_paths(operand, op):
            ranks = [rank] if operand.place == LOCAL else channel_ranks(channels[channel])
            placed.extend(Placed(operand, r, ref, channel, path) for r in ranks)
    return placed


def op_accesses(op: dict, rank: int, channels: list[dict]) -> tuple[list, list]:
    """(chunks read, chunks written) by ``op`` running on ``rank`` whose channel list is ``channels``."""
    reads, writes = [], []
    for place in placed_refs(op, rank, channels):
        (reads if place.operand.access == READ else writes).extend(chunk_keys(place.rank, place.ref))
    return reads, writes


def is_barrier_point(op: dict) -> bool:
    """Whether the executor runs ``op`` as a barrier point of the whole thread block: every thread finishes
    what came before before any thread starts what comes after (PLAN.md, "Execution model"). The point comes
    after the operation's own data step (put_with_signal's put): that step is ordered like a data operation."""
    return spec_of(op["op"]).barrier_point


def conflicts(reads: list, writes: list, pending: dict) -> bool:
    """Whether accesses conflict with ``pending`` (chunk key -> written?) of earlier operations."""
    return any(pending.get(key) for key in reads) or any(key in pending for key in writes)


def add_pending(reads: list, writes: list, pending: dict) -> None:
    for key in reads:
        pending.setdefault(key, False)
    for key in writes:
        pending[key] = True
