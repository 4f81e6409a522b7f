"""MSCCLang collectives: each says what every rank's buffers hold before a program runs (``init_buffers``), what
its output must hold after (``check``), and, for in-place variants, which buffer a name really points into
(``get_buffer_index``).

``chunk_factor`` is the number of chunks per block (the chunks each rank contributes, or receives per peer). The
four standard collectives also name the plan collective they lower to (``plan_collective``). A custom collective
(a subclass of ``Collective`` that overrides ``init_buffers`` and ``expected_output`` or ``check``) traces, checks,
simulates and writes MSCCL-IR; it lowers to a plan of the permutation where its ``init_buffers`` make it one
(``permutation``: every rank's input goes whole, chunk for chunk, to one other rank's output, or nowhere, as
AllToNext's), and to none otherwise.
"""

from __future__ import annotations

import functools

from .buffers import Buffer, Chunk, ReduceChunk


class Collective:
    """A collective over ``num_ranks`` ranks with ``chunk_factor`` chunks per block; ``inplace`` when the output
    shares the input's memory."""

    # The collective's name in MSCCL-IR (``coll``).
    name = "custom"
    # In place, (the buffer whose slots live in the other, that other buffer, whether slot i of the first is slot
    # i of the rank's own block of the other rather than slot i); None where no buffer aliases another.
    in_place_alias: tuple | None = None

    def __init__(self, num_ranks: int, chunk_factor: int, inplace: bool):
        if not isinstance(num_ranks, int) or num_ranks < 1:
            raise ValueError(f"num_ranks must be a positive int, got {num_ranks!r}")
        if not isinstance(chunk_factor, int) or chunk_factor < 1:
            raise ValueError(f"chunk_factor must be a positive int, got {chunk_factor!r}")
        self.num_ranks = num_ranks
        self.chunk_factor = chunk_factor
        self.inplace = bool(inplace)

    def init_buffers(self) -> list[dict]:
        """Per rank, ``{Buffer.input: [...], Buffer.output: [...]}``: the slots before the program runs."""
        raise NotImplementedError(f"{type(self).__name__} must define init_buffers")

    @property
    def plan_collective(self) -> str | None:
        """The plan collective (PLAN.md) this one lowers to: the standard collectives name theirs; a custom one is
        ``"permute"`` where it is a permutation (``permutation``), else None (no plan runs it)."""
        return None if self.permutation is None else "permute"

    @functools.cached_property
    def permutation(self) -> list[list[int]] | None:
        """A custom collective's [source, destination] pairs where its ``init_buffers`` make it a permutation: one
        block of ``chunk_factor`` chunks in and out, every input chunk ``c`` of a rank bound for chunk ``c`` of one
        and the same other rank (``Chunk.dst_rank``, ``dst_index``), or every input slot of a rank empty (it sends
        nothing), no rank receiving twice. None otherwise, and for the standard collectives. The lowered plan is
        verified against these pairs, so a hint that does not match the program's routing is refused."""
        if type(self).plan_collective is not vars(Collective)["plan_collective"] or self.inplace:
            return None
        return _permutation(self.init_buffers(), self.chunk_factor)

    def rank_buffers(self, rank: int, inputs: list, output_chunks: int) -> dict:
        """The buffers of ``rank`` before the program runs, for a standard collective: ``inputs`` and
        ``output_chunks`` empty output slots; in place, the aliased buffer (``in_place_alias``) has no slots of its
        own: the output is the input, holds it at the rank's block, or lives at the rank's block of the input."""
        if not self.inplace:
            return {Buffer.input: inputs, Buffer.output: [None] * output_chunks}
        aliased, _, at_own_block = self.in_place_alias
        if not at_own_block:
            return {Buffer.input: inputs, Buffer.output: inputs}
        if aliased == Buffer.output:
            return {Buffer.input: inputs}
        cf = self.chunk_factor
        outputs = [None] * output_chunks
        outputs[rank * cf:(rank + 1) * cf] = inputs
        return {Buffer.input: inputs, Buffer.output: outputs}

    def check(self, prog) -> bool:
        """Whether ``prog.buffers`` hold the collective's result (``expected_output``); prints what is wrong."""
        correct = True
        for rank in range(self.num_ranks):
            for index, (buffer, slot), expected, what in self.expected_output(rank):
                found = prog.buffers[rank][buffer][slot]
                if found != expected:
                    print(f"Rank {rank} chunk {index} is incorrect: expected {what}, found {found}")
                    correct = False
        return correct

    def expected_output(self, rank: int):
        """Per output chunk of ``rank``: (its index, the (buffer, index) it really is, the chunk it must hold, that
        chunk in words). A custom collective defines this or overrides ``check``."""
        raise NotImplementedError(f"{type(self).__name__} must define check or expected_output")

    def get_buffer_index(self, rank: int, buffer, index: int):
        """The (buffer, index) that ``buffer[index]`` of ``rank`` really is (in-place collectives alias one
        buffer into the other: ``in_place_alias``)."""
        if self.inplace and self.in_place_alias is not None and buffer == self.in_place_alias[0]:
            _, host, at_own_block = self.in_place_alias
            return host, rank * self.chunk_factor + index if at_own_block else index
        return buffer, index


def _permutation(buffers: list[dict], chunk_factor: int) -> list[list[int]] | None:
    """The pairs of ``Collective.permutation`` from the slots before the program runs, or None."""
    pairs = []
    for rank, slots in enumerate(buffers):
        inputs, outputs = slots.get(Buffer.input, []), slots.get(Buffer.output, [])
        if len(inputs) != chunk_factor or len(outputs) != chunk_factor:
            return None
        if all(chunk is None for chunk in inputs):
            continue
        if any(not isinstance(chunk, Chunk) or chunk.dst_index != c for c, chunk in enumerate(inputs)):
            return None
        destinations = {chunk.dst_rank for chunk in inputs}
        if len(destinations) != 1:
            return None
        (destination,) = destinations
        if not 0 <= destination < len(buffers):
            return None
        pairs.append([rank, destination])
    received = [dst for _, dst in pairs]
    return pairs if pairs and len(set(received)) == len(received) else None


def _fully_reduced(num_ranks: int, index: int) -> tuple[ReduceChunk, str]:
    """Input chunk ``index`` reduced over all ranks, and in words."""
    return ReduceChunk(-1, [Chunk(r, index) for r in range(num_ranks)]), f"input chunk {index} reduced over all ranks"


def _input_chunk(rank: int, index: int) -> tuple[Chunk, str]:
    """Input chunk ``index`` of ``rank``, and in words."""
    return Chunk(rank, index), f"input chunk {index} of rank {rank}"


class AllReduce(Collective):
    """Every rank ends with the reduction over ranks of every input chunk; in place, output is input."""

    plan_collective = "all_reduce"
    name = "allreduce"
    in_place_alias = (Buffer.output, Buffer.input, False)

    def init_buffers(self) -> list[dict]:
        cf = self.chunk_factor
        return [self.rank_buffers(r, [Chunk(r, c, -1, c) for c in range(cf)], cf) for r in range(self.num_ranks)]

    def expected_output(self, rank: int):
        for c in range(self.chunk_factor):
            yield (c, self.get_buffer_index(rank, Buffer.output, c), *_fully_reduced(self.num_ranks, c))


class AllGather(Collective):
    """Output block r (chunks ``r*chunk_factor ..``) of every rank is rank r's input; in place, a rank's input
    is its own block of the output."""

    plan_collective = "all_gather"
    name = "allgather"
    in_place_alias = (Buffer.input, Buffer.output, True)

    def init_buffers(self) -> list[dict]:
        cf = self.chunk_factor
        return [self.rank_buffers(r, [Chunk(r, c, -1, r * cf + c) for c in range(cf)], self.num_ranks * cf)
                for r in range(self.num_ranks)]

    def expected_output(self, rank: int):
        cf = self.chunk_factor
        for index in range(self.num_ranks * cf):
            yield (index, self.get_buffer_index(rank, Buffer.output, index), *_input_chunk(index // cf, index % cf))


class ReduceScatter(Collective):
    """Rank r ends with block r (input chunks ``r*chunk_factor ..``) reduced over all ranks; in place, its
    output is block r of its input."""

    plan_collective = "reduce_scatter"
    name = "reduce_scatter"
    in_place_alias = (Buffer.output, Buffer.input, True)

    def init_buffers(self) -> list[dict]:
        cf = self.chunk_factor
        return [self.rank_buffers(r, [Chunk(r, i, i // cf, i % cf) for i in range(self.num_ranks * cf)], cf)
                for r in range(self.num_ranks)]

    def expected_output(self, rank: int):
        cf = self.chunk_factor
        for c in range(cf):
            yield (c, self.get_buffer_index(rank, Buffer.output, c), *_fully_reduced(self.num_ranks, rank * cf + c))


class AllToAll(Collective):
    """Output block b of rank r is input block r of rank b; in place, output is input."""

    plan_collective = "all_to_all"
    name = "alltoall"
    in_place_alias = (Buffer.output, Buffer.input, False)

    def init_buffers(self) -> list[dict]:
        cf, n = self.chunk_factor, self.num_ranks
        return [self.rank_buffers(r, [Chunk(r, i, i // cf, r * cf + i % cf) for i in range(n * cf)], n * cf)
                for r in range(n)]

    def expected_output(self, rank: int):
        cf = self.chunk_factor
        for index in range(self.num_ranks * cf):
            yield (index, self.get_buffer_index(rank, Buffer.output, index),
                   *_input_chunk(index // cf, rank * cf + index % cf))
