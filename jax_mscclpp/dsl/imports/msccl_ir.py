"""MSCCL-IR XML (the ``<algo>`` that MSCCL interpreters run) as a DSL program.

The XML lists, per ``<gpu>``, thread blocks ``<tb id send recv chan>`` whose ``<step>`` elements run in order.
A thread block sends to one peer and receives from one peer over NCCL channel ``chan``; the k-th send of rank
``a`` to rank ``b`` on channel ``c`` delivers the k-th receive of ``b`` from ``a`` on ``c``. Buffers ``i``,
``o`` and ``s`` (input, output, scratch) are cut into chunks of one size: ``nchunksperloop`` of them span the
larger of input and output, so the input and output chunks map one to one onto ours (``collectives.py``).

The translation, per step (``STEP_KINDS``): a receive reads the peer's data from a scratch slot of its own
(scratch chunks past the gpu's ``s_chunks``, one slot per transfer, so no transfer waits for room); a send
writes there. With ``proto="Simple"`` the pipe is an HB memory channel: ``put`` + ``signal``, then ``wait``
before reading the slot. With ``LL`` and ``LL128`` it is an LL memory channel: ``put_packets``, and
``read_packets`` unpacks them. The data step follows the interpreter: ``r`` stores what arrives in ``dst``;
``rrc`` stores ``src (+) arrival`` in ``dst``; ``rcs``/``rrcs`` store it and send it on; ``rrs`` sends
``src (+) arrival`` on without storing it; ``s`` sends ``src``; ``cpy`` copies; ``re`` reduces ``dst (+) src``
into ``dst``; ``nop`` carries only its dependency. A dependency ``depid``/``deps`` (step ``deps`` of thread
block ``depid`` of the same gpu) becomes a signal on a self channel after that step and a wait before the
step that needs it (``thread_block_order.py``). A gpu's input lives where ``input_places.py`` puts it: in place, in
the output; out of place, in a private copy in scratch when a step of the gpu writes it.
"""

from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET

from .. import geometry
from ..channels import MemoryChannel
from ..program import Chunk, Program
from . import in_place
from .collectives import chunks_per_block, our_collective
from .errors import PlanImportError
from .input_places import InputPlaces
from .lowered import lowered_plan
from .thread_block_order import ThreadBlockOrder

# ``coll`` of a custom collective (MSCCLang's own Collective subclasses): no postcondition stated.
CUSTOM = "custom"

# protocol attribute -> protocol of the memory channels that carry the transfers.
PROTOCOLS = {"Simple": "HB", "LL": "LL", "LL128": "LL"}

# buffer letter -> our buffer.
BUFFERS = {"i": "input", "o": "output", "s": "scratch"}


@dataclasses.dataclass(frozen=True)
class StepKind:
    """What one step type does, in the order it does it: receive, reduce ``src`` with what arrived, store
    into ``dst``, send on (``src`` itself when nothing arrives)."""

    receives: bool = False
    reduces: bool = False
    stores: bool = False
    sends: bool = False
    copies: bool = False  # cpy: dst <- src
    local_reduce: bool = False  # re: dst <- dst (+) src

    @property
    def reads_src(self) -> bool:
        return self.copies or self.local_reduce or self.reduces or (self.sends and not self.receives)

    @property
    def writes_dst(self) -> bool:
        return self.stores or self.copies or self.local_reduce


STEP_KINDS = {
    "s": StepKind(sends=True),
    "r": StepKind(receives=True, stores=True),
    "rcs": StepKind(receives=True, stores=True, sends=True),
    "rrc": StepKind(receives=True, reduces=True, stores=True),
    "rrs": StepKind(receives=True, reduces=True, sends=True),
    "rrcs": StepKind(receives=True, reduces=True, stores=True, sends=True),
    "cpy": StepKind(copies=True),
    "re": StepKind(local_reduce=True),
    "nop": StepKind(),
}


@dataclasses.dataclass
class Step:
    gpu: int
    tb: int
    s: int
    kind: StepKind
    type: str
    src: tuple[str, int] | None  # (our buffer, chunk index), when the step reads its source
    dst: tuple[str, int] | None  # when it writes its destination
    cnt: int
    dep: tuple[int, int] | None  # (thread block, step) of the same gpu
    hasdep: bool
    element: str


@dataclasses.dataclass
class ThreadBlock:
    gpu: int
    id: int
    send: int
    recv: int
    chan: int
    steps: list
    element: str


@dataclasses.dataclass
class Gpu:
    id: int
    input_chunks: int
    output_chunks: int
    scratch_chunks: int
    tbs: dict  # id -> ThreadBlock
    element: str


def from_xml(text: str, permutation=None) -> dict:
    """The verified plan of an MSCCL-IR ``<algo>`` document (module docstring); PlanImportError when it cannot
    be run as written. ``permutation``: the (source, destination) pairs of ranks a custom collective's document
    (``coll="custom"``, which states no postcondition) implements; the plan is verified against them."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as error:
        raise PlanImportError("MSCCL-IR document", None, f"malformed XML: {error}") from None
    return _Translation(_Algo(root, permutation)).plan


def _attr(element: ET.Element, name: str, where: str) -> str:
    value = element.get(name)
    if value is None:
        raise PlanImportError(where, name, "is missing")
    return value


def _int(element: ET.Element, name: str, where: str, minimum: int | None = None) -> int:
    value = _attr(element, name, where)
    try:
        number = int(value)
    except ValueError:
        raise PlanImportError(where, name, f"is not an integer: {value!r}") from None
    if minimum is not None and number < minimum:
        raise PlanImportError(where, name, f"is {number}, below {minimum}")
    return number


def _children(element: ET.Element, tag: str, where: str) -> list[ET.Element]:
    """The children of ``element``, all of which must be ``<tag>``."""
    for child in element:
        if child.tag != tag:
            raise PlanImportError(f"<{child.tag}> in {where}", None, f"unknown element: {where} holds <{tag}> "
                                  "elements only (the new-format <op> elements of XML(old_format=False) name "
                                  "one buffer per step, too few for receive-copy-send steps)")
    return list(element)


class _Algo:
    """The ``<algo>`` element, parsed and checked against itself (peers, channels, chunk ranges, matching)."""

    def __init__(self, root: ET.Element, permutation=None):
        where = "<algo>"
        if root.tag != "algo":
            raise PlanImportError(f"<{root.tag}>", None, "an MSCCL-IR document is one <algo> element")
        self.name = root.get("name") or "msccl_ir"
        coll = _attr(root, "coll", where)
        self.permutation = None
        if coll == CUSTOM:
            if permutation is None:
                raise PlanImportError(where, "coll", "a custom collective's document does not say what its output "
                                                     "must hold: load it with load_plan(..., permutation=[(source, "
                                                     "destination), ...]), the pairs of ranks it implements")
            self.collective = "permute"
            try:
                self.permutation = [[int(src), int(dst)] for src, dst in permutation]
            except (TypeError, ValueError):
                raise PlanImportError(where, "coll", f"permutation= is {permutation!r}, not (source, destination) "
                                                     f"pairs of ranks") from None
        elif permutation is not None:
            raise PlanImportError(where, "coll", f'is {coll!r}: permutation= names the pairs of a custom collective '
                                                 f'(coll="{CUSTOM}") only')
        else:
            self.collective = our_collective(coll, where, "coll")
        protocol = _attr(root, "proto", where)
        if protocol not in PROTOCOLS:
            raise PlanImportError(where, "proto", f"unknown protocol {protocol!r}; one of {', '.join(PROTOCOLS)}")
        self.protocol = PROTOCOLS[protocol]
        self.world_size = _int(root, "ngpus", where, 1)
        self.nchannels = _int(root, "nchannels", where, 1)
        self.in_place = _int(root, "inplace", where) if root.get("inplace") is not None else 0
        if self.in_place not in (0, 1):
            raise PlanImportError(where, "inplace", f"is {self.in_place}, not 0 or 1")
        if self.in_place and (reason := in_place.refusal(self.collective)):
            raise PlanImportError(where, "inplace", reason)
        self.chunks_per_block = chunks_per_block(self.collective, self.world_size,
                                                 _int(root, "nchunksperloop", where, 1), "larger", where,
                                                 "nchunksperloop")
        self.gpus = [self._gpu(element) for element in _children(root, "gpu", where)]
        ids = sorted(gpu.id for gpu in self.gpus)
        if ids != list(range(self.world_size)):
            raise PlanImportError(where, "ngpus", f"is {self.world_size} but the <gpu> elements have ids {ids}")
        self.gpus.sort(key=lambda gpu: gpu.id)
        for gpu in self.gpus:
            for tb in gpu.tbs.values():
                for step in tb.steps:
                    self._check_dependency(gpu, step)

    def _gpu(self, element: ET.Element) -> Gpu:
        gpu_id = _int(element, "id", "<gpu>", 0)
        where = f'<gpu id="{gpu_id}">'
        if gpu_id >= self.world_size:
            raise PlanImportError(where, "id", f"is not a rank of ngpus={self.world_size}")
        gpu = Gpu(gpu_id, _int(element, "i_chunks", where, 0), _int(element, "o_chunks", where, 0),
                  _int(element, "s_chunks", where, 0), {}, where)
        input_blocks, output_blocks = self._blocks()
        for attribute, chunks, blocks in (("i_chunks", gpu.input_chunks, input_blocks),
                                          ("o_chunks", gpu.output_chunks, output_blocks)):
            if chunks > blocks * self.chunks_per_block:
                raise PlanImportError(where, attribute, f"is {chunks}, more than the {blocks * self.chunks_per_block} "
                                                        f"chunks nchunksperloop gives that {self.collective} buffer")
        for tb_element in _children(element, "tb", where):
            tb = self._tb(gpu, tb_element)
            if tb.id in gpu.tbs:
                raise PlanImportError(tb.element, "id", "appears twice")
            gpu.tbs[tb.id] = tb
        if sorted(gpu.tbs) != list(range(len(gpu.tbs))):
            raise PlanImportError(where, None, f"thread block ids {sorted(gpu.tbs)} are not 0..{len(gpu.tbs) - 1}")
        return gpu

    def _blocks(self) -> tuple[int, int]:
        return geometry.buffer_blocks(self.collective, self.world_size)

    def _tb(self, gpu: Gpu, element: ET.Element) -> ThreadBlock:
        tb_id = _int(element, "id", f"<tb> of {gpu.element}", 0)
        where = f'<tb id="{tb_id}"> of {gpu.element}'
        tb = ThreadBlock(gpu.id, tb_id, _int(element, "send", where, -1), _int(element, "recv", where, -1),
                         _int(element, "chan", where, 0), [], where)
        for attribute, peer in (("send", tb.send), ("recv", tb.recv)):
            if peer == gpu.id or peer >= self.world_size:
                raise PlanImportError(where, attribute, f"peer {peer} is not another rank of ngpus={self.world_size}")
        if tb.chan >= self.nchannels:
            raise PlanImportError(where, "chan", f"is {tb.chan}, not below nchannels={self.nchannels}")
        for index, step_element in enumerate(_children(element, "step", where)):
            step = self._step(gpu, tb, step_element)
            if step.s != index:
                raise PlanImportError(step.element, "s", f"is {step.s} but the step is number {index} of its "
                                                         "thread block")
            tb.steps.append(step)
        return tb

    def _step(self, gpu: Gpu, tb: ThreadBlock, element: ET.Element) -> Step:
        s = _int(element, "s", f"<step> of {tb.element}", 0)
        where = f'<step s="{s}"> of {tb.element}'
        type_ = _attr(element, "type", where)
        if type_ not in STEP_KINDS:
            raise PlanImportError(where, "type", f"unknown step type {type_!r}; the types we run are "
                                                 f"{', '.join(STEP_KINDS)}")
        kind = STEP_KINDS[type_]
        if kind.sends and tb.send < 0:
            raise PlanImportError(where, "type", f"{type_} sends but its thread block has send=-1")
        if kind.receives and tb.recv < 0:
            raise PlanImportError(where, "type", f"{type_} receives but its thread block has recv=-1")
        cnt = _int(element, "cnt", where, 0 if type_ == "nop" else 1)
        depid = _int(element, "depid", where, -1)
        deps = _int(element, "deps", where, -1)
        hasdep = _int(element, "hasdep", where, 0)
        if hasdep not in (0, 1):
            raise PlanImportError(where, "hasdep", f"is {hasdep}, not 0 or 1")
        src = self._ref(gpu, element, where, "src", cnt) if kind.reads_src else None
        dst = self._ref(gpu, element, where, "dst", cnt) if kind.writes_dst else None
        return Step(gpu.id, tb.id, s, kind, type_, src, dst, cnt, (depid, deps) if depid >= 0 else None,
                    bool(hasdep), where)

    def _ref(self, gpu: Gpu, element: ET.Element, where: str, side: str, cnt: int) -> tuple[str, int]:
        letter = _attr(element, f"{side}buf", where)
        if letter not in BUFFERS:
            raise PlanImportError(where, f"{side}buf", f"unknown buffer {letter!r}; one of {', '.join(BUFFERS)}")
        buffer = BUFFERS[letter]
        offset = _int(element, f"{side}off", where, 0)
        input_blocks, output_blocks = self._blocks()
        size = {"input": input_blocks * self.chunks_per_block, "output": output_blocks * self.chunks_per_block,
                "scratch": gpu.scratch_chunks}[buffer]
        if offset + cnt > size:
            raise PlanImportError(where, f"{side}off", f"chunks {offset}..{offset + cnt - 1} are past the {size} "
                                                       f"chunks of the {buffer}")
        return buffer, offset

    def _check_dependency(self, gpu: Gpu, step: Step) -> None:
        if step.dep is None:
            return
        tb_id, s = step.dep
        producer = gpu.tbs.get(tb_id)
        if producer is None or not 0 <= s < len(producer.steps):
            raise PlanImportError(step.element, "depid", f"names step {s} of thread block {tb_id}, which "
                                                         f"{gpu.element} does not have")
        if tb_id == step.tb:
            if s >= step.s:
                raise PlanImportError(step.element, "deps", "depends on a later step of its own thread block")
            return
        if not producer.steps[s].hasdep:
            raise PlanImportError(producer.steps[s].element, "hasdep", f"is 0, but {step.element} depends on it: the "
                                                                      "interpreter would never mark it done")


@dataclasses.dataclass
class _Transfer:
    """One send matched with its receive: ``slot`` is the first of ``cnt`` scratch chunks of the receiver."""

    sender: Step
    receiver: Step
    slot: int


class _Translation:
    """The DSL program of an ``_Algo``, lowered."""

    def __init__(self, algo: _Algo):
        self.algo = algo
        self.by_send: dict[tuple, _Transfer] = {}  # (gpu, tb, s) of the sender -> transfer
        self.by_receive: dict[tuple, _Transfer] = {}
        self.temps: dict[tuple, int] = {}  # (gpu, tb, s, role) -> first scratch chunk of a temporary
        self.next_scratch = [gpu.scratch_chunks for gpu in algo.gpus]
        self.pipes: dict[tuple[int, int, int], MemoryChannel] = {}  # (sender, receiver, chan) -> channel
        self._match_transfers()
        self.inputs = self._input_places()
        self.program = Program(algo.collective, algo.world_size, name=algo.name, chunks=algo.chunks_per_block,
                               scratch_chunks=max(self.next_scratch), protocol=algo.protocol,
                               permutation=algo.permutation)
        self.order = ThreadBlockOrder(self.program)
        self.waits_done: dict[tuple, int] = {}  # (gpu, producer tb, consumer tb) -> waits recorded
        self.signalled = self._signalled_steps()
        for gpu in algo.gpus:
            self.inputs.add_prologue(self.program, self.order, gpu.id, len(gpu.tbs))
            for tb in gpu.tbs.values():
                for step in tb.steps:
                    self._translate(step)
        self.plan = lowered_plan(self.program, self.inputs)

    # Pass 1: transfers, scratch and where the input lives ----------------------------------------------

    def _allocate(self, gpu: int, count: int) -> int:
        start = self.next_scratch[gpu]
        self.next_scratch[gpu] += count
        return start

    def _match_transfers(self) -> None:
        senders: dict[tuple, ThreadBlock] = {}
        receivers: dict[tuple, ThreadBlock] = {}
        for gpu in self.algo.gpus:
            for tb in gpu.tbs.values():
                for role, peer, table in (("send", tb.send, senders), ("recv", tb.recv, receivers)):
                    kind = "sends" if role == "send" else "receives"
                    if peer < 0 or not any(getattr(step.kind, kind) for step in tb.steps):
                        continue
                    key = (gpu.id, peer, tb.chan) if role == "send" else (peer, gpu.id, tb.chan)
                    if key in table:
                        raise PlanImportError(tb.element, role, f"thread block {table[key].id} also has {role}="
                                                                f"{peer} on chan {tb.chan}: one connection per peer "
                                                                "and channel")
                    table[key] = tb
        for key in sorted(set(senders) | set(receivers)):
            sender_tb, receiver_tb = senders.get(key), receivers.get(key)
            sends = [step for step in sender_tb.steps if step.kind.sends] if sender_tb else []
            receives = [step for step in receiver_tb.steps if step.kind.receives] if receiver_tb else []
            if len(sends) != len(receives):
                source, target, chan = key
                tb = sender_tb or receiver_tb
                raise PlanImportError(tb.element, "send" if tb is sender_tb else "recv",
                                      f"gpu {source} sends {len(sends)} times to gpu {target} on chan {chan} but gpu "
                                      f"{target} receives {len(receives)} times")
            for send, receive in zip(sends, receives):
                if send.cnt != receive.cnt:
                    raise PlanImportError(receive.element, "cnt", f"is {receive.cnt} but the matching send, "
                                                                  f"{send.element}, has cnt={send.cnt}")
                transfer = _Transfer(send, receive, self._allocate(receive.gpu, receive.cnt))
                self.by_send[send.gpu, send.tb, send.s] = transfer
                self.by_receive[receive.gpu, receive.tb, receive.s] = transfer
                if self.algo.protocol == "LL" and receive.kind.reduces:
                    self.temps[receive.gpu, receive.tb, receive.s, "unpacked"] = self._allocate(receive.gpu,
                                                                                                 receive.cnt)
                if receive.kind.reduces and not receive.kind.stores:
                    self.temps[receive.gpu, receive.tb, receive.s, "result"] = self._allocate(receive.gpu,
                                                                                               receive.cnt)

    def _input_places(self) -> InputPlaces:
        """Out of place, a gpu a step of which writes its input runs on a private copy past its other scratch."""
        algo = self.algo
        input_chunks = geometry.buffer_blocks(algo.collective, algo.world_size)[0] * algo.chunks_per_block
        copies = {gpu.id: self._allocate(gpu.id, input_chunks) for gpu in algo.gpus if not algo.in_place
                  and any(step.dst is not None and step.dst[0] == "input" for tb in gpu.tbs.values()
                          for step in tb.steps)}
        return InputPlaces(algo.collective, algo.chunks_per_block, input_chunks, algo.in_place, copies)

    def _signalled_steps(self) -> dict[tuple, list[int]]:
        """(gpu, producer tb, consumer tb) -> the producer's steps the consumer depends on, in order."""
        steps: dict[tuple, set] = {}
        for gpu in self.algo.gpus:
            for tb in gpu.tbs.values():
                for step in tb.steps:
                    if step.dep is not None and step.dep[0] != tb.id:
                        steps.setdefault((gpu.id, step.dep[0], tb.id), set()).add(step.dep[1])
        return {key: sorted(value) for key, value in steps.items()}

    # Pass 2: the program -------------------------------------------------------------------------------

    def _pipe(self, transfer: _Transfer) -> MemoryChannel:
        """The memory channel of the transfer's (sender, receiver, chan): made once per connection."""
        sender, receiver = transfer.sender, transfer.receiver
        key = (sender.gpu, receiver.gpu, self.algo.gpus[sender.gpu].tbs[sender.tb].chan)
        if key not in self.pipes:
            self.pipes[key] = MemoryChannel(self.program, sender.gpu, receiver.gpu, self.algo.protocol)
        return self.pipes[key]

    def _chunk(self, gpu: int, ref: tuple[str, int], count: int) -> Chunk:
        return self.inputs.chunk(gpu, *ref, count)

    def _translate(self, step: Step) -> None:
        first = len(self.program.operations)
        self._wait_for_dependency(step)
        self._data_step(step)
        for (gpu, producer, consumer), steps in self.signalled.items():
            if gpu == step.gpu and producer == step.tb and step.s in steps:
                self.order.signal(gpu, producer, consumer)
        for operation in self.program.operations[first:]:
            operation.src_line = step.element

    def _wait_for_dependency(self, step: Step) -> None:
        if step.dep is None or step.dep[0] == step.tb:
            return
        key = (step.gpu, step.dep[0], step.tb)
        needed = self.signalled[key].index(step.dep[1]) + 1
        while self.waits_done.get(key, 0) < needed:
            self.order.wait(step.gpu, step.dep[0], step.tb)
            self.waits_done[key] = self.waits_done.get(key, 0) + 1

    def _data_step(self, step: Step) -> None:
        kind, gpu, tb, cnt = step.kind, step.gpu, step.tb, step.cnt
        rank = self.program.rank(gpu)
        if kind.copies:
            rank.copy(self._chunk(gpu, step.dst, cnt), self._chunk(gpu, step.src, cnt), tb=tb)
            return
        if kind.local_reduce:
            dst = self._chunk(gpu, step.dst, cnt)
            rank.reduce(dst, [dst, self._chunk(gpu, step.src, cnt)], tb=tb)
            return
        value = self._chunk(gpu, step.src, cnt) if kind.reads_src else None
        if kind.receives:
            value = self._receive(step, value)
        if kind.sends:
            self._send(step, value)

    def _temp(self, step: Step, role: str) -> Chunk:
        return Chunk(step.gpu, "scratch", self.temps[step.gpu, step.tb, step.s, role], step.cnt)

    def _receive(self, step: Step, src: Chunk | None) -> Chunk:
        """Record the receive part of ``step``; return where its result (what it stores or sends on) is."""
        transfer = self.by_receive[step.gpu, step.tb, step.s]
        pipe, kind, tb, rank = self._pipe(transfer), step.kind, step.tb, self.program.rank(step.gpu)
        slot = Chunk(step.gpu, "scratch", transfer.slot, step.cnt)
        result = self._chunk(step.gpu, step.dst, step.cnt) if kind.stores else self._temp(step, "result")
        if self.algo.protocol == "HB":
            pipe.wait(tb=tb)
            arrived = slot
        elif kind.reduces:
            arrived = self._temp(step, "unpacked")
            pipe.read_packets(arrived, slot, tb=tb)
        else:
            pipe.read_packets(result, slot, tb=tb)
            return result
        if kind.reduces:
            rank.reduce(result, [src, arrived], tb=tb)
        else:
            rank.copy(result, arrived, tb=tb)
        return result

    def _send(self, step: Step, value: Chunk) -> None:
        transfer = self.by_send[step.gpu, step.tb, step.s]
        pipe = self._pipe(transfer)
        slot = Chunk(transfer.receiver.gpu, "scratch", transfer.slot, step.cnt)
        if self.algo.protocol == "HB":
            pipe.put(slot, value, tb=step.tb)
            pipe.signal(tb=step.tb)
        else:
            pipe.put_packets(slot, value, tb=step.tb)
