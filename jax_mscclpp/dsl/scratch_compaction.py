"""Scratch compaction: each rank's scratch chunks renumbered 0, 1, ... in their order, so that a plan's scratch is
as large as the most chunks one rank uses.

Front ends place scratch from the program's view: the DSL's ``scratch[p]`` for what rank p sends (no rank uses its
own index), MSCCLang's places of chunk versions, an MSCCL-IR's or MSCCL++ JSON's indices as written. Ranks use
different indices of it, and the executor sizes every rank's scratch by the indices any rank names
(kernels/executor/executor.h, scratch layout), so the plan needs more scratch than any rank uses, and a large
message more launches. Renumbering each rank's own chunks (those its operations name in its scratch and those
peers name in it through a channel), in their order, keeps every reference's chunk range contiguous and every
operation reading and writing the same data, so a plan that verified still does.

A switch channel names one index in the scratch of every member at once: a plan with one keeps its indices.
"""

from __future__ import annotations

from .access import placed_refs, with_ref


def compact_scratch(plan: dict) -> dict:
    """``plan`` with each rank's scratch chunks renumbered densely (module docstring); changed in place."""
    layout = plan["buffers"]["scratch"]
    ranks = plan["ranks"]
    if layout["blocks"] != 1 or any(ch["type"] == "switch" for rank in ranks for ch in rank["channels"]):
        return plan
    used: list[set[int]] = [set() for _ in ranks]
    for r, rank in enumerate(ranks):
        for tb in rank["threadblocks"]:
            for op in tb["ops"]:
                for place in _scratch_refs(op, r, rank["channels"]):
                    used[place.rank].update(range(place.ref["index"], place.ref["index"] + place.ref["count"]))
    renumbered = [{old: new for new, old in enumerate(sorted(indices))} for indices in used]
    for r, rank in enumerate(ranks):
        for tb in rank["threadblocks"]:
            tb["ops"] = [_renumbered(op, r, rank["channels"], renumbered) for op in tb["ops"]]
    layout["chunks_per_block"] = max(len(indices) for indices in used)
    return plan


def _scratch_refs(op: dict, rank: int, channels: list[dict]):
    return [place for place in placed_refs(op, rank, channels) if place.ref["buffer"] == "scratch"]


def _renumbered(op: dict, rank: int, channels: list[dict], renumbered: list[dict[int, int]]) -> dict:
    for place in _scratch_refs(op, rank, channels):
        op = with_ref(op, place.path, {**place.ref, "index": renumbered[place.rank][place.ref["index"]]})
    return op
