"""The program context: ``with MSCCLProgram(...):`` opens a program, ``chunk()`` takes references in it,
``Check()`` and ``XML()`` check it and print its MSCCL-IR.

A program traces chunk routing into a chunk DAG (dag.py) as it runs. Afterwards:

* ``schedule()`` places its instructions on thread blocks and channels (schedule.py), from which
  ``generate_xml()`` writes MSCCL-IR (msccl_ir.py);
* ``to_program()`` lowers the schedule to a DSL ``Program`` (lowering.py) and ``lower()`` to a verified
  execution plan, replicated ``instances`` times: what ``verify``, ``run_plan`` and
  ``jax_mscclpp.register_algorithm`` take (``register_algorithm`` takes the MSCCLProgram itself, or a function of
  the world size returning one);
* ``simulate(inputs)`` runs the routing on numpy arrays (simulate.py), custom collectives included.

Protocols (``PROTOCOLS``): ``Simple`` lowers to HB memory channels (put, then signal/wait), ``LL`` and ``LL128``
to LL memory channels (packets with flags; the plan has no LL128).
"""

from __future__ import annotations

import enum

from ..errors import VerificationError
from .buffers import is_scratch
from .dag import ChunkDAG
from .errors import program_error
from .lowering import PROTOCOLS
from .refs import Ref

class ThreadblockPolicy(enum.Enum):
    """``auto``: the scheduler places instructions on thread blocks; ``manual``: every transfer names its sender
    and receiver thread block (``sendtb``, ``recvtb``) and local operations their ``sendtb``."""

    auto = "auto"
    manual = "manual"

    def __str__(self) -> str:
        return self.value


_current: MSCCLProgram | None = None


def current_program() -> MSCCLProgram:
    if _current is None:
        raise RuntimeError("no MSCCLProgram in context: use `with MSCCLProgram(...):`")
    return _current


class MSCCLProgram:
    """One collective algorithm written as chunk routing over ``topo`` (module docstring).

    ``instances`` replicates the program over that many times the chunks, thread blocks and channels.
    ``interleaved_replication`` and ``dependence_nop`` shape the MSCCL-IR only (the plan replicates by blocks,
    PLAN.md); ``instr_fusion`` fuses receives with the sends that forward them (schedule.py); ``check_xml`` is
    accepted for compatibility (a schedule is acyclic and ordered by construction).
    """

    def __init__(self, name: str, topo, collective, instances: int, protocol: str = "Simple",
                 threadblock_policy: ThreadblockPolicy = ThreadblockPolicy.auto, interleaved_replication: bool = True,
                 instr_fusion: bool = True, check_xml: bool = True, dependence_nop: bool = False):
        if protocol not in PROTOCOLS:
            raise program_error(f"protocol {protocol!r} must be one of {', '.join(PROTOCOLS)}")
        if not isinstance(instances, int) or instances < 1:
            raise program_error(f"instances must be a positive int, got {instances!r}")
        if not isinstance(threadblock_policy, ThreadblockPolicy):
            raise program_error(f"threadblock_policy must be a ThreadblockPolicy, got {threadblock_policy!r}")
        if topo.num_nodes() != collective.num_ranks:
            raise program_error(f"topology {topo.name} has {topo.num_nodes()} ranks but the collective "
                                f"{collective.num_ranks}")
        self.name = name
        self.topo = topo
        self.collective = collective
        self.num_ranks = collective.num_ranks
        self.instances = instances
        self.protocol = protocol
        self.threadblock_policy = threadblock_policy
        self.interleaved_replication = interleaved_replication
        self.instr_fusion = instr_fusion
        self.check_xml = check_xml
        self.dependence_nop = dependence_nop
        self.dag = ChunkDAG(collective, self.num_ranks)

    @property
    def buffers(self) -> list[dict]:
        """Per rank, buffer -> list of slots (Chunk, ReduceChunk or None): what ``Collective.check`` reads."""
        return self.dag.buffers

    def __enter__(self) -> MSCCLProgram:
        global _current
        if _current is not None:
            raise RuntimeError("there is already an MSCCLProgram in context")
        _current = self
        return self

    def __exit__(self, *exc_info) -> None:
        global _current
        if _current is not self:
            raise RuntimeError("this MSCCLProgram is not the one in context")
        _current = None

    # Writing ---------------------------------------------------------------------------------------------

    def chunk(self, rank: int, buffer, index: int, size: int = 1) -> Ref | None:
        """A reference to ``size`` chunks from ``buffer[index]`` of ``rank`` at their latest versions; None when
        the first holds no chunk."""
        buffer, index = self.dag.resolve(rank, buffer, index)
        slots = self.dag.slot_list(rank, buffer)
        if 0 <= index < len(slots) and slots[index] is None:
            return None
        return Ref(self, self.dag.current(rank, buffer, index, size))

    def create_scratch(self, rank: int, name: str) -> None:
        """Make an empty scratch buffer ``name`` on ``rank`` (copying into a new name does so as well)."""
        if not is_scratch(name):
            raise program_error(f"{name!r} is not a scratch buffer name")
        self.dag.slot_list(rank, name, create=True)

    # Results ---------------------------------------------------------------------------------------------

    def check(self) -> bool:
        """The collective's postcondition on the traced chunks, then (for a collective with a plan) the
        verifier on the lowered plan. Prints what fails; returns whether all passed."""
        if not self.collective.check(self):
            return False
        if self.collective.plan_collective is None:
            return True
        try:
            self.lower()
        except VerificationError as error:
            print(f"{self.name}: the lowered plan fails verification: {error}")
            return False
        return True

    def schedule(self):
        """Instructions per rank and thread block, in execution order (schedule.py)."""
        from .schedule import schedule

        return schedule(self)

    def to_program(self):
        """The DSL ``Program`` of one instance (lower it with ``instances=self.instances``)."""
        from .lowering import to_program

        return to_program(self)

    def lower(self, *, verify: bool = True) -> dict:
        """The execution plan, replicated ``instances`` times; verified unless ``verify`` is False. A verified plan
        has each rank's thread blocks that only order each other merged into one (``thread_block_merge``)."""
        from ..thread_block_merge import merge_thread_blocks

        plan = self.to_program().lower(instances=self.instances, verify=verify)
        return merge_thread_blocks(plan) if verify else plan

    def generate_xml(self) -> str:
        """The program's MSCCL-IR, as msccl-tools writes it."""
        from .msccl_ir import to_xml

        return to_xml(self)

    def simulate(self, inputs: list, op: str = "sum") -> list[dict]:
        """Run the routing on numpy data (simulate.py)."""
        from .simulate import simulate

        return simulate(self, inputs, op)


def chunk(rank: int, buffer, index: int, size: int = 1) -> Ref | None:
    """``MSCCLProgram.chunk`` of the program in context."""
    return current_program().chunk(rank, buffer, index, size)


def create_scratch(rank: int, name: str) -> None:
    current_program().create_scratch(rank, name)


def Check() -> bool:  # noqa: N802 (MSCCLang's name)
    """``MSCCLProgram.check`` of the program in context."""
    return current_program().check()


def XML() -> None:  # noqa: N802 (MSCCLang's name)
    """Print the MSCCL-IR of the program in context."""
    print(current_program().generate_xml())
