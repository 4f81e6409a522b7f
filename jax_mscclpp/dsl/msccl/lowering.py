"""Lowering: an MSCCLang schedule (schedule.py) to a DSL ``Program`` (``jax_mscclpp.dsl``).

Storage. MSCCLang overwrites slots in place; a plan may not (it never writes ``input``, and a peer writes only
into scratch). Because of the staleness rule every read names the version of the slot it reads, so each version
gets a place of its own:

* version 0 of a slot that holds an input chunk is that chunk of ``input``;
* the last version of a slot that is (or, in place, aliases) an output chunk is that chunk of ``output``;
* every other version, and every transfer's landing place on its receiver, is a fresh scratch chunk.

Each place is written once per call, so the only ordering a plan needs is read-after-write: no write can race
with an earlier read.

Transfers. ``Simple`` (HB): the sender ``put``s into the receiver's scratch (straight into the version's place
when that is scratch) and ``signal``s; the receiver ``wait``s, then copies or reduces into place. ``LL``/``LL128``:
the sender ``put_packets`` into a scratch slot of the receiver, which ``read_packets`` it into place (or into a
temporary it reduces from: lowering fuses that into ``reduce_packets``). A memory channel serves one (sender,
receiver, sender thread block, receiver thread block, channel); its signals arrive in the order they were sent,
so a receive waits until the channel has delivered its own transfer's signal, and a transfer whose signal an
earlier wait already covered waits for nothing.

Thread blocks of one rank. When an instruction reads what another thread block of its rank wrote, the writer
signals, and the reader waits on, a memory channel from the rank to itself between the two thread blocks.

Every instruction runs on the thread block the schedule gave it, and the plan's operations keep the MSCCLang line
of the call that made them (``src_line``).
"""

from __future__ import annotations

import collections

from .. import channels as dsl_channels
from .. import geometry
from ..program import Program
from .buffers import Buffer
from .dag import REDUCE
from .errors import program_error
from .schedule import LOCAL, RECV, SEND

# MSCCLang protocol -> protocol of the plan's memory channels (PLAN.md, "Channels").
PROTOCOLS = {"Simple": "HB", "LL": "LL", "LL128": "LL"}

# A place in the plan's buffers: (buffer name, chunk index), of the rank that owns the version.
Place = tuple


def to_program(prog) -> Program:
    collective = prog.collective
    if collective.plan_collective is None:
        raise program_error(f"{prog.name}: custom collective {type(collective).__name__} has no execution plan: plans "
                            "implement all_reduce, all_gather, reduce_scatter, all_to_all and permutations (a "
                            "custom collective whose init_buffers send every input chunk c of a rank to chunk c of "
                            "one other rank's output, Collective.permutation); Check(), XML() and simulate() work "
                            "for it", None)
    return _Lowering(prog).program


class _Lowering:
    def __init__(self, prog):
        self.prog = prog
        self.dag = prog.dag
        self.schedule = prog.schedule()
        self.protocol = PROTOCOLS[prog.protocol]
        self.chunks_per_block = prog.collective.chunk_factor
        self.scratch_used = [0] * prog.num_ranks
        self.places: dict[tuple, Place] = {}  # (slot, version) -> place
        self.landing: dict[int, list] = {}  # remote operation seq -> its receiver's landing places
        self.temporaries: dict[int, list] = {}  # LL remote reduce seq -> where its packets are unpacked
        self.epilogue: list[tuple] = []  # (rank, output index, input index): outputs no operation writes
        self._assign_places()
        self.signals_after: dict[int, list] = collections.defaultdict(list)  # id(instruction) -> [reader tb]
        self.waits_before: dict[int, list] = collections.defaultdict(list)  # id(instruction) -> [writer tb]
        self._plan_rank_sync()
        self.program = Program(prog.collective.plan_collective, prog.num_ranks, name=prog.name,
                               chunks=self.chunks_per_block, scratch_chunks=max(self.scratch_used),
                               protocol=self.protocol, permutation=prog.collective.permutation)
        self.part_tb = {(part.operation.seq, part.role): instruction.tb.id
                        for instruction in self.schedule.instructions for part in instruction.parts}
        self.pipes: dict[tuple, object] = {}
        self.signals_sent: collections.Counter = collections.Counter()
        self.waits_done: collections.Counter = collections.Counter()
        self.signal_number: dict[int, int] = {}  # remote operation seq -> its signal's number on its channel
        self._emit_all()

    # Places ----------------------------------------------------------------------------------------------

    def _scratch(self, rank: int, count: int) -> list[Place]:
        start = self.scratch_used[rank]
        self.scratch_used[rank] += count
        return [("scratch", start + i) for i in range(count)]

    def _assign_places(self) -> None:
        prog, dag = self.prog, self.dag
        for slot, chunk in dag.initial.items():
            if getattr(chunk, "origin_rank", None) == slot[0]:
                self.places[slot, 0] = ("input", chunk.origin_index)
        outputs = set()
        _, output_blocks = geometry.buffer_blocks(prog.collective.plan_collective, prog.num_ranks)
        output_count = output_blocks * self.chunks_per_block
        for rank in range(prog.num_ranks):
            for j in range(output_count):
                buffer, index = dag.resolve(rank, Buffer.output, j)
                slot = (rank, buffer, index)
                final = dag.final_version(slot)
                if final > 0:
                    self.places[slot, final] = ("output", j)
                    outputs.add((slot, final))
                elif (slot, 0) in self.places:
                    self.epilogue.append((rank, j, self.places[slot, 0][1]))
        for operation in dag.operations:
            new = list(zip(operation.dst.slots(), operation.dst.versions))
            kept = [key for key in new if key not in outputs]  # an output's last version lives in the output
            for key, place in zip(kept, self._scratch(operation.dst.rank, len(kept))):
                self.places[key] = place
            if operation.remote:
                direct = self.protocol == "HB" and operation.kind != REDUCE and \
                    all(self.places[key][0] == "scratch" for key in new)
                if direct:
                    self.landing[operation.seq] = [self.places[key] for key in new]
                else:
                    self.landing[operation.seq] = self._scratch(operation.dst.rank, operation.dst.size)
                if self.protocol == "LL" and operation.kind == REDUCE:
                    self.temporaries[operation.seq] = self._scratch(operation.dst.rank, operation.dst.size)

    def _versions(self, slots) -> list[Place]:
        return [self.places[key] for key in zip(slots.slots(), slots.versions)]

    def _old(self, operation) -> list[Place] | None:
        """The places of what a reduce reduces into (None for a copy, which does not read its destination)."""
        return self._versions(operation.old) if operation.kind == REDUCE else None

    # Synchronization between thread blocks of one rank ----------------------------------------------------

    def _plan_rank_sync(self) -> None:
        """Which instructions signal which thread blocks of their rank, and which wait (module docstring)."""
        acquired: dict[tuple, int] = {}  # (rank, writer tb, reader tb) -> last writer step waited for
        for instruction in self.schedule.instructions:
            for writer in instruction.dependencies(raw_only=True):
                key = (instruction.rank, writer.tb.id, instruction.tb.id)
                if acquired.get(key, -1) < writer.step:
                    acquired[key] = writer.step
                    self.signals_after[id(writer)].append(instruction.tb.id)
                    self.waits_before[id(instruction)].append(writer.tb.id)

    # Emission --------------------------------------------------------------------------------------------

    def _pipe(self, src: int, dst: int, src_tb: int, dst_tb: int, channel: int, protocol: str):
        key = (src, dst, src_tb, dst_tb, channel, protocol)
        if key not in self.pipes:
            self.pipes[key] = dsl_channels.MemoryChannel(self.program, src, dst, protocol)
        return self.pipes[key]

    def _record(self, call, line: str | None, *args, **kwargs) -> None:
        """Make one DSL call and give the operation it records the MSCCLang line."""
        call(*args, **kwargs)
        self.program.operations[-1].src_line = line

    def _runs(self, *operands: list[Place]):
        """Split per-chunk places of equal length into runs contiguous in every operand (and inside one block of
        input or output, so that replication can spread them); yield one chunk reference per operand and run."""
        count = len(operands[0])
        start = 0
        for i in range(1, count + 1):
            if i < count and all(self._continues(places[i - 1], places[i]) for places in operands):
                continue
            yield [(places[start], i - start) for places in operands]
            start = i

    def _continues(self, previous: Place, place: Place) -> bool:
        if place != (previous[0], previous[1] + 1):
            return False
        return place[0] == "scratch" or place[1] % self.chunks_per_block != 0

    def _ref(self, rank: int, run: tuple):
        """The DSL chunk of a run ``((buffer, index), count)`` of ``rank``."""
        (buffer, index), count = run
        return getattr(self.program.rank(rank), buffer)[index:index + count]

    def _emit_all(self) -> None:
        for rank, output, source in self.epilogue:
            tbs = self.schedule.ranks[rank]
            tb = tbs[0].id if tbs else 0
            self._record(self.program.rank(rank).copy, None, self.program.rank(rank).output[output],
                         self.program.rank(rank).input[source], tb=tb)
        for instruction in self.schedule.instructions:
            rank, tb = instruction.rank, instruction.tb.id
            line = instruction.src_line
            for writer_tb in self.waits_before[id(instruction)]:
                self._record(self._pipe(rank, rank, writer_tb, tb, -1, "HB").wait, line, tb=tb)
            if instruction.recv is not None:
                if instruction.recv.role == LOCAL:
                    self._local(instruction.recv.operation, tb)
                else:
                    self._receive(instruction.recv.operation, instruction, tb)
            if instruction.send is not None:
                self._send(instruction.send.operation, instruction, tb)
            for reader_tb in self.signals_after[id(instruction)]:
                self._record(self._pipe(rank, rank, tb, reader_tb, -1, "HB").signal, line, tb=tb)

    def _combine(self, rank: int, kind: str, dst: list[Place], old: list[Place] | None, src: list[Place], tb: int,
                 line: str | None) -> None:
        """dst <- src (copy) or dst <- old (+) src (reduce), locally on ``rank``."""
        ranked = self.program.rank(rank)
        if kind == REDUCE:
            for d, o, s in self._runs(dst, old, src):
                self._record(ranked.reduce, line, self._ref(rank, d), [self._ref(rank, o), self._ref(rank, s)], tb=tb)
        else:
            for d, s in self._runs(dst, src):
                self._record(ranked.copy, line, self._ref(rank, d), self._ref(rank, s), tb=tb)

    def _local(self, operation, tb: int) -> None:
        self._combine(operation.dst.rank, operation.kind, self._versions(operation.dst), self._old(operation),
                      self._versions(operation.src), tb, operation.src_line)

    def _tb_of(self, operation, role: str) -> int:
        """The thread block running ``operation``'s part of role ``role``."""
        return self.part_tb[operation.seq, role]

    def _receive(self, operation, instruction, tb: int) -> None:
        src, dst = operation.src.rank, operation.dst.rank
        pipe = self._pipe(src, dst, self._tb_of(operation, SEND), tb, instruction.channel, self.protocol)
        landing, line = self.landing[operation.seq], operation.src_line
        places, old = self._versions(operation.dst), self._old(operation)
        if self.protocol == "HB":
            key = id(pipe)
            while self.waits_done[key] < self.signal_number[operation.seq]:
                self._record(pipe.wait, line, tb=tb)
                self.waits_done[key] += 1
            if landing != places:
                self._combine(dst, operation.kind, places, old, landing, tb, line)
            return
        unpacked = self.temporaries.get(operation.seq, places)
        for d, s in self._runs(unpacked, landing):
            self._record(pipe.read_packets, line, self._ref(dst, d), self._ref(dst, s), tb=tb)
        if operation.kind == REDUCE:
            self._combine(dst, REDUCE, places, old, unpacked, tb, line)

    def _send(self, operation, instruction, tb: int) -> None:
        src, dst = operation.src.rank, operation.dst.rank
        pipe = self._pipe(src, dst, tb, self._tb_of(operation, RECV), instruction.channel, self.protocol)
        line = operation.src_line
        put = pipe.put if self.protocol == "HB" else pipe.put_packets
        for d, s in self._runs(self.landing[operation.seq], self._versions(operation.src)):
            self._record(put, line, self._ref(dst, d), self._ref(src, s), tb=tb)
        if self.protocol == "HB":
            self._record(pipe.signal, line, tb=tb)
            self.signals_sent[id(pipe)] += 1
            self.signal_number[operation.seq] = self.signals_sent[id(pipe)]
