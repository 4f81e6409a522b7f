"""Programs: the global view of one collective over all ranks.

A ``Program`` holds every rank's buffers (input, output, scratch) cut into chunks, the channels between ranks
(channels.py) and, in DSL call order, every operation of every rank, each placed on a thread block. Operations
of one thread block run in the order they were written; thread blocks and ranks run concurrently, ordered only
by channel signal/wait (PLAN.md, "Execution model"). The buffer geometry is symbolic: element counts are bound
when the plan runs, rank count and replication when it is lowered.
"""

from __future__ import annotations

import dataclasses
import inspect
import os

from . import geometry, ops
from .errors import VerificationError
from .lowering import lower
from .verify import verify_plan

PROTOCOLS = ("LL", "HB")

_DSL_DIR = os.path.dirname(os.path.abspath(__file__))
# Frames in these files belong to the DSL itself; the source line of an operation is its caller's.
_DSL_FILES = frozenset(os.path.join(_DSL_DIR, name) for name in ("program.py", "channels.py"))


def caller_line() -> str | None:
    """``file:line`` of the innermost frame outside the DSL implementation (the program's own line)."""
    frame = inspect.currentframe()
    try:
        while frame is not None and os.path.abspath(frame.f_code.co_filename) in _DSL_FILES:
            frame = frame.f_back
        return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}" if frame else None
    finally:
        del frame


def program_error(detail: str) -> VerificationError:
    """A mistake caught while the program is written, located at the DSL line being run."""
    return VerificationError("program", detail, src_line=caller_line())


@dataclasses.dataclass(frozen=True)
class ThreadBlockGroup:
    """Thread blocks that perform one operation together.

    Each member takes an equal, contiguous share of the operation's chunks (chunk granularity: cut buffers
    into more chunks for finer sharing) and, on a memory or port channel, its own copy of the channel: member
    g of a group signals and waits on copy g, so a receiver that waits with a group of the same size and reads
    with the same group sees, in each member, exactly the share its partner sent.
    """

    tbs: tuple[int, ...]

    def __init__(self, tbs):
        tbs = tuple(tbs)
        if not tbs or len(set(tbs)) != len(tbs) or any(not isinstance(t, int) or t < 0 for t in tbs):
            raise program_error(f"a thread block group needs distinct non-negative thread block ids, got {tbs}")
        object.__setattr__(self, "tbs", tbs)


def require_rank(chunk: Chunk, rank: int, role: str) -> None:
    """``chunk`` must be a chunk of ``rank``'s buffers (``role`` says which argument, for the message)."""
    if not isinstance(chunk, Chunk):
        raise program_error(f"{role} must be a chunk (buffer[index] or buffer[start:stop]), got {chunk!r}")
    if chunk.rank != rank:
        raise program_error(f"{role} must be a chunk of rank {rank}, got one of rank {chunk.rank}")


def members(tb: int | ThreadBlockGroup) -> tuple[int, ...]:
    """The thread blocks an operation placed on ``tb`` runs on, in group order."""
    return tb.tbs if isinstance(tb, ThreadBlockGroup) else (tb,)


@dataclasses.dataclass(frozen=True)
class Chunk:
    """``count`` consecutive chunks (block-major index) of one buffer of one rank."""

    rank: int
    buffer: str
    index: int
    count: int = 1


class Buffer:
    """One buffer of one rank, or a view of some of its blocks, indexed by chunk.

    Indexing is not bounds-checked here: a chunk past the end is reported by the verifier, which can name the
    operation and thread block that use it.
    """

    def __init__(self, rank: int, name: str, chunks_per_block: int, size: int, offset: int = 0):
        self.rank = rank
        self.name = name
        self.chunks_per_block = chunks_per_block
        self.size = size
        self.offset = offset

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, key: int | slice) -> Chunk:
        if isinstance(key, slice):
            if key.step not in (None, 1):
                raise program_error("chunk slices are contiguous: no step")
            start = 0 if key.start is None else key.start
            stop = self.size if key.stop is None else key.stop
            if start < 0 or stop <= start:
                raise program_error(f"empty or negative chunk slice {start}:{stop} of {self.name}")
            return Chunk(self.rank, self.name, self.offset + start, stop - start)
        if not isinstance(key, int) or key < 0:
            raise program_error(f"chunk index must be a non-negative int, got {key!r}")
        return Chunk(self.rank, self.name, self.offset + key)

    def block(self, block: int) -> Buffer:
        """The chunks of one block (input of reduce_scatter/all_to_all, output of all_gather/all_to_all)."""
        return Buffer(self.rank, self.name, self.chunks_per_block, self.chunks_per_block,
                      self.offset + block * self.chunks_per_block)


@dataclasses.dataclass
class Operation:
    """One DSL call: ``args`` maps plan field names to chunks (or lists of chunks); ``channel`` is the DSL
    channel object for channel operations."""

    name: str
    rank: int
    tb: int | ThreadBlockGroup
    args: dict
    channel: object = None
    src_line: str | None = None

    @property
    def thread_blocks(self) -> tuple[int, ...]:
        """The thread blocks this operation runs on, in group order (``members`` of its ``tb``)."""
        return members(self.tb)


class Rank:
    """One rank's buffers and its local operations (copy, reduce, barrier)."""

    def __init__(self, program: Program, rank: int):
        self.program = program
        self.rank = rank
        layout = program.buffers
        self.input, self.output, self.scratch = (
            Buffer(rank, name, layout[name]["chunks_per_block"], geometry.chunk_total(layout, name))
            for name in geometry.BUFFERS)

    def copy(self, dst: Chunk, src: Chunk, tb: int | ThreadBlockGroup = 0) -> None:
        """dst <- src, chunk by chunk, both on this rank."""
        require_rank(dst, self.rank, "copy destination")
        require_rank(src, self.rank, "copy source")
        self.program.record("copy", self.rank, tb, {"dst": dst, "src": src})

    def reduce(self, dst: Chunk, srcs: list[Chunk], tb: int | ThreadBlockGroup = 0) -> None:
        """dst <- srcs[0] (+) srcs[1] (+) ..., element-wise; dst may be one of srcs (in place)."""
        if len(srcs) < 2:
            raise program_error("reduce needs at least two sources")
        require_rank(dst, self.rank, "reduce destination")
        for src in srcs:
            require_rank(src, self.rank, "reduce source")
        self.program.record("reduce", self.rank, tb, {"dst": dst, "srcs": list(srcs)})

    def barrier(self, tb: int | ThreadBlockGroup = 0) -> None:
        """A thread block barrier. Lowering keeps it only where it orders conflicting accesses."""
        self.program.record("barrier", self.rank, tb, {})


class Program:
    """A collective algorithm written once for all ranks.

    ``chunks`` is the number of chunks per block of input and output, ``scratch_chunks`` the number of scratch
    chunks per rank; ``protocol`` is the default protocol of memory channels. Rank count is fixed here; element
    counts are bound when the plan runs, and ``lower(instances=k)`` replicates the program k times over k-times
    finer chunks and k times the thread blocks and channels. A program of ``"permute"`` names its
    ``permutation``: the (source, destination) pairs of ranks it implements (PLAN.md, "permutation").
    """

    def __init__(self, collective: str, world_size: int, *, name: str | None = None, chunks: int = 1,
                 scratch_chunks: int = 0, protocol: str = "HB", permutation=None):
        if collective not in geometry.COLLECTIVES:
            raise program_error(f"unknown collective {collective!r}; one of {geometry.COLLECTIVES}")
        if (permutation is None) != (collective != "permute"):
            raise program_error("a program of the permutation, and only one, names its permutation: "
                                "Program('permute', world_size, permutation=[(source, destination), ...])")
        if world_size < 1 or chunks < 1 or scratch_chunks < 0:
            raise program_error("world_size and chunks must be positive, scratch_chunks non-negative")
        if protocol not in PROTOCOLS:
            raise program_error(f"protocol must be one of {PROTOCOLS}")
        self.collective = collective
        self.world_size = world_size
        self.name = name or collective
        self.protocol = protocol
        self.buffers = geometry.buffer_layout(collective, world_size, chunks, scratch_chunks)
        self.permutation = None if permutation is None else [[int(src), int(dst)] for src, dst in permutation]
        self.ranks = [Rank(self, r) for r in range(world_size)]
        self.channels: list = []
        self.operations: list[Operation] = []

    def rank(self, rank: int) -> Rank:
        return self.ranks[rank]

    def peers(self, rank: int) -> list[int]:
        """The other ranks, starting after ``rank`` (so ranks do not all address the same peer first)."""
        return [(rank + k) % self.world_size for k in range(1, self.world_size)]

    def record(self, name: str, rank: int, tb: int | ThreadBlockGroup, args: dict, channel=None) -> None:
        """Append one operation run by ``rank`` on ``tb``: ``args`` maps the plan fields of the operation's
        operands (ops.py) to chunks, or lists of chunks; chunk arguments must all span the same count."""
        spec = ops.OPS.get(name)
        if spec is None:
            raise program_error(f"unknown operation {name!r}; the operations are {', '.join(ops.OPS)}")
        if set(args) != {operand.field for operand in spec.operands} or spec.channel != (channel is not None):
            raise program_error(f"{name} takes the chunk arguments {[o.field for o in spec.operands]}"
                                + (" and a channel" if spec.channel else ""))
        for t in members(tb):
            if not isinstance(t, int) or t < 0:
                raise program_error(f"thread block must be a non-negative int or a ThreadBlockGroup, got {tb!r}")
        chunks = [c for value in args.values() for c in (value if isinstance(value, list) else [value])]
        if len({c.count for c in chunks}) > 1:
            raise program_error(f"{name}: all chunk arguments must span the same number of chunks")
        self.operations.append(Operation(name, rank, tb, args, channel, caller_line()))

    def lower(self, *, instances: int = 1, fuse: bool = True, verify: bool = True) -> dict:
        """The execution plan (a dict, PLAN.md); verified unless ``verify`` is False."""
        return lower(self, instances=instances, fuse=fuse, verify=verify)


def verify(plan_or_program) -> dict:
    """Raise VerificationError unless the plan (or the plan a Program lowers to) is correct; return the plan.

    The package's ``verify``. It lives beside Program because it takes one; the checks, which take plans only, are
    ``verify.verify_plan``."""
    if isinstance(plan_or_program, Program):
        plan = plan_or_program.lower(verify=False)
    else:
        plan = plan_or_program
    return verify_plan(plan)
