"""MSCCL-IR: a schedule written as the XML that msccl-tools emits.

``<algo name proto nchannels nchunksperloop ngpus coll inplace>`` holds one ``<gpu id i_chunks o_chunks
s_chunks>`` per rank, which holds its thread blocks ``<tb id send recv chan>``, which hold their instructions in
order, ``<step s type srcbuf srcoff dstbuf dstoff cnt depid deps hasdep>``: ``type`` is the instruction (``s``,
``r``, ``rcs``, ``rrc``, ``rrs``, ``rrcs``, ``cpy``, ``re``, ``nop``), buffers are ``i``, ``o`` and ``s`` (every
scratch buffer of a rank laid end to end), ``depid``/``deps`` name the one instruction of another thread block
of the rank that this one waits for (-1: none; more than one become ``nop`` steps before it), and ``hasdep`` says
whether another waits for this one.

Replication follows MSCCLang's: ``instances`` copies of every thread block (id ``tb * instances + i``, channel
``nchannels * i + chan``); scratch chunks are batched per instance, input and output chunks interleaved
(``index * instances + i * count``) or, without ``interleaved_replication``, batched per instance. Thread blocks
of a rank are numbered in order of (send peer, receive peer, channel).
"""

from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET

from .buffers import Buffer, is_scratch

_LOCAL_SOURCE = {"s", "cpy", "re"}
_LOCAL_DESTINATION = {"r", "rcs", "rrs", "rrc", "rrcs", "cpy", "re"}


@dataclasses.dataclass(eq=False)
class _Step:
    """One written instruction of one instance; ``deps`` are steps of other thread blocks of the rank."""

    kind: str
    src: tuple | None  # (buffer code, index)
    dst: tuple | None
    count: int
    deps: list
    tb: _Block | None = None
    index: int = 0


@dataclasses.dataclass(eq=False)
class _Block:
    send: int
    recv: int
    channel: int
    steps: list = dataclasses.field(default_factory=list)
    expanded: list = dataclasses.field(default_factory=list)  # steps with their nop steps
    id: int = 0


def to_xml(prog) -> str:
    schedule = prog.schedule()
    k = prog.instances
    layout = _ScratchLayout(prog)
    max_channels = max([1] + [tb.channel + 1 for tbs in schedule.ranks for tb in tbs])
    blocks: list[list[_Block]] = []
    for rank, tbs in enumerate(schedule.ranks):
        replicas: dict[tuple, _Block] = {}  # (tb id, instance) -> block
        steps: dict[tuple, _Step] = {}  # (id(instruction), instance) -> step
        for i in range(k):
            for tb in tbs:
                replicas[tb.id, i] = _Block(tb.send, tb.recv, max_channels * i + max(tb.channel, 0))
        for tb in tbs:
            for instruction in tb.instructions:
                src, dst = _refs(instruction)
                for i in range(k):
                    steps[id(instruction), i] = _Step(instruction.kind, layout.place(src, i), layout.place(dst, i),
                                                      src.size, [], replicas[tb.id, i])
        for tb in tbs:
            for instruction in tb.instructions:
                for i in range(k):
                    step = steps[id(instruction), i]
                    step.deps = [steps[id(dep), i] for dep in instruction.dependencies()]
                    step.tb.steps.append(step)
        ordered = sorted(replicas.items(), key=lambda item: (item[1].send, item[1].recv, item[1].channel,
                                                             item[0][0] * k + item[0][1]))
        for new_id, (_, block) in enumerate(ordered):
            block.id = new_id
        blocks.append([block for _, block in ordered])
    for rank_blocks in blocks:
        _expand_dependencies(rank_blocks, prog.dependence_nop)
    return _write(prog, blocks)


def _refs(instruction):
    """(source, destination) slot ranges as MSCCL-IR writes them: a send names its remote destination, a receive
    its remote source, a fused instruction the receive's source and the send's destination."""
    if instruction.recv is None:
        operation = instruction.send.operation
        return operation.src, operation.dst
    source = instruction.recv.operation.src
    destination = (instruction.send or instruction.recv).operation.dst
    return source, destination


class _ScratchLayout:
    """Where a slot of an instance lands in MSCCL-IR's buffers."""

    def __init__(self, prog):
        self.prog = prog
        self.instances = prog.instances
        self.offsets: list[dict] = []
        for rank_buffers in prog.buffers:
            offsets, offset = {}, 0
            for name, slots in rank_buffers.items():
                if is_scratch(name):
                    offsets[name] = offset
                    offset += len(slots) * self.instances
            self.offsets.append(offsets)

    def place(self, slots, instance: int) -> tuple:
        rank, buffer, index, size = slots.rank, slots.buffer, slots.index, slots.size
        length = len(self.prog.buffers[rank][buffer])
        if is_scratch(buffer):
            return ("s", self.offsets[rank][buffer] + length * instance + index)
        if self.prog.interleaved_replication:
            return (str(buffer), index * self.instances + instance * size)
        return (str(buffer), length * instance + index)


def _expand_dependencies(blocks: list[_Block], dependence_nop: bool) -> None:
    """Drop dependencies an earlier step of the same thread block already waited for; give each step one
    dependency, moving the others into ``nop`` steps right before it; number the steps."""
    for block in blocks:
        waited: dict[int, int] = {}  # id(block) -> highest step position waited for
        expanded = []
        for step in block.steps:
            needed = []
            for dep in step.deps:
                position = dep.tb.steps.index(dep)
                if waited.get(id(dep.tb), -1) < position:
                    waited[id(dep.tb)] = position
                    needed.append(dep)
            keep = [] if dependence_nop and step.kind == "re" else needed[:1]
            for dep in needed[len(keep):]:
                expanded.append(_Step("nop", None, None, 0, [dep], block))
            step.deps = keep
            expanded.append(step)
        block.expanded = expanded
    for block in blocks:
        for index, step in enumerate(block.expanded):
            step.index = index


def _write(prog, blocks: list[list[_Block]]) -> str:
    sizes: dict[tuple, int] = {}
    for rank, rank_blocks in enumerate(blocks):
        for block in rank_blocks:
            for step in block.expanded:
                if step.kind in _LOCAL_SOURCE:
                    key = (rank, step.src[0])
                    sizes[key] = max(sizes.get(key, 0), step.src[1] + step.count)
                if step.kind in _LOCAL_DESTINATION:
                    key = (rank, step.dst[0])
                    sizes[key] = max(sizes.get(key, 0), step.dst[1] + step.count)
    depended = {id(dep) for rank_blocks in blocks for block in rank_blocks for step in block.expanded
                for dep in step.deps}
    input_code, output_code = str(Buffer.input), str(Buffer.output)
    algo = ET.Element("algo")
    algo.set("name", prog.name)
    algo.set("proto", prog.protocol)
    algo.set("nchannels", str(max([0] + [block.channel + 1 for rank_blocks in blocks for block in rank_blocks])))
    algo.set("nchunksperloop", str(max([0] + [max(sizes.get((rank, input_code), 0), sizes.get((rank, output_code), 0))
                                              for rank in range(len(blocks))])))
    algo.set("ngpus", str(len(blocks)))
    algo.set("coll", prog.collective.name)
    algo.set("inplace", str(int(prog.collective.inplace)))
    for rank, rank_blocks in enumerate(blocks):
        gpu = ET.SubElement(algo, "gpu")
        gpu.set("id", str(rank))
        for attribute, code in (("i_chunks", input_code), ("o_chunks", output_code), ("s_chunks", "s")):
            gpu.set(attribute, str(sizes.get((rank, code), 0)))
        for block in rank_blocks:
            tb = ET.SubElement(gpu, "tb")
            for attribute, value in (("id", block.id), ("send", block.send), ("recv", block.recv),
                                     ("chan", block.channel)):
                tb.set(attribute, str(value))
            for step in block.expanded:
                element = ET.SubElement(tb, "step")
                src, dst = step.src or (input_code, -1), step.dst or (output_code, -1)
                dep = step.deps[0] if step.deps else None
                for attribute, value in (("s", step.index), ("type", step.kind), ("srcbuf", src[0]),
                                         ("srcoff", src[1]), ("dstbuf", dst[0]), ("dstoff", dst[1]),
                                         ("cnt", step.count), ("depid", dep.tb.id if dep else -1),
                                         ("deps", dep.index if dep else -1), ("hasdep", int(id(step) in depended))):
                    element.set(attribute, str(value))
    ET.indent(algo, space="  ")
    return ET.tostring(algo, encoding="unicode")
