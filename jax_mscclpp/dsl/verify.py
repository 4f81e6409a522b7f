"""The verifier: proves a plan computes its collective, free of races and deadlocks, or says where it fails.

Static checks first (schema and ranges, channel use, barriers), then a symbolic run of every thread block of
every rank. Each chunk holds a symbolic value: the sorted tuple of (rank, input chunk) contributions reduced
into it, or None while undefined. Ordering is tracked with vector clocks (PLAN.md, "Execution model"):

* every thread block is an agent whose clock advances at each of its operations; its reads and writes are
  stamped with (agent, epoch);
* a ``signal`` releases the signaler's clock, plus, on a port channel, its DMA puts on that channel; the k-th
  ``wait`` on the other end acquires what the k-th signal released;
* a port channel ``put`` is performed by a DMA stream (one per thread block and channel), in FIFO order: its
  source read and remote write are stamped with the stream, and the issuing thread block learns that they
  finished only at ``flush``;
* LL packets carry their own flag: ``read_packets`` waits for the packet write and needs no clock ordering.

An access is ordered after an earlier one when the accessor's clock covers the earlier stamp. A read not
ordered after the last write, or a write not ordered after the last write and every read since, is a race.
Because the k-th wait always pairs with the k-th signal, these orders do not depend on the interleaving the
symbolic run picks (a fixed round-robin over thread blocks that honours waits).
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict

from .. import layout
from . import geometry
from .access import add_pending, chunk_keys, conflicts, is_barrier_point, op_accesses, placed_refs
from .errors import OpLocation, VerificationError
from .ops import FLUSH, LOCAL, READ, SIGNAL, VIA, WAIT, WRITE, spec_of
from .plan_format import describe_ref, iter_ops, locate, permutation_of, validate_plan


def verify_plan(plan: dict) -> dict:
    """Raise VerificationError unless the plan is correct; return the plan. (``program.verify`` takes a Program
    too, lowering it first.)"""
    _check_statically(plan)
    _SymbolicRun(plan).run()
    return plan


def _check_statically(plan: dict) -> None:
    validate_plan(plan)
    _check_channel_use(plan)
    _check_barriers(plan)


def writers_of_reads(plan: dict) -> dict[tuple, list]:
    """For a plan that verifies: (rank, thread block, op index, path of the reference in the op, ``Placed.path``)
    of every plain (not packet) chunk reference an operation reads -> per chunk of it, the location of the
    operation whose write it reads (None where the chunk is the input, never written). In a plan free of races
    this does not depend on the order the symbolic run picks. Raises VerificationError as ``verify_plan`` does."""
    verify_plan(plan)
    run = _SymbolicRun(plan, read_log={})
    run.run()
    return run.read_log


def execution_order(plan: dict) -> list[tuple[int, int, int]]:
    """For a plan that verifies: (rank, thread block, op index) of every operation in the order the symbolic run
    performed them, one interleaving the plan can run in (each operation after every one it waits for). Raises
    VerificationError as ``verify_plan`` does."""
    _check_statically(plan)
    run = _SymbolicRun(plan, order_log=[])
    run.run()
    return run.order_log


def _describe_key(key: tuple) -> str:
    rank, buffer, index = key
    return f"rank {rank} {buffer}[{index}]"


def op_channels(op: dict) -> list[int]:
    """Every channel ``op`` names: its own, then those of its VIA entries."""
    spec = spec_of(op["op"])
    channels = [op["channel"]] if spec.channel else []
    channels += [item["channel"] for operand in spec.operands if operand.shape == VIA for item in op[operand.field]]
    return channels


def check_channel_kinds(plan: dict) -> None:
    """Raise a ``channel`` VerificationError unless every channel each operation names has a (type, protocol)
    that the operation's row of the op table allows."""
    for rank, tb, index, op in iter_ops(plan):
        channels = plan["ranks"][rank]["channels"]
        for channel_index in op_channels(op):
            _check_kind(op, channel_index, channels[channel_index], locate(rank, tb, index, op))


def _check_kind(op: dict, channel_index: int, channel: dict, at: OpLocation) -> None:
    if (channel["type"], channel["protocol"]) not in spec_of(op["op"], at).channel_kinds:
        raise VerificationError("channel", f"{op['op']} cannot use channel {channel_index} "
                                           f"({channel['type']}, {channel['protocol']})", at)


def _check_channel_use(plan: dict) -> None:
    """Channel types and protocols per operation, one thread block per channel endpoint, remote writes only
    into scratch, input never written, scratch laid out for packets when packets are used."""
    owners: dict[tuple[int, int], tuple[int, OpLocation]] = {}
    for rank, tb, index, op in iter_ops(plan):
        at = locate(rank, tb, index, op)
        spec = spec_of(op["op"], at)
        channels = plan["ranks"][rank]["channels"]
        for channel_index in op_channels(op):
            _check_kind(op, channel_index, channels[channel_index], at)
            if channels[channel_index]["type"] == "switch":
                continue
            owner = owners.setdefault((rank, channel_index), (tb, at))
            if owner[0] != tb:
                raise VerificationError("channel", f"channel {channel_index} is also used by {owner[1]}; each "
                                                   "channel endpoint belongs to one thread block", at)
        for place in placed_refs(op, rank, channels):
            if (place.operand.place != LOCAL or place.operand.packets) and place.ref["buffer"] != "scratch":
                raise VerificationError("buffer", f"{describe_ref(place.ref)}: peers and packets only use scratch "
                                                  "(XLA owns input and output)", at)
        _, writes = op_accesses(op, rank, channels)
        if any(buffer == "input" for _, buffer, _ in writes):
            raise VerificationError("buffer", "writes the input buffer, which is read-only", at)
        if spec.uses_packets and not plan["buffers"]["scratch"]["packets"]:
            raise VerificationError("schema", "uses LL packets but scratch 'packets' is false", at)


def _check_barriers(plan: dict) -> None:
    """Two data operations of one thread block that touch a common chunk, one writing it, need a sync
    operation between them (barriers.py). A put_with_signal orders only what follows its put: its put is
    checked against what came before (PLAN.md, "Execution model")."""
    for rank, rank_plan in enumerate(plan["ranks"]):
        for tb, block in enumerate(rank_plan["threadblocks"]):
            pending: dict = {}
            last_toucher: dict = {}
            for index, op in enumerate(block["ops"]):
                reads, writes = op_accesses(op, rank, rank_plan["channels"])
                if conflicts(reads, writes, pending):
                    key = next(k for k in reads + writes if k in pending and (pending[k] or k in writes))
                    earlier = locate(rank, tb, last_toucher[key], block["ops"][last_toucher[key]])
                    raise VerificationError("barrier", f"touches {_describe_key(key)}, which {earlier} accessed "
                                                       "with no barrier between them", locate(rank, tb, index, op))
                add_pending(reads, writes, pending)
                for key in reads + writes:
                    last_toucher[key] = index
                if is_barrier_point(op):
                    pending = {}


@dataclasses.dataclass(frozen=True)
class _Access:
    """A read or write of one chunk: who (agent), when (epoch of the agent), by which operation; LL packet
    writes also record the sending (rank, channel)."""

    agent: tuple
    epoch: int
    at: OpLocation
    packets_from: tuple | None = None


@dataclasses.dataclass
class _Cell:
    """One chunk of one buffer of one rank: its symbolic value, last write and reads since then."""

    value: tuple | None = None
    write: _Access | None = None
    reads: list = dataclasses.field(default_factory=list)


class _Block:
    """A thread block during the symbolic run."""

    def __init__(self, rank: int, index: int, ops: list):
        self.rank = rank
        self.index = index
        self.ops = ops
        self.pc = 0
        self.agent = ("tb", rank, index)
        self.clock: dict = {}
        self.dma_puts: Counter = Counter()  # channel -> port puts issued
        self.last_put: dict = {}  # channel -> location of the latest port put

    def dma_agent(self, channel: int) -> tuple:
        return ("dma", self.rank, self.index, channel)

    def location(self) -> OpLocation:
        return locate(self.rank, self.index, self.pc, self.ops[self.pc])


def _ordered(access: _Access | None, clock: dict) -> bool:
    """Whether ``access`` happens before whoever knows ``clock``."""
    return access is None or clock.get(access.agent, 0) >= access.epoch


def _join(clock: dict, other: dict) -> None:
    for agent, epoch in other.items():
        if clock.get(agent, 0) < epoch:
            clock[agent] = epoch


class _SymbolicRun:
    def __init__(self, plan: dict, read_log: dict | None = None, order_log: list | None = None):
        self.plan = plan
        self.read_log = read_log  # (rank, tb, op index, path) -> writer locations (writers_of_reads), if kept
        self.order_log = order_log  # (rank, tb, op index) as performed (execution_order), if kept
        self.channels = [rank_plan["channels"] for rank_plan in plan["ranks"]]
        self.blocks = [_Block(rank, tb, block["ops"]) for rank, rank_plan in enumerate(plan["ranks"])
                       for tb, block in enumerate(rank_plan["threadblocks"])]
        self.cells: dict[tuple, _Cell] = {}
        for rank in range(plan["world_size"]):
            for index in range(geometry.chunk_total(plan["buffers"], "input")):
                self.cells[rank, "input", index] = _Cell(value=((rank, index),))
        self.released: dict[tuple, list] = defaultdict(list)  # (rank, channel) -> clocks of its signals
        self.last_signal: dict[tuple, OpLocation] = {}
        self.waited: Counter = Counter()  # (rank, channel) -> waits completed
        self.undefined_read: tuple | None = None  # (location, chunk key) of the first read of nothing
        # Static facts, for naming the cause of a deadlock.
        self.signals_planned: Counter = Counter()
        self.packet_targets: set = set()
        for rank, _, _, op in iter_ops(plan):
            if spec_of(op["op"]).sync == SIGNAL:
                self.signals_planned[rank, op["channel"]] += 1
            for place in placed_refs(op, rank, self.channels[rank]):
                if place.operand.access == WRITE and place.operand.packets:
                    self.packet_targets.update(chunk_keys(place.rank, place.ref))

    # Scheduling -----------------------------------------------------------------------------------------

    def run(self) -> None:
        pending = [block for block in self.blocks if block.ops]
        while pending:
            progressed = False
            for block in pending:
                if self._ready(block):
                    self._step(block)
                    progressed = True
            pending = [block for block in pending if block.pc < len(block.ops)]
            if pending and not progressed:
                raise self._deadlock(pending)
        self._check_end()

    def _source(self, rank: int, channel: int) -> tuple[int, int]:
        """The (rank, channel) at the other end of a memory/port channel."""
        entry = self.channels[rank][channel]
        return entry["peer"], entry["peer_channel"]

    def _packet_keys(self, rank: int, op: dict) -> list:
        """The chunks whose packets ``op`` unpacks (it waits until they have been written)."""
        return [key for place in placed_refs(op, rank, self.channels[rank])
                if place.operand.access == READ and place.operand.packets for key in chunk_keys(place.rank, place.ref)]

    def _ready(self, block: _Block) -> bool:
        op = block.ops[block.pc]
        if spec_of(op["op"]).sync == WAIT:
            source = self._source(block.rank, op["channel"])
            return len(self.released[source]) > self.waited[block.rank, op["channel"]]
        return all(key in self.cells and self.cells[key].write is not None
                   for key in self._packet_keys(block.rank, op))

    def _step(self, block: _Block) -> None:
        op = block.ops[block.pc]
        at = block.location()
        if self.order_log is not None:
            self.order_log.append((block.rank, block.index, block.pc))
        block.pc += 1
        block.clock[block.agent] = block.pc
        me = _Access(block.agent, block.pc, at)
        spec = spec_of(op["op"], at)
        if spec.operands:
            self._data_step(block, op, me)
        if spec.sync == SIGNAL:
            self._signal(block, op["channel"], me)
        elif spec.sync == WAIT:
            self._wait(block, op["channel"])
        elif spec.sync == FLUSH:
            self._flush(block, op["channel"])

    # Memory ---------------------------------------------------------------------------------------------

    def _cell(self, key: tuple) -> _Cell:
        return self.cells.setdefault(key, _Cell())

    def _read(self, key: tuple, reader: _Access, clock: dict):
        cell = self._cell(key)
        if cell.write is not None and cell.write.packets_from is not None:
            raise VerificationError("packets", f"reads {_describe_key(key)} as plain data, but it holds LL packets "
                                               f"from {cell.write.at}; unpack them with read_packets", reader.at)
        if not _ordered(cell.write, clock):
            raise VerificationError("race", f"reads {_describe_key(key)}, written by {cell.write.at}, with no "
                                            "wait ordering that write before this read", reader.at)
        return self._record_read(cell, key, reader)

    def _read_packets(self, key: tuple, reader: _Access, rank: int, channel: int):
        cell = self._cell(key)
        sender = self._source(rank, channel)
        if cell.write.packets_from is None:
            raise VerificationError("packets", f"read_packets of {_describe_key(key)}, which holds plain data "
                                               f"written by {cell.write.at}", reader.at)
        if cell.write.packets_from != sender:
            raise VerificationError("packets", f"the packets in {_describe_key(key)} come from {cell.write.at}, "
                                               f"not from this channel's sender (rank {sender[0]} channel "
                                               f"{sender[1]})", reader.at)
        return self._record_read(cell, key, reader)

    def _record_read(self, cell: _Cell, key: tuple, reader: _Access):
        cell.reads.append(reader)
        if cell.value is None and self.undefined_read is None:
            self.undefined_read = (reader.at, key)
        return cell.value

    def _write(self, key: tuple, value, writer: _Access, clock: dict) -> None:
        cell = self._cell(key)
        if writer.packets_from is not None and cell.write is not None and cell.write.packets_from is not None:
            raise VerificationError("packets", f"writes packets into {_describe_key(key)}, already filled by "
                                               f"{cell.write.at}: a packet slot takes one write per call", writer.at)
        if not _ordered(cell.write, clock):
            raise VerificationError("race", f"writes {_describe_key(key)}, also written by {cell.write.at}, with "
                                            "nothing ordering the two writes", writer.at)
        for read in cell.reads:
            if not _ordered(read, clock):
                raise self._write_after_read_race(key, cell, read, writer)
        cell.value, cell.write, cell.reads = value, writer, []

    def _write_after_read_race(self, key: tuple, cell: _Cell, read: _Access, writer: _Access) -> VerificationError:
        if read.agent[0] == "dma":
            return VerificationError("flush", f"overwrites {_describe_key(key)} while the port put {read.at} may "
                                              f"still be reading it: flush channel {read.agent[3]} first", writer.at)
        if cell.write is None:  # the reader found nothing: it ran ahead of the write it needed
            return VerificationError("race", f"reads {_describe_key(key)}, written by {writer.at}, with no wait "
                                             "ordering that write before this read", read.at)
        return VerificationError("race", f"overwrites {_describe_key(key)} while {read.at} may still be reading "
                                         "it: no signal/wait orders that read before this write", writer.at)

    @staticmethod
    def _combine(values: list, at: OpLocation):
        if any(value is None for value in values):
            return None
        merged = sorted(contribution for value in values for contribution in value)
        for a, b in zip(merged, merged[1:]):
            if a == b:
                raise VerificationError("double_count", f"the reduction counts rank {a[0]}'s input[{a[1]}] twice", at)
        return tuple(merged)

    # Operations (ops.py: the data step, then the synchronization role) --------------------------------

    def _data_step(self, block: _Block, op: dict, me: _Access) -> None:
        """Per chunk: read every source, reduce the values in order, write the result to every destination.
        On a port channel the DMA stream of (thread block, channel) reads and writes, in FIFO order; the thread
        block learns that they finished at ``flush``."""
        rank = block.rank
        channel = op.get("channel")
        if channel is not None and self.channels[rank][channel]["type"] == "port":
            block.dma_puts[channel] += 1
            agent = block.dma_agent(channel)
            actor = _Access(agent, block.dma_puts[channel], me.at)
            knowledge = {**block.clock, agent: actor.epoch}  # the stream's own FIFO order
            block.last_put[channel] = me.at
        else:
            actor, knowledge = me, block.clock
        placed = placed_refs(op, rank, self.channels[rank])
        sources = [place for place in placed if place.operand.access == READ]
        destinations = [place for place in placed if place.operand.access == WRITE]
        for t in range(placed[0].ref["count"]):
            values = []
            for place in sources:
                key = chunk_keys(place.rank, place.ref)[t]
                if place.operand.packets:
                    values.append(self._read_packets(key, actor, rank, place.channel))
                else:
                    values.append(self._read(key, actor, block.clock))
                    if self.read_log is not None:
                        writer = self.cells[key].write
                        self.read_log.setdefault((rank, block.index, block.pc - 1, place.path), []).append(
                            writer.at if writer else None)
            result = values[0] if len(values) == 1 else self._combine(values, me.at)
            for place in destinations:
                packets = (rank, place.channel) if place.operand.packets else None
                writer = dataclasses.replace(actor, packets_from=packets)
                self._write(chunk_keys(place.rank, place.ref)[t], result, writer, knowledge)

    def _signal(self, block: _Block, channel: int, me: _Access) -> None:
        """Release the thread block's clock, and its DMA puts on a port channel."""
        released = dict(block.clock)
        if block.dma_puts[channel]:
            released[block.dma_agent(channel)] = block.dma_puts[channel]
        self.released[block.rank, channel].append(released)
        self.last_signal[block.rank, channel] = me.at

    def _wait(self, block: _Block, channel: int) -> None:
        """Acquire what the matching signal released."""
        key = (block.rank, channel)
        _join(block.clock, self.released[self._source(*key)][self.waited[key]])
        self.waited[key] += 1

    def _flush(self, block: _Block, channel: int) -> None:
        """Learn that the thread block's DMA puts on the channel have finished."""
        if block.dma_puts[channel]:
            _join(block.clock, {block.dma_agent(channel): block.dma_puts[channel]})

    # Diagnosis ------------------------------------------------------------------------------------------

    def _deadlock(self, pending: list) -> VerificationError:
        for block in pending:
            op, at = block.ops[block.pc], block.location()
            if spec_of(op["op"]).sync == WAIT:
                source = self._source(block.rank, op["channel"])
                needed = self.waited[block.rank, op["channel"]] + 1
                planned = self.signals_planned[source]
                if planned < needed:
                    return VerificationError("deadlock", f"waits for signal #{needed} of rank {source[0]} channel "
                                                         f"{source[1]}, but that channel sends only {planned} "
                                                         "signal(s): no signal satisfies this wait", at)
                continue
            for key in self._packet_keys(block.rank, op):
                if key not in self.packet_targets:
                    return VerificationError("deadlock", f"waits for packets in {_describe_key(key)}, which no "
                                                         "put_packets writes", at)
        blocked = "; ".join(str(block.location()) for block in pending)
        return VerificationError("deadlock", f"no thread block can proceed; blocked: {blocked}",
                                 pending[0].location())

    def _check_end(self) -> None:
        for block in self.blocks:
            for channel, issued in block.dma_puts.items():
                if block.clock.get(block.dma_agent(channel), 0) < issued:
                    raise VerificationError("flush", f"this port put on channel {channel} is not flushed before its "
                                                     "thread block ends, so its source may still be read after the "
                                                     "call returns", block.last_put[channel])
        for (rank, channel), released in self.released.items():
            source = self._source(rank, channel)
            if len(released) != self.waited[source]:
                raise VerificationError("sync", f"signals channel {channel} {len(released)} times but rank "
                                                f"{source[0]} waits {self.waited[source]} times on its end; an "
                                                "unmatched signal would satisfy a wait of the next call",
                                        self.last_signal[rank, channel])
        if self.undefined_read is not None:
            at, key = self.undefined_read
            raise VerificationError("undefined", f"reads {_describe_key(key)}, which nothing ever writes", at)
        self._check_postcondition()

    def _check_postcondition(self) -> None:
        plan = self.plan
        world, collective = plan["world_size"], plan["collective"]
        per_block = plan["buffers"]["input"]["chunks_per_block"]
        sources = {dst: src for src, dst in permutation_of(plan) or ()}
        for rank in range(world):
            for index in range(geometry.chunk_total(plan["buffers"], "output")):
                expected = _expected(collective, world, per_block, rank, index, sources)
                cell = self.cells.get((rank, "output", index), _Cell())
                if cell.value != expected:
                    last_writer = cell.write.at if cell.write else None
                    raise VerificationError("postcondition", f"{collective} leaves rank {rank} output[{index}] = "
                                                             f"{_describe_value(cell.value)}; expected "
                                                             f"{_describe_value(expected)}", last_writer)


def _expected(collective: str, world: int, per_block: int, rank: int, index: int, sources: dict) -> tuple | None:
    """The contributions output chunk ``index`` of ``rank`` must hold (the collective's postcondition), from its
    block layout (``layout.py``): the chunk comes from the input block for ``rank`` (block 0 when the input holds
    one block), of rank b for output block b when the output holds one block per rank, else of every rank (the
    reductions, all_reduce and reduce_scatter). The permutation's: the same chunk of the input of the rank that
    sends to ``rank`` (``sources``: destination -> source), and nothing where none does."""
    block, within = divmod(index, per_block)
    if collective == "permute":
        return ((sources[rank], within),) if rank in sources else None
    per_rank_in, per_rank_out = layout.per_rank(collective)
    source = (rank if per_rank_in else 0) * per_block + within
    return ((block, source),) if per_rank_out else tuple((q, source) for q in range(world))


def _describe_value(value: tuple | None) -> str:
    if value is None:
        return "nothing"
    by_chunk = defaultdict(list)
    for rank, index in value:
        by_chunk[index].append(rank)
    return " (+) ".join(f"input[{index}] of ranks {ranks}" for index, ranks in sorted(by_chunk.items()))
