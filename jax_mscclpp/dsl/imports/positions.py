"""A check that foreign plans need and our own programs do not: data stays at its position within a block.

Chunks of one block differ in length when the block's element count does not divide evenly (the tail chunks
are short or empty, ``geometry.py``), and an operation processes the common valid length of its chunks. A
foreign plan written for equal chunks may park chunk ``j`` of a block at another position ``q`` of an input or
output block on its way; where ``q`` is shorter, the tail of the data is lost, and the verifier, which reasons
per chunk, cannot see it. Scratch chunks all have the full length, so data may pass through any of them.

The check runs a flow-insensitive analysis: every chunk of every rank collects the positions of the input data
that can reach it (input chunk ``i`` holds position ``i % chunks_per_block``), along every operation's reads to
its writes, until nothing changes. An output chunk that can receive data of another position than its own is
refused, at the operation that brings it there.
"""

from __future__ import annotations

from collections import defaultdict

from ..access import chunk_keys, placed_refs
from ..ops import READ, WRITE
from ..plan_format import iter_ops
from .errors import PlanImportError


def check_positions(plan: dict) -> None:
    """Raise PlanImportError unless every output chunk of ``plan`` only ever receives data from input chunks
    at its own position within a block."""
    per_block = plan["buffers"]["input"]["chunks_per_block"]
    held: dict[tuple, set] = defaultdict(set)
    for rank in range(plan["world_size"]):
        total = plan["buffers"]["input"]["blocks"] * per_block
        for index in range(total):
            held[rank, "input", index].add(index % per_block)
    changed = True
    while changed:
        changed = False
        for rank, tb, index, op in iter_ops(plan):
            placed = placed_refs(op, rank, plan["ranks"][rank]["channels"])
            reads = [chunk_keys(p.rank, p.ref) for p in placed if p.operand.access == READ]
            writes = [chunk_keys(p.rank, p.ref) for p in placed if p.operand.access == WRITE]
            for t in range(op_count(placed)):
                arriving = set().union(*(held[keys[t]] for keys in reads))
                for keys in writes:
                    key = keys[t]
                    if arriving <= held[key]:
                        continue
                    held[key] |= arriving
                    changed = True
                    _check_output(key, held[key], per_block, rank, tb, index, op)


def op_count(placed: list) -> int:
    """The number of chunks an operation processes (all its references span as many)."""
    return placed[0].ref["count"] if placed else 0


def _check_output(key: tuple, positions: set, per_block: int, rank: int, tb: int, index: int, op: dict) -> None:
    chunk_rank, buffer, chunk = key
    own = chunk % per_block
    if buffer != "output" or positions <= {own}:
        return
    other = sorted(positions - {own})[0]
    where = op.get("src_line") or f"rank {rank} threadblock {tb} op {index}"
    raise PlanImportError(where, None, f"{op['op']} can bring data of chunk {other} of a block into output chunk "
                                       f"{chunk} of rank {chunk_rank}, at position {own} of its block: chunks at "
                                       "different positions differ in length when the count does not divide "
                                       "evenly, so the plan would lose data")
