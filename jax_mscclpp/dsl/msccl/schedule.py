"""Scheduling: the chunk DAG as instructions on thread blocks and channels, in execution order.

Each operation of the DAG is one instruction on its rank when it is local (``cpy``, ``re``), and two when it
crosses ranks: a send on the source rank (``s``) and a receive on the destination (``r``, or ``rrc`` for a
reduce). Its parts depend on the parts that wrote what they read (read-after-write) and, for a write, on the
previous writer and readers of the slots it overwrites (write-after-read, write-after-write); every dependency is
between parts of one rank, and a receive depends on its send.

Order: one global order of all parts, by depth in the DAG (longest path from a start), then by height (longest
path to an end, deeper first), then program order. It is a topological order, so a rank whose thread blocks each
run their instructions in this order never waits on something that comes later: the schedule cannot deadlock.

Fusion (``instr_fusion``): a receive and, on the same thread block and channel, the send that forwards exactly
the chunks it received to the same buffer and index on the next rank become one instruction: receive-copy-send
(``rcs``), receive-reduce-copy-send (``rrcs``), or receive-reduce-send (``rrs``) when nothing else reads the
reduced chunks and a later write overwrites them.

Thread blocks: MSCCL-IR gives a thread block at most one send peer, one receive peer and one channel
(``ThreadBlock``). ``ThreadblockPolicy.manual`` takes them from ``sendtb`` (sends and local operations) and
``recvtb`` (receives) and refuses a mix that breaks that rule; ``auto`` puts instructions on the thread block
already sending to (or receiving from) the same peer on the channel, and local ones with the instruction that
wrote their source.
"""

from __future__ import annotations

import dataclasses

from .dag import REDUCE, Operation
from .errors import program_error

LOCAL, SEND, RECV = "local", "send", "recv"


@dataclasses.dataclass(eq=False)
class Part:
    """The part of ``operation`` that runs on one rank: all of a local operation, or its send or receive."""

    operation: Operation
    role: str
    deps: set = dataclasses.field(default_factory=set)  # parts it must follow, every hazard
    reads_from: set = dataclasses.field(default_factory=set)  # parts that wrote what it reads
    depth: int = 0
    height: int = 0
    instruction: Instruction | None = None

    @property
    def rank(self) -> int:
        return self.operation.src.rank if self.role == SEND else self.operation.dst.rank

    @property
    def key(self) -> tuple:
        return (self.depth, -self.height, self.operation.seq, self.role == RECV)


@dataclasses.dataclass(eq=False)
class ThreadBlock:
    """One thread block of one rank: its MSCCL-IR peers (-1: none) and channel, and its instructions in order."""

    rank: int
    id: int
    send: int = -1
    recv: int = -1
    channel: int = -1
    instructions: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass(eq=False)
class Instruction:
    """One MSCCL-IR instruction: ``recv`` is the receiving (or local) part it performs, ``send`` the sending
    part; a fused instruction has both. ``position`` is its place in the global order, ``step`` in its thread
    block."""

    kind: str
    recv: Part | None
    send: Part | None
    channel: int
    tb: ThreadBlock | None = None
    position: int = 0
    step: int = 0

    @property
    def parts(self) -> list[Part]:
        return [part for part in (self.recv, self.send) if part is not None]

    @property
    def rank(self) -> int:
        return self.parts[0].rank

    @property
    def send_peer(self) -> int:
        return self.send.operation.dst.rank if self.send else -1

    @property
    def recv_peer(self) -> int:
        if self.recv is None or self.recv.role == LOCAL:
            return -1
        return self.recv.operation.src.rank

    @property
    def src_line(self) -> str | None:
        return self.parts[0].operation.src_line

    def dependencies(self, raw_only: bool = False) -> list[Instruction]:
        """The instructions of other thread blocks of this rank that this one must follow: the last of each
        thread block (``raw_only``: only those that wrote what it reads)."""
        latest: dict[int, Instruction] = {}
        for part in self.parts:
            for dep in (part.reads_from if raw_only else part.deps):
                other = dep.instruction
                if other is self or other.tb is self.tb or other.rank != self.rank:
                    continue
                if other.tb.id not in latest or latest[other.tb.id].step < other.step:
                    latest[other.tb.id] = other
        return sorted(latest.values(), key=lambda instruction: instruction.position)


@dataclasses.dataclass
class Schedule:
    """Thread blocks per rank, by id (manual ids may skip some), and every instruction in the global order."""

    ranks: list[list[ThreadBlock]]
    instructions: list[Instruction]


def channel_of(operation: Operation) -> int:
    return max(operation.ch, 0)


def schedule(prog) -> Schedule:
    parts = _parts(prog.dag)
    order = sorted(parts, key=lambda part: part.key)
    manual = prog.threadblock_policy.value == "manual"
    fusable = _fusion_candidates(prog.dag, parts, manual) if prog.instr_fusion else {}
    placer = _Placer(prog.num_ranks, manual)
    instructions = []
    for part in order:
        if part.instruction is not None:  # a send fused into an earlier receive
            continue
        instruction = None
        partner = fusable.get(id(part))
        if partner is not None and partner.instruction is None:
            instruction = placer.place(_fused(prog.dag, part, partner))
        if instruction is None:
            instruction = placer.place(_single(part), required=True)
        instruction.position = len(instructions)
        instructions.append(instruction)
    return Schedule(placer.ranks, instructions)


# Parts and their dependencies ----------------------------------------------------------------------------

def _parts(dag) -> list[Part]:
    """Every part of every operation, with dependencies, depth and height."""
    parts: dict[tuple[int, str], Part] = {}

    def part_on(operation: Operation, rank: int, reading_src: bool) -> Part:
        """The part of ``operation`` that touches ``rank``: the send when it reads its source remotely."""
        if not operation.remote:
            return parts[operation.seq, LOCAL]
        return parts[operation.seq, SEND if reading_src else RECV]

    def writer_part(slot: tuple, version: int) -> Part | None:
        writer = dag.version(slot, version).writer
        return None if writer is None else part_on(writer, slot[0], False)

    def reader_parts(slot: tuple, version: int) -> list[Part]:
        return [part_on(reader, slot[0], slot[0] == reader.src.rank) for reader in dag.version(slot, version).readers]

    ordered = []
    for operation in dag.operations:
        roles = (SEND, RECV) if operation.remote else (LOCAL,)
        for role in roles:
            part = Part(operation, role)
            parts[operation.seq, role] = part
            ordered.append(part)
        sender = parts[operation.seq, roles[0]]
        receiver = parts[operation.seq, roles[-1]]
        reads = [(sender, operation.src)] + ([(receiver, operation.old)] if operation.kind == REDUCE else [])
        for part, slots in reads:
            for slot, version in zip(slots.slots(), slots.versions):
                writer = writer_part(slot, version)
                if writer is not None:
                    part.reads_from.add(writer)
        for slot, version in zip(operation.old.slots(), operation.old.versions):
            writer = writer_part(slot, version)
            receiver.deps.update([writer] if writer is not None else [])
            receiver.deps.update(p for p in reader_parts(slot, version) if p.operation is not operation)
        if operation.remote:
            receiver.deps.add(sender)
        for part in {sender, receiver}:
            part.deps |= part.reads_from
    for part in ordered:  # program order is topological
        part.depth = max((dep.depth + 1 for dep in part.deps), default=0)
    for part in reversed(ordered):
        for dep in part.deps:
            dep.height = max(dep.height, part.height + 1)
    return ordered


# Fusion -------------------------------------------------------------------------------------------------

def _fusion_candidates(dag, parts: list[Part], manual: bool) -> dict[int, Part]:
    """id(receive part) -> the send part that may fuse into it (the first that forwards exactly its chunks to
    the same buffer and index, on the same channel and, when manual, the same thread block)."""
    by_key = {(part.operation.seq, part.role): part for part in parts}
    candidates: dict[int, Part] = {}
    taken: set[int] = set()
    for operation in dag.operations:
        if not operation.remote:
            continue
        slots = operation.dst.slots()
        readers = dag.version(slots[0], operation.dst.versions[0]).readers
        for reader in readers:
            if (reader.remote and reader.seq not in taken and reader.src == operation.dst
                    and (reader.dst.buffer, reader.dst.index) == (operation.dst.buffer, operation.dst.index)
                    and channel_of(reader) == channel_of(operation)
                    and (not manual or reader.sendtb == operation.recvtb)):
                candidates[id(by_key[operation.seq, RECV])] = by_key[reader.seq, SEND]
                taken.add(reader.seq)
                break
    return candidates


def _single(part: Part) -> Instruction:
    operation = part.operation
    if part.role == SEND:
        kind = "s"
    elif part.role == RECV:
        kind = "rrc" if operation.kind == REDUCE else "r"
    else:
        kind = "re" if operation.kind == REDUCE else "cpy"
    return Instruction(kind, None if part.role == SEND else part, part if part.role == SEND else None,
                       channel_of(operation))


def _fused(dag, receive: Part, send: Part) -> Instruction:
    operation = receive.operation
    if operation.kind != REDUCE:
        kind = "rcs"
    else:
        versions = [dag.version(slot, v) for slot, v in zip(operation.dst.slots(), operation.dst.versions)]
        dead = all(len(version.readers) == 1 and dag.final_version(slot) > v
                   for version, slot, v in zip(versions, operation.dst.slots(), operation.dst.versions))
        kind = "rrs" if dead else "rrcs"
    return Instruction(kind, receive, send, channel_of(operation))


# Thread blocks ------------------------------------------------------------------------------------------

class _Placer:
    """Places instructions on thread blocks (module docstring), in the global order."""

    def __init__(self, num_ranks: int, manual: bool):
        self.manual = manual
        self.ranks: list[list[ThreadBlock]] = [[] for _ in range(num_ranks)]
        self.by_id: list[dict[int, ThreadBlock]] = [{} for _ in range(num_ranks)]

    def place(self, instruction: Instruction, required: bool = False) -> Instruction | None:
        """Put ``instruction`` on a thread block and return it; None when a fused one does not fit (its parts
        then go separately). ``required``: raise instead (a single part always fits under ``auto``)."""
        tb = self._manual(instruction, required) if self.manual else self._auto(instruction)
        if tb is None:
            return None
        tb.send = instruction.send_peer if instruction.send_peer != -1 else tb.send
        tb.recv = instruction.recv_peer if instruction.recv_peer != -1 else tb.recv
        if tb.channel == -1 and (instruction.send is not None or instruction.recv_peer != -1):
            tb.channel = instruction.channel
        instruction.tb = tb
        instruction.step = len(tb.instructions)
        tb.instructions.append(instruction)
        for part in instruction.parts:
            part.instruction = instruction
        return instruction

    @staticmethod
    def _fits(tb: ThreadBlock, instruction: Instruction) -> bool:
        return (instruction.send_peer in (-1, tb.send) or tb.send == -1) and \
               (instruction.recv_peer in (-1, tb.recv) or tb.recv == -1) and \
               (tb.channel in (-1, instruction.channel) or (instruction.send is None and instruction.recv_peer == -1))

    def _new(self, rank: int, tb_id: int) -> ThreadBlock:
        tb = ThreadBlock(rank, tb_id)
        self.by_id[rank][tb_id] = tb
        self.ranks[rank] = [self.by_id[rank][i] for i in sorted(self.by_id[rank])]
        return tb

    def _manual(self, instruction: Instruction, required: bool) -> ThreadBlock | None:
        operation = (instruction.recv or instruction.send).operation
        tb_id = operation.recvtb if instruction.recv is not None and instruction.recv.role == RECV else operation.sendtb
        if tb_id == -1:
            role = "recvtb" if instruction.recv is not None and instruction.recv.role == RECV else "sendtb"
            raise program_error(f"ThreadblockPolicy.manual: {operation!r} needs a {role}", operation.src_line)
        rank = instruction.rank
        tb = self.by_id[rank].get(tb_id) or self._new(rank, tb_id)
        if self._fits(tb, instruction):
            return tb
        if not required:
            return None
        raise program_error(f"ThreadblockPolicy.manual: thread block {tb_id} of rank {rank} sends to {tb.send}, "
                            f"receives from {tb.recv} on channel {tb.channel}; it cannot also run {operation!r} "
                            f"(send peer {instruction.send_peer}, receive peer {instruction.recv_peer}, channel "
                            f"{instruction.channel}): MSCCL-IR gives a thread block one send peer, one receive "
                            "peer and one channel", operation.src_line)

    def _auto(self, instruction: Instruction) -> ThreadBlock | None:
        rank, channel = instruction.rank, instruction.channel
        tbs = self.ranks[rank]
        sender = next((tb for tb in tbs if instruction.send_peer != -1 and tb.send == instruction.send_peer
                       and tb.channel == channel), None)
        receiver = next((tb for tb in tbs if instruction.recv_peer != -1 and tb.recv == instruction.recv_peer
                         and tb.channel == channel), None)
        if sender is not None and receiver is not None:
            return sender if sender is receiver else None
        found = sender or receiver
        if found is not None:
            return found if self._fits(found, instruction) else None
        if instruction.send is None and instruction.recv_peer == -1:  # local: with what wrote its source
            writers = [dep.instruction for dep in instruction.recv.reads_from if dep.instruction is not None]
            if writers:
                return max(writers, key=lambda writer: writer.position).tb
            if tbs:
                return tbs[0]
        # No thread block has these connections yet: one whose free ends take them, else a new one.
        free = next((tb for tb in tbs if tb.channel in (-1, channel) and (instruction.send_peer == -1 or tb.send == -1)
                     and (instruction.recv_peer == -1 or tb.recv == -1)), None)
        return free or self._new(rank, len(tbs))
