"""``mscclpp.language.collectives``: the collectives a program implements, and their buffer sizes in chunks.

A collective of ``num_ranks`` ranks and ``chunk_factor`` c has the block layout of our plans (PLAN.md, "Buffer
geometry") with c chunks per block, except AllReduce, whose single block MSCCL++ sizes per API: c chunks in the
chunk API (``MSCCLPPProgram``), ``num_ranks * c`` in the channel API (``CollectiveProgram``).
"""

from __future__ import annotations

from .. import geometry
from .errors import UnsupportedConstruct

__all__ = ["AllGather", "AllReduce", "AllToAll", "Broadcast", "Collective", "ReduceScatter", "SendRecv",
           "TestCollective"]

CHUNK_API, CHANNEL_API = "chunk", "channel"


class Collective:
    """A collective of ``num_ranks`` ranks cut into ``chunk_factor`` chunks per block; ``inplace`` makes the input
    a part of the output buffer, or the output a part of the input (aliasing.py)."""

    plan_collective: str | None = None  # our name of the collective (PLAN.md, "collective")
    name = "custom"

    def __init__(self, num_ranks: int, chunk_factor: int, inplace: bool, *args, **kwargs):
        if self.plan_collective is None:
            raise UnsupportedConstruct(f"{type(self).__name__}(...)", "our plans implement all_reduce, all_gather, "
                                       "reduce_scatter and all_to_all only")
        if not isinstance(num_ranks, int) or num_ranks < 1 or not isinstance(chunk_factor, int) or chunk_factor < 1:
            raise ValueError(f"{type(self).__name__}: num_ranks and chunk_factor must be positive ints, got "
                             f"{num_ranks!r} and {chunk_factor!r}")
        self.num_ranks = num_ranks
        self.chunk_factor = chunk_factor
        self.inplace = bool(inplace)

    def chunks_per_block(self, api: str) -> int:
        """Chunks per block of input and output in ``api`` (CHUNK_API or CHANNEL_API)."""
        return self.chunk_factor

    def buffer_chunks(self, api: str) -> tuple[int, int]:
        """(input chunks, output chunks) of one rank in ``api``."""
        input_blocks, output_blocks = geometry.buffer_blocks(self.plan_collective, self.num_ranks)
        per_block = self.chunks_per_block(api)
        return input_blocks * per_block, output_blocks * per_block


class AllReduce(Collective):
    plan_collective = "all_reduce"
    name = "allreduce"

    def chunks_per_block(self, api: str) -> int:
        return self.chunk_factor if api == CHUNK_API else self.num_ranks * self.chunk_factor


class AllGather(Collective):
    plan_collective = "all_gather"
    name = "allgather"


class ReduceScatter(Collective):
    plan_collective = "reduce_scatter"
    name = "reducescatter"


class AllToAll(Collective):
    plan_collective = "all_to_all"
    name = "alltoall"


class SendRecv(Collective):
    """MSCCL++'s point-to-point test collective: no plan collective."""


class Broadcast(Collective):
    """No plan collective."""


class TestCollective(Collective):
    """MSCCL++'s collective of free buffer sizes, for its unit tests: no plan collective."""
