"""What an MSCCL++ program did, call by call, in the terms both of its APIs share: the trace that translate.py
turns into our Program.

MSCCL++'s DSL is written for all ranks at once, like ours, but its channels are endpoints owned by one rank and
shared by thread blocks, and its packet reads name no channel; ours are pipes between two thread blocks. So
nothing is lowered while the program is written: every call becomes one ``Step`` (after a thread block group is
cut into its members' shares), and the translation, which sees the whole program, pairs signals with waits and
packet writes with their readers.
"""

from __future__ import annotations

import dataclasses

# Step kinds.
COPY, REDUCE, UNPACK = "copy", "reduce", "unpack"
PUT, SIGNAL, WAIT, FLUSH = "put", "signal", "wait", "flush"
BARRIER, SWITCH_REDUCE, SWITCH_BROADCAST = "barrier", "switch_reduce", "switch_broadcast"


@dataclasses.dataclass(frozen=True)
class Span:
    """``size`` consecutive chunks from ``index`` of one buffer ("input", "output" or "scratch") of one rank."""

    rank: int
    buffer: str
    index: int
    size: int

    def part(self, start: int, stop: int) -> Span:
        """Chunks ``[start, stop)`` of this span."""
        return Span(self.rank, self.buffer, self.index + start, stop - start)

    def __str__(self) -> str:
        return f"rank {self.rank} {self.buffer}[{self.index}:{self.index + self.size}]"


@dataclasses.dataclass(frozen=True)
class Link:
    """One direction of an MSCCL++ channel of ``type`` ("memory" or "port"): ``sender`` puts and signals,
    ``receiver`` waits. ``key`` tells the channels between the same two ranks apart (the channel API: the
    channel's position among those the sender made toward the receiver; the chunk API: the thread block)."""

    type: str
    sender: int
    receiver: int
    key: object


@dataclasses.dataclass
class Step:
    """One MSCCL++ call on one thread block of one rank.

    ``dst`` is written, ``srcs`` read; ``packet_srcs`` are scratch chunks read as LL packets (a packet reduce);
    ``link`` is the channel direction of a put, signal, wait or flush (``packets``: a put of LL packets);
    ``group`` is the thread blocks of a barrier or the ranks of a switch channel; ``call`` names the MSCCL++ call
    for messages, ``src_line`` the program line that made it (set when recorded)."""

    kind: str
    rank: int
    tb: int
    call: str
    dst: Span | None = None
    srcs: tuple = ()
    packet_srcs: tuple = ()
    link: Link | None = None
    packets: bool = False
    group: tuple = ()
    src_line: str | None = None

    def with_spans(self, dst: Span | None, srcs: tuple) -> Step:
        return dataclasses.replace(self, dst=dst, srcs=tuple(srcs))


def member_shares(tb_list: list[int], size: int):
    """(thread block, start, stop) of each member of a thread block group over ``size`` chunks: member g takes
    ``[g*size//G, (g+1)*size//G)`` (our ThreadBlockGroup's rule), members with no chunk left out."""
    count = len(tb_list)
    for g, tb in enumerate(tb_list):
        start, stop = g * size // count, (g + 1) * size // count
        if stop > start:
            yield tb, start, stop
