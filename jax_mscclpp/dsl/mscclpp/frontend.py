"""What both program classes of MSCCL++'s DSL share: the ``with`` block, the trace of calls, and the way out to
our Program, our plan and MSCCL++'s JSON."""

from __future__ import annotations

from ..program import Program
from .errors import mistake
from . import context, executor_json, translate
from .collectives import Collective
from .trace import Span, Step
from .types import PLAN_BUFFER, BufferType
from .utils import ReplicationPolicy

PROTOCOLS = ("Simple", "LL")


class FrontEndProgram:
    """An MSCCL++ program being written (``with program:``) or written.

    ``to_program()`` is our Program (dsl/program.py) computing the same collective; ``plan()`` its verified
    execution plan, replicated ``instances`` times, which ``jax_mscclpp.dsl.simulate.run_plan`` runs and
    ``jax_mscclpp.register_algorithm`` accepts (as it accepts the program itself); ``to_json()`` the plan in
    MSCCL++'s executor format.
    """

    api: str = ""  # collectives.CHUNK_API or CHANNEL_API

    def __init__(self, name: str, collective: Collective, num_ranks: int, instances: int = 1,
                 protocol: str = "Simple", instr_fusion: bool = True,
                 replication_policy: ReplicationPolicy = ReplicationPolicy.interleaved,
                 num_threads_per_block: int = 1024, use_double_scratch_buffer: bool = False,
                 min_message_size: int = 0, max_message_size: int = 2**64 - 1, **options):
        if not isinstance(collective, Collective):
            raise TypeError(f"{type(self).__name__}: collective must be an AllReduce, AllGather, ReduceScatter or "
                            f"AllToAll, got {collective!r}")
        if num_ranks != collective.num_ranks:
            raise ValueError(f"{type(self).__name__}: num_ranks={num_ranks} but the collective has "
                             f"{collective.num_ranks} ranks")
        if protocol not in PROTOCOLS:
            raise ValueError(f"{type(self).__name__}: protocol must be one of {PROTOCOLS}, got {protocol!r}")
        if isinstance(instances, bool) or not isinstance(instances, int) or instances < 1:
            raise ValueError(f"{type(self).__name__}: instances must be a positive int, got {instances!r}")
        self.name = name
        self.collective = collective
        self.num_ranks = num_ranks
        self.instances = instances
        self.protocol = protocol
        self.instr_fusion = instr_fusion
        self.replication_policy = replication_policy
        self.num_threads_per_block = num_threads_per_block
        self.use_double_scratch_buffer = use_double_scratch_buffer
        self.min_message_size = min_message_size
        self.max_message_size = max_message_size
        self.options = options
        self.chunks_per_block = collective.chunks_per_block(self.api)
        self.input_chunks, self.output_chunks = collective.buffer_chunks(self.api)
        self.scratch_allocated = [0] * num_ranks  # chunks of scratch Buffers made per rank (channel API)
        self.scratch_used = 0  # one past the highest scratch chunk any call names
        self.steps: list[Step] = []

    def __enter__(self):
        context.enter(self)
        return self

    def __exit__(self, *exc):
        context.leave(self)
        return False

    # Recording --------------------------------------------------------------------------------------------

    def span(self, rank: int, buffer: BufferType, index: int, size: int) -> Span:
        """A checked span of chunks."""
        if not isinstance(rank, int) or not 0 <= rank < self.num_ranks:
            raise mistake(f"rank {rank!r} is not a rank of {self.num_ranks}")
        if not isinstance(buffer, BufferType):
            raise mistake(f"buffer must be Buffer.input, Buffer.output or Buffer.scratch, got {buffer!r}")
        if not isinstance(index, int) or not isinstance(size, int) or index < 0 or size < 1:
            raise mistake(f"chunk index {index!r} and size {size!r} must be ints >= 0 and >= 1")
        limit = {BufferType.input: self.input_chunks, BufferType.output: self.output_chunks}.get(buffer)
        if limit is not None and index + size > limit:
            raise mistake(f"{buffer.name}[{index}:{index + size}] of rank {rank} is past the end of its "
                                f"{limit} chunks")
        if buffer == BufferType.scratch:
            self.scratch_used = max(self.scratch_used, index + size)
        return Span(rank, PLAN_BUFFER[buffer], index, size)

    def record(self, step: Step) -> None:
        if isinstance(step.tb, bool) or not isinstance(step.tb, int) or step.tb < 0:
            raise mistake(f"{step.call}: the thread block must be an int >= 0, got {step.tb!r}")
        step.src_line = step.src_line or context.user_line()
        self.steps.append(step)

    # The way out ------------------------------------------------------------------------------------------

    def to_program(self) -> Program:
        """Our Program computing this program's collective (replicate it with ``lower(instances=...)``)."""
        scratch = max(self.scratch_used, *self.scratch_allocated)
        return translate.build_program(self.name, self.collective.plan_collective, self.num_ranks,
                                       self.chunks_per_block, scratch, self.steps, self.collective.inplace)

    def plan(self) -> dict:
        """The verified execution plan (PLAN.md) of ``instances`` copies of this program."""
        return self.to_program().lower(instances=self.instances)

    def to_json(self, indent: int = 2) -> str:
        """The plan in MSCCL++'s executor JSON format (executor_json.py)."""
        return executor_json.to_executor_json(self.plan(), self, indent=indent)
