"""What MSCCLang buffers hold: the buffer names, and the symbolic chunks that a collective places in them.

Every rank has an ``input`` and an ``output`` buffer, and any number of scratch buffers named by strings
(``'scratch'``, ``f'copy_{n}'``, ...) that grow as chunks are written into them. A buffer is a list of slots;
a slot holds a ``Chunk`` (an input chunk, by the rank and index it started at), a ``ReduceChunk`` (a reduction of
input chunks) or None (nothing yet). Collectives fill the input slots (``Collective.init_buffers``) and check the
output slots (``Collective.check``); a program moves and reduces them.
"""

from __future__ import annotations

import dataclasses
import enum


class Buffer(enum.Enum):
    """The named buffers of a rank; the values are MSCCL-IR's buffer codes. Scratch buffers are named by
    strings; ``Buffer.scratch`` is the code of all of them in MSCCL-IR."""

    input = "i"
    output = "o"
    scratch = "s"

    def __str__(self) -> str:
        return self.value

    def __lt__(self, other) -> bool:
        return self.value < other.value


def is_scratch(buffer) -> bool:
    """Whether ``buffer`` (a Buffer or a scratch buffer's name) is a scratch buffer."""
    return buffer not in (Buffer.input, Buffer.output)


def buffer_label(buffer) -> str:
    """``input``, ``output`` or the scratch buffer's name, for messages."""
    return buffer.name if isinstance(buffer, Buffer) else str(buffer)


@dataclasses.dataclass(eq=False)
class Chunk:
    """An input chunk: rank ``origin_rank``'s input chunk ``origin_index``. ``dst_rank`` / ``dst_index`` say where
    the collective wants it to end (-1: on every rank, or unknown); they are hints for programs, not checked."""

    origin_rank: int
    origin_index: int
    dst_rank: int = -1
    dst_index: int = -1

    def key(self) -> tuple[int, int]:
        return (self.origin_rank, self.origin_index)

    def reduce(self, dst: int, other) -> ReduceChunk:
        """This chunk reduced with ``other`` (a Chunk or ReduceChunk) on rank ``dst``."""
        return ReduceChunk(dst, [self]).reduce(dst, other)

    def __eq__(self, other) -> bool:
        return type(other) is Chunk and self.key() == other.key()

    def __hash__(self) -> int:
        return hash(self.key())

    def __lt__(self, other: Chunk) -> bool:
        return self.key() < other.key()


@dataclasses.dataclass(eq=False)
class ReduceChunk:
    """A reduction of input chunks, made on rank ``creation_rank``. Two are equal when they reduce the same
    chunks, in any order and wherever they were made."""

    creation_rank: int
    chunks: list

    def reduce(self, dst: int, other) -> ReduceChunk:
        """This reduction combined with ``other`` (a Chunk or ReduceChunk)."""
        if isinstance(other, ReduceChunk):
            return ReduceChunk(self.creation_rank, self.chunks + other.chunks)
        if isinstance(other, Chunk):
            return ReduceChunk(self.creation_rank, self.chunks + [other])
        raise TypeError(f"cannot reduce a chunk with {other!r}")

    def contributions(self) -> tuple:
        return tuple(sorted(chunk.key() for chunk in self.chunks))

    def sort(self) -> None:
        self.chunks.sort()

    def __eq__(self, other) -> bool:
        return type(other) is ReduceChunk and self.contributions() == other.contributions()

    def __hash__(self) -> int:
        return hash(self.contributions())


class ScratchBuffer(list):
    """A scratch buffer of one rank: a list of slots that grows when a slot past its end is written (the slots
    in between hold None). ``instance_size`` is its length, the chunks one instance of the program uses."""

    def __init__(self, name: str):
        super().__init__()
        self.name = name

    def instance_size(self) -> int:
        return len(self)

    def __setitem__(self, index, value) -> None:
        if isinstance(index, int) and index >= len(self):
            self.extend([None] * (index + 1 - len(self)))
        super().__setitem__(index, value)
