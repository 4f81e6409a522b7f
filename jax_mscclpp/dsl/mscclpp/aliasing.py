"""In-place collectives: one MSCCL++ buffer where our plans have two.

An in-place MSCCL++ collective has one buffer per rank, which the input and the output are views of: for
all_reduce and all_to_all they are the same chunks; for all_gather the input is block ``r`` of rank r's output;
for reduce_scatter the output is block ``r`` of its input. Our plans keep input (read-only, the caller's) and
output apart, so each chunk of that one buffer (its "canonical" index, in the larger view) lives in our input
until the program first writes it, and in our output from then on:

* a write goes to our output (a chunk with no place in the output, the rest of an in-place reduce_scatter's
  input, cannot be written: our input is read-only);
* a read goes to our output once the program has written the chunk (in program order), to our input before;
* at the end, every chunk of the output that the program never wrote keeps the input's value: a copy, which the
  translation appends to thread block 0.

Program order is the order of the DSL calls on each rank; the verifier then checks that execution keeps it.
"""

from __future__ import annotations

from .. import geometry
from .trace import COPY, Span, Step
from .errors import UnsupportedConstruct


def resolve(steps: list[Step], collective: str, world_size: int, chunks_per_block: int) -> list[Step]:
    """``steps`` with the input and output chunks of an in-place program placed in our buffers, followed by the
    copies of the output chunks it never writes."""
    views = _Views(collective, world_size, chunks_per_block)
    out = []
    for step in steps:
        srcs = tuple(views.read(span, step) for span in step.srcs)
        dst = views.write(step.dst, step) if step.dst is not None else None
        out.append(step.with_spans(dst, srcs))
    return out + views.untouched_copies()


class _Views:
    def __init__(self, collective: str, world_size: int, chunks_per_block: int):
        self.world_size = world_size
        input_blocks, output_blocks = geometry.buffer_blocks(collective, world_size)
        self.input_chunks = input_blocks * chunks_per_block
        self.output_chunks = output_blocks * chunks_per_block
        self.chunks_per_block = chunks_per_block
        self.collective = collective
        self.written = [set() for _ in range(world_size)]

    # canonical index <-> our input / output index (None: not part of that buffer)
    def _window(self, rank: int) -> int:
        """Offset of the smaller view inside the larger one."""
        return rank * self.chunks_per_block if self.collective in ("all_gather", "reduce_scatter") else 0

    def canonical(self, rank: int, buffer: str, index: int) -> int:
        smaller = "input" if self.collective == "all_gather" else "output"
        return index + self._window(rank) if buffer == smaller else index

    def input_index(self, rank: int, c: int) -> int | None:
        i = c - self._window(rank) if self.collective == "all_gather" else c
        return i if 0 <= i < self.input_chunks else None

    def output_index(self, rank: int, c: int) -> int | None:
        o = c - self._window(rank) if self.collective == "reduce_scatter" else c
        return o if 0 <= o < self.output_chunks else None

    def _canonical_range(self, span: Span) -> range:
        start = self.canonical(span.rank, span.buffer, span.index)
        return range(start, start + span.size)

    def read(self, span: Span, step: Step) -> Span:
        if span.buffer == "scratch":
            return span
        chunks = self._canonical_range(span)
        written = {c in self.written[span.rank] for c in chunks}
        if len(written) > 1:
            raise UnsupportedConstruct(step.call, f"in place, {span} holds chunks already written and chunks not yet "
                                                  "written, which live in our output and our input: read them apart",
                                       step.src_line)
        if written == {False} and self.input_index(span.rank, chunks[0]) is not None:
            return Span(span.rank, "input", self.input_index(span.rank, chunks[0]), span.size)
        return self._output(span, chunks, step)

    def write(self, span: Span, step: Step) -> Span:
        if span.buffer == "scratch":
            return span
        chunks = self._canonical_range(span)
        placed = self._output(span, chunks, step)
        self.written[span.rank].update(chunks)
        return placed

    def _output(self, span: Span, chunks: range, step: Step) -> Span:
        first, last = self.output_index(span.rank, chunks[0]), self.output_index(span.rank, chunks[-1])
        if first is None or last is None:
            raise UnsupportedConstruct(step.call, f"in place, {span} lies outside rank {span.rank}'s output block; "
                                                  "our input is read-only: write those chunks to a scratch buffer",
                                       step.src_line)
        return Span(span.rank, "output", first, span.size)

    def untouched_copies(self) -> list[Step]:
        copies = []
        for rank in range(self.world_size):
            run = []
            for o in range(self.output_chunks):
                c = self.canonical(rank, "output", o)
                i = self.input_index(rank, c)
                if i is not None and c not in self.written[rank] and (not run or run[-1] == (o - 1, i - 1)):
                    run.append((o, i))
                    continue
                copies += self._copy(rank, run)
                run = [(o, i)] if i is not None and c not in self.written[rank] else []
            copies += self._copy(rank, run)
        return copies

    @staticmethod
    def _copy(rank: int, run: list) -> list[Step]:
        if not run:
            return []
        (o, i), size = run[0], len(run)
        return [Step(COPY, rank, 0, "in-place output kept from the input", dst=Span(rank, "output", o, size),
                     srcs=(Span(rank, "input", i, size),), src_line=None)]
