"""A numpy reference interpreter of execution plans.

``run_plan`` executes a plan over all ranks with real data, with the semantics the native executors follow
(PLAN.md): thread blocks take turns in a fixed round-robin, one operation per turn; ``wait`` blocks until the
matching signal was sent and ``read_packets`` until every packet it needs has arrived. Memory is sequentially
consistent here (ordering bugs are the verifier's business): the simulator checks what a correct plan
computes, for any dtype and any element count, including chunks that are short or empty.

Output and scratch start filled with NaN (or the dtype's minimum for integers), so an element the plan never
writes shows up in the result; but the output of a permutation's rank that receives nothing starts as zeros, as
every executor gives it.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from .access import placed_refs
from .errors import VerificationError
from .geometry import ElementGeometry
from .ops import LOCAL, READ, SIGNAL, WAIT, WRITE, spec_of
from .plan_format import locate, receives_nothing, validate_plan
from .verify import check_channel_kinds

REDUCTIONS = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}


def run_plan(plan: dict, inputs: list, op: str = "sum") -> list[np.ndarray]:
    """Run ``plan`` on one input array per rank (same dtype and size, flattened); return each rank's output."""
    validate_plan(plan)
    check_channel_kinds(plan)
    if len(inputs) != plan["world_size"]:
        raise ValueError(f"the plan has {plan['world_size']} ranks but got {len(inputs)} inputs")
    if op not in REDUCTIONS:
        raise ValueError(f"op must be one of {sorted(REDUCTIONS)}")
    arrays = [np.asarray(x).reshape(-1) for x in inputs]
    if len({(a.dtype, a.size) for a in arrays}) != 1:
        raise ValueError("all ranks' inputs must have one dtype and size")
    machine = _Machine(plan, arrays, REDUCTIONS[op])
    for rank, memory in enumerate(machine.memory):
        if receives_nothing(plan, rank):  # the executor's zeros (PLAN.md, "permutation")
            memory["output"][:] = 0
    machine.run()
    return [memory["output"] for memory in machine.memory]


def _poison(size: int, dtype: np.dtype) -> np.ndarray:
    if np.issubdtype(dtype, np.integer):
        return np.full(size, np.iinfo(dtype).min, dtype)
    return np.full(size, np.nan, dtype)


class _Machine:
    def __init__(self, plan: dict, inputs: list, reduction):
        self.reduction = reduction
        self.geometry = ElementGeometry(plan["buffers"], inputs[0].size)
        dtype = inputs[0].dtype
        self.memory = [{"input": x.copy(),
                        "output": _poison(self.geometry.sizes["output"], dtype),
                        "scratch": _poison(self.geometry.sizes["scratch"], dtype)} for x in inputs]
        # Per rank and scratch element: whether an LL packet of this call has landed there.
        self.arrived = [np.zeros(self.geometry.sizes["scratch"], bool) for _ in inputs]
        self.channels = [rank_plan["channels"] for rank_plan in plan["ranks"]]
        self.signals: Counter = Counter()  # (rank, channel) -> signals sent
        self.waits: Counter = Counter()  # (rank, channel) -> waits completed
        self.blocks = [[rank, tb, block["ops"], 0] for rank, rank_plan in enumerate(plan["ranks"])
                       for tb, block in enumerate(rank_plan["threadblocks"])]

    def run(self) -> None:
        pending = [block for block in self.blocks if block[2]]
        while pending:
            progressed = False
            for block in pending:
                rank, _, ops, pc = block
                if self._ready(rank, ops[pc]):
                    self._execute(rank, ops[pc])
                    block[3] += 1
                    progressed = True
            pending = [block for block in pending if block[3] < len(block[2])]
            if pending and not progressed:
                blocked = "; ".join(str(locate(rank, tb, pc, ops[pc])) for rank, tb, ops, pc in pending)
                raise VerificationError("deadlock", f"the plan is stuck; blocked: {blocked}")

    # Element ranges -----------------------------------------------------------------------------------

    def _segments(self, placed: list) -> list:
        """For (rank, ref) pairs naming chunks of equal count: per chunk, one (rank, buffer, start, stop) per
        pair, all of the chunk's common valid length."""
        segments = []
        for t in range(placed[0][1]["count"]):
            spans = [self.geometry.span(ref["buffer"], ref["index"] + t) for _, ref in placed]
            length = min(stop - start for start, stop in spans)
            segments.append([(rank, ref["buffer"], start, start + length)
                             for (rank, ref), (start, _) in zip(placed, spans)])
        return segments

    def _view(self, place: tuple) -> np.ndarray:
        rank, buffer, start, stop = place
        return self.memory[rank][buffer][start:stop]

    def _store(self, place: tuple, value: np.ndarray) -> None:
        """A plain write: into scratch, it overwrites whatever packets were there."""
        rank, buffer, start, stop = place
        self.memory[rank][buffer][start:stop] = value
        if buffer == "scratch":
            self.arrived[rank][start:stop] = False

    def _flag_packets(self, rank: int, ref: dict) -> None:
        """Packet writes fill whole scratch chunks: past the data's valid length they are padding, so any
        read_packets of the chunk completes."""
        for t in range(ref["count"]):
            start, stop = self.geometry.span(ref["buffer"], ref["index"] + t)
            self.arrived[rank][start:stop] = True

    def _reduce(self, values: list) -> np.ndarray:
        result = values[0].copy()
        for value in values[1:]:
            result = self.reduction(result, value).astype(result.dtype)
        return result

    # Operations (ops.py: the data step, then the synchronization role) --------------------------------

    def _placed(self, rank: int, op: dict) -> list:
        """(rank, ref) of every chunk reference of ``op``, with its operand."""
        return [(place.operand, (place.rank, place.ref)) for place in placed_refs(op, rank, self.channels[rank])]

    def _packet_places(self, rank: int, op: dict) -> list:
        """Per chunk, the scratch places whose packets ``op`` consumes: over the common valid length of those
        chunks and the local chunks it writes."""
        placed = self._placed(rank, op)
        packets = [where for operand, where in placed if operand.access == READ and operand.packets]
        if not packets:
            return []
        local = [where for operand, where in placed if operand.access == WRITE and operand.place == LOCAL]
        return [segment[:len(packets)] for segment in self._segments(packets + local)]

    def _ready(self, rank: int, op: dict) -> bool:
        if spec_of(op["op"]).sync == WAIT:
            channel = self.channels[rank][op["channel"]]
            return self.signals[channel["peer"], channel["peer_channel"]] > self.waits[rank, op["channel"]]
        for places in self._packet_places(rank, op):
            for place_rank, _, start, stop in places:
                if not self.arrived[place_rank][start:stop].all():
                    return False
        return True

    def _execute(self, rank: int, op: dict) -> None:
        spec = spec_of(op["op"])
        if spec.operands:
            placed = self._placed(rank, op)
            sources = [where for operand, where in placed if operand.access == READ]
            destinations = [(operand, where) for operand, where in placed if operand.access == WRITE]
            for segment in self._segments(sources + [where for _, where in destinations]):
                result = self._reduce([self._view(place) for place in segment[:len(sources)]])
                for place in segment[len(sources):]:
                    self._store(place, result)
            for operand, (peer, ref) in destinations:
                if operand.packets:
                    self._flag_packets(peer, ref)
        if spec.sync == WAIT:
            self.waits[rank, op["channel"]] += 1
        elif spec.sync == SIGNAL:
            self.signals[rank, op["channel"]] += 1
        # flush and barrier order nothing in this sequentially consistent model.
