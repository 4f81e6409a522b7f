"""MSCCLang collectives: each says what every rank's buffers hold before a program runs (``init_buffers``), what
its output must hold after (``check``), and, for in-place variants, which buffer a name really points into
(``get_buffer_index``).

``chunk_factor`` is the number of chunks per block (the chunks each rank contributes, or receives per peer). The
four standard collectives also name the plan collective they lower to (``plan_collective``); a custom collective
(a subclass of ``Collective`` that overrides ``init_buffers`` and ``check``) has none: it traces, checks,
simulates and writes MSCCL-IR, but no plan can run it.
"""

from __future__ import annotations

from .buffers import Buffer, Chunk, ReduceChunk


class Collective:
    """A collective over ``num_ranks`` ranks with ``chunk_factor`` chunks per block; ``inplace`` when the output
    shares the input's memory."""

    # The plan collective (PLAN.md) this one lowers to; None for custom collectives.
    plan_collective: str | None = None

    def __init__(self, num_ranks: int, chunk_factor: int, inplace: bool):
        if not isinstance(num_ranks, int) or num_ranks < 1:
            raise ValueError(f"num_ranks must be a positive int, got {num_ranks!r}")
        if not isinstance(chunk_factor, int) or chunk_factor < 1:
            raise ValueError(f"chunk_factor must be a positive int, got {chunk_factor!r}")
        self.num_ranks = num_ranks
        self.chunk_factor = chunk_factor
        self.inplace = bool(inplace)
        self.name = "custom"

    def init_buffers(self) -> list[dict]:
        """Per rank, ``{Buffer.input: [...], Buffer.output: [...]}``: the slots before the program runs."""
        raise NotImplementedError(f"{type(self).__name__} must define init_buffers")

    def check(self, prog) -> bool:
        """Whether ``prog.buffers`` hold the collective's result; prints what is wrong."""
        raise NotImplementedError(f"{type(self).__name__} must define check")

    def get_buffer_index(self, rank: int, buffer, index: int):
        """The (buffer, index) that ``buffer[index]`` of ``rank`` really is (in-place collectives alias one
        buffer into the other)."""
        return buffer, index


def _report(rank: int, index: int, expected: str, found) -> None:
    print(f"Rank {rank} chunk {index} is incorrect: expected {expected}, found {found}")


def _fully_reduced(num_ranks: int, index: int) -> ReduceChunk:
    return ReduceChunk(-1, [Chunk(r, index) for r in range(num_ranks)])


class AllReduce(Collective):
    """Every rank ends with the reduction over ranks of every input chunk; in place, output is input."""

    plan_collective = "all_reduce"

    def __init__(self, num_ranks: int, chunk_factor: int, inplace: bool):
        super().__init__(num_ranks, chunk_factor, inplace)
        self.name = "allreduce"

    def init_buffers(self) -> list[dict]:
        buffers = []
        for r in range(self.num_ranks):
            inputs = [Chunk(r, c, -1, c) for c in range(self.chunk_factor)]
            outputs = inputs if self.inplace else [None] * self.chunk_factor
            buffers.append({Buffer.input: inputs, Buffer.output: outputs})
        return buffers

    def check(self, prog) -> bool:
        correct = True
        for r in range(self.num_ranks):
            output = prog.buffers[r][Buffer.input if self.inplace else Buffer.output]
            for c in range(self.chunk_factor):
                if output[c] != _fully_reduced(self.num_ranks, c):
                    _report(r, c, f"chunk {c} reduced over all ranks", output[c])
                    correct = False
        return correct

    def get_buffer_index(self, rank: int, buffer, index: int):
        return (Buffer.input, index) if self.inplace and buffer == Buffer.output else (buffer, index)


class AllGather(Collective):
    """Output block r (chunks ``r*chunk_factor ..``) of every rank is rank r's input; in place, a rank's input
    is its own block of the output."""

    plan_collective = "all_gather"

    def __init__(self, num_ranks: int, chunk_factor: int, inplace: bool):
        super().__init__(num_ranks, chunk_factor, inplace)
        self.name = "allgather"

    def init_buffers(self) -> list[dict]:
        buffers = []
        cf = self.chunk_factor
        for r in range(self.num_ranks):
            inputs = [Chunk(r, c, -1, r * cf + c) for c in range(cf)]
            outputs = [None] * (self.num_ranks * cf)
            if self.inplace:
                outputs[r * cf:(r + 1) * cf] = inputs
            buffers.append({Buffer.input: inputs, Buffer.output: outputs})
        return buffers

    def check(self, prog) -> bool:
        correct = True
        cf = self.chunk_factor
        for r in range(self.num_ranks):
            output = prog.buffers[r][Buffer.output]
            for index in range(self.num_ranks * cf):
                expected = Chunk(index // cf, index % cf)
                if output[index] != expected:
                    _report(r, index, f"input chunk {expected.origin_index} of rank {expected.origin_rank}",
                            output[index])
                    correct = False
        return correct

    def get_buffer_index(self, rank: int, buffer, index: int):
        if self.inplace and buffer == Buffer.input:
            return Buffer.output, rank * self.chunk_factor + index
        return buffer, index


class ReduceScatter(Collective):
    """Rank r ends with block r (input chunks ``r*chunk_factor ..``) reduced over all ranks; in place, its
    output is block r of its input."""

    plan_collective = "reduce_scatter"

    def __init__(self, num_ranks: int, chunk_factor: int, inplace: bool):
        super().__init__(num_ranks, chunk_factor, inplace)
        self.name = "reduce_scatter"

    def init_buffers(self) -> list[dict]:
        buffers = []
        cf = self.chunk_factor
        for r in range(self.num_ranks):
            inputs = [Chunk(r, i, i // cf, i % cf) for i in range(self.num_ranks * cf)]
            buffer = {Buffer.input: inputs}
            if not self.inplace:
                buffer[Buffer.output] = [None] * cf
            buffers.append(buffer)
        return buffers

    def check(self, prog) -> bool:
        correct = True
        cf = self.chunk_factor
        for r in range(self.num_ranks):
            for c in range(cf):
                buffer, index = self.get_buffer_index(r, Buffer.output, c)
                found = prog.buffers[r][buffer][index]
                if found != _fully_reduced(self.num_ranks, r * cf + c):
                    _report(r, c, f"input chunk {r * cf + c} reduced over all ranks", found)
                    correct = False
        return correct

    def get_buffer_index(self, rank: int, buffer, index: int):
        if self.inplace and buffer == Buffer.output:
            return Buffer.input, rank * self.chunk_factor + index
        return buffer, index


class AllToAll(Collective):
    """Output block b of rank r is input block r of rank b; in place, output is input."""

    plan_collective = "all_to_all"

    def __init__(self, num_ranks: int, chunk_factor: int, inplace: bool):
        super().__init__(num_ranks, chunk_factor, inplace)
        self.name = "alltoall"

    def init_buffers(self) -> list[dict]:
        buffers = []
        cf = self.chunk_factor
        for r in range(self.num_ranks):
            inputs = [Chunk(r, i, i // cf, r * cf + i % cf) for i in range(self.num_ranks * cf)]
            outputs = inputs if self.inplace else [None] * (self.num_ranks * cf)
            buffers.append({Buffer.input: inputs, Buffer.output: outputs})
        return buffers

    def check(self, prog) -> bool:
        correct = True
        cf = self.chunk_factor
        for r in range(self.num_ranks):
            for index in range(self.num_ranks * cf):
                buffer, slot = self.get_buffer_index(r, Buffer.output, index)
                found = prog.buffers[r][buffer][slot]
                expected = Chunk(index // cf, r * cf + index % cf)
                if found != expected:
                    _report(r, index, f"input chunk {expected.origin_index} of rank {expected.origin_rank}", found)
                    correct = False
        return correct

    def get_buffer_index(self, rank: int, buffer, index: int):
        return (Buffer.input, index) if self.inplace and buffer == Buffer.output else (buffer, index)
