"""Channels between ranks, as the DSL sees them: one-sided, asynchronous, typed by I/O mode.

``MemoryChannel`` and ``PortChannel`` are directed pipes from a sender rank to a receiver rank: the sender
writes into the receiver's buffers (``put``, ``put_packets``), ``signal``s and ``flush``es; the receiver
``wait``s for the sender's signals (the k-th wait returns once the k-th signal has been sent) and reads the
packets it got (``read_packets``). A pipe lowers to one channel endpoint on each of the two ranks; every use of
one endpoint must come from one thread block (its semaphore's expected value lives there). A pipe from a rank
to itself orders two thread blocks of that rank.

``SwitchChannel`` spans a group of ranks and binds their scratch buffers to one multicast address:
``reduce`` reads a chunk from every member through the switch and reduces it, ``broadcast`` writes a chunk
to every member. It carries no synchronization of its own.
"""

from __future__ import annotations

from .program import Chunk, Program, ThreadBlockGroup, program_error, require_rank


class _Pipe:
    """The operations memory and port channels share."""

    type = ""

    def __init__(self, program: Program, src: int, dst: int, protocol: str):
        for rank in (src, dst):
            if not 0 <= rank < program.world_size:
                raise program_error(f"rank {rank} is outside a world of {program.world_size}")
        self.program = program
        self.src = src
        self.dst = dst
        self.protocol = protocol
        program.channels.append(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.src} -> {self.dst}, {self.protocol})"

    def _send(self, name: str, tb, dst: Chunk | None = None, src: Chunk | None = None) -> None:
        args = {}
        if dst is not None:
            require_rank(dst, self.dst, f"{name} destination")
            require_rank(src, self.src, f"{name} source")
            args = {"dst": dst, "src": src}
        self.program.record(name, self.src, tb, args, channel=self)

    def put(self, dst: Chunk, src: Chunk, tb: int | ThreadBlockGroup = 0) -> None:
        """Copy ``src`` (sender) to ``dst`` (receiver). Visible to the receiver after a later signal/wait."""
        self._send("put", tb, dst, src)

    def signal(self, tb: int | ThreadBlockGroup = 0) -> None:
        """Release everything this thread block wrote before, including its puts on this channel."""
        self._send("signal", tb)

    def put_with_signal(self, dst: Chunk, src: Chunk, tb: int | ThreadBlockGroup = 0) -> None:
        """``put`` then ``signal`` in one operation."""
        self._send("put_with_signal", tb, dst, src)

    def flush(self, tb: int | ThreadBlockGroup = 0) -> None:
        """Wait until this thread block's puts on this channel have finished reading their sources."""
        self._send("flush", tb)

    def wait(self, tb: int | ThreadBlockGroup = 0) -> None:
        """On the receiver: wait for the sender's next signal; what it released is visible afterwards."""
        self.program.record("wait", self.dst, tb, {}, channel=self)


class MemoryChannel(_Pipe):
    """Thread-copy over peer memory. HB: ``put`` + ``signal``/``wait``. LL: ``put_packets``/``read_packets``,
    where every 4 data bytes travel with a flag, so a read needs no wait."""

    type = "memory"

    def __init__(self, program: Program, src: int, dst: int, protocol: str | None = None):
        super().__init__(program, src, dst, protocol or program.protocol)

    def put_packets(self, dst: Chunk, src: Chunk, tb: int | ThreadBlockGroup = 0) -> None:
        """Write ``src`` (sender) as LL packets into ``dst`` (a scratch chunk of the receiver)."""
        self._send("put_packets", tb, dst, src)

    def read_packets(self, dst: Chunk, src: Chunk, tb: int | ThreadBlockGroup = 0) -> None:
        """On the receiver: wait for the packets this channel's sender put into ``src`` (scratch) and unpack
        them into ``dst``."""
        require_rank(dst, self.dst, "read_packets destination")
        require_rank(src, self.dst, "read_packets source")
        self.program.record("read_packets", self.dst, tb, {"dst": dst, "src": src}, channel=self)


class PortChannel(_Pipe):
    """DMA through a host proxy: ``put`` is asynchronous and keeps reading its source until ``flush``."""

    type = "port"

    def __init__(self, program: Program, src: int, dst: int):
        super().__init__(program, src, dst, "HB")


class SwitchChannel:
    """In-switch reduction and multicast over the scratch buffers of a group of ranks."""

    type = "switch"
    protocol = "HB"

    def __init__(self, program: Program, ranks):
        self.program = program
        self.ranks = tuple(sorted(set(ranks)))
        if not self.ranks or not all(0 <= r < program.world_size for r in self.ranks):
            raise program_error(f"switch channel ranks {self.ranks} must be ranks of the program")
        program.channels.append(self)

    def __repr__(self) -> str:
        return f"SwitchChannel({list(self.ranks)})"

    def _member_op(self, name: str, dst: Chunk, src: Chunk, tb) -> None:
        if not isinstance(dst, Chunk):
            raise program_error(f"{name} destination must be a chunk, got {dst!r}")
        require_rank(src, dst.rank, f"{name} source")
        if dst.rank not in self.ranks:
            raise program_error(f"rank {dst.rank} is not a member of {self!r}")
        self.program.record(name, dst.rank, tb, {"dst": dst, "src": src}, channel=self)

    def reduce(self, dst: Chunk, src: Chunk, tb: int | ThreadBlockGroup = 0) -> None:
        """dst (local) <- the reduction over all members of their scratch chunk ``src``."""
        if getattr(src, "buffer", None) != "scratch":
            raise program_error("switch reduce reads the multicast scratch buffer")
        self._member_op("switch_reduce", dst, src, tb)

    def broadcast(self, dst: Chunk, src: Chunk, tb: int | ThreadBlockGroup = 0) -> None:
        """Scratch chunk ``dst`` of every member <- ``src`` (local)."""
        if getattr(dst, "buffer", None) != "scratch":
            raise program_error("switch broadcast writes the multicast scratch buffer")
        self._member_op("switch_broadcast", dst, src, tb)


def all_pairs(program: Program, channel_type=MemoryChannel, **kwargs) -> dict[tuple[int, int], _Pipe]:
    """A pipe for every ordered pair of distinct ranks, keyed by (sender, receiver)."""
    n = program.world_size
    return {(s, d): channel_type(program, s, d, **kwargs) for s in range(n) for d in range(n) if s != d}
