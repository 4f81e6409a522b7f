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

from . import geometry
from .access import SYNC_OPS, add_pending, chunk_keys, conflicts, op_accesses
from .errors import OpLocation, VerificationError
from .plan import describe_ref, iter_ops, locate, validate_plan
from .program import Program

# Channel (type, protocol) each operation may use for its own channel, remotes and packet sources.
_CHANNEL_KINDS = {
    "put": {("memory", "HB"), ("port", "HB")},
    "put_with_signal": {("memory", "HB"), ("port", "HB")},
    "put_packets": {("memory", "LL")},
    "read_packets": {("memory", "LL")},
    "signal": {("memory", "HB"), ("memory", "LL"), ("port", "HB")},
    "wait": {("memory", "HB"), ("memory", "LL"), ("port", "HB")},
    "flush": {("memory", "HB"), ("memory", "LL"), ("port", "HB")},
    "switch_reduce": {("switch", "HB")},
    "switch_broadcast": {("switch", "HB")},
    "reduce_put": {("memory", "HB")},
    "reduce_packets": {("memory", "LL")},
}


def verify(plan_or_program) -> dict:
    """Raise VerificationError unless the plan (or the plan a Program lowers to) is correct; return the plan."""
    if isinstance(plan_or_program, Program):
        plan = plan_or_program.lower(verify=False)
    else:
        plan = plan_or_program
    validate_plan(plan)
    _check_channel_use(plan)
    _check_barriers(plan)
    _SymbolicRun(plan).run()
    return plan


def _describe_key(key: tuple) -> str:
    rank, buffer, index = key
    return f"rank {rank} {buffer}[{index}]"


def _op_channels(op: dict) -> list[int]:
    channels = [op["channel"]] if "channel" in op else []
    channels += [item["channel"] for item in op.get("remotes", []) + op.get("packet_srcs", [])]
    return channels


def _check_channel_use(plan: dict) -> None:
    """Channel types and protocols per operation, one thread block per channel endpoint, remote writes only
    into scratch, input never written, scratch laid out for packets when packets are used."""
    owners: dict[tuple[int, int], tuple[int, OpLocation]] = {}
    for rank, tb, index, op in iter_ops(plan):
        at = locate(rank, tb, index, op)
        channels = plan["ranks"][rank]["channels"]
        for channel_index in _op_channels(op):
            channel = channels[channel_index]
            if (channel["type"], channel["protocol"]) not in _CHANNEL_KINDS[op["op"]]:
                raise VerificationError("channel", f"{op['op']} cannot use channel {channel_index} "
                                                   f"({channel['type']}, {channel['protocol']})", at)
            if channel["type"] == "switch":
                continue
            owner = owners.setdefault((rank, channel_index), (tb, at))
            if owner[0] != tb:
                raise VerificationError("channel", f"channel {channel_index} is also used by {owner[1]}; each "
                                                   "channel endpoint belongs to one thread block", at)
        remote = [op["dst"]] if op["op"] in ("put", "put_packets", "put_with_signal", "switch_broadcast") else []
        remote += [item["dst"] for item in op.get("remotes", [])]
        remote += [op["src"]] if op["op"] in ("read_packets", "switch_reduce") else []
        remote += [item["src"] for item in op.get("packet_srcs", [])]
        for ref in remote:
            if ref["buffer"] != "scratch":
                raise VerificationError("buffer", f"{describe_ref(ref)}: peers and packets only use scratch "
                                                  "(XLA owns input and output)", at)
        _, writes = op_accesses(op, rank, channels)
        if any(buffer == "input" for _, buffer, _ in writes):
            raise VerificationError("buffer", "writes the input buffer, which is read-only", at)
        if op["op"] in ("put_packets", "read_packets", "reduce_packets") and not plan["buffers"]["scratch"]["packets"]:
            raise VerificationError("schema", "uses LL packets but scratch 'packets' is false", at)


def _check_barriers(plan: dict) -> None:
    """Two data operations of one thread block that touch a common chunk, one writing it, need a sync
    operation between them (barriers.py)."""
    for rank, rank_plan in enumerate(plan["ranks"]):
        for tb, block in enumerate(rank_plan["threadblocks"]):
            pending: dict = {}
            last_toucher: dict = {}
            for index, op in enumerate(block["ops"]):
                if op["op"] in SYNC_OPS:
                    pending = {}
                    continue
                reads, writes = op_accesses(op, rank, rank_plan["channels"])
                if conflicts(reads, writes, pending):
                    key = next(k for k in reads + writes if k in pending and (pending[k] or k in writes))
                    earlier = locate(rank, tb, last_toucher[key], block["ops"][last_toucher[key]])
                    raise VerificationError("barrier", f"touches {_describe_key(key)}, which {earlier} accessed "
                                                       "with no barrier between them", locate(rank, tb, index, op))
                add_pending(reads, writes, pending)
                for key in reads + writes:
                    last_toucher[key] = index


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
    def __init__(self, plan: dict):
        self.plan = plan
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
            if op["op"] in ("signal", "put_with_signal"):
                self.signals_planned[rank, op["channel"]] += 1
            if op["op"] in ("put_packets", "reduce_packets"):
                self.packet_targets.update(op_accesses(op, rank, self.channels[rank])[1])

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
        if op["op"] == "read_packets":
            return chunk_keys(rank, op["src"])
        return [key for item in op.get("packet_srcs", []) for key in chunk_keys(rank, item["src"])]

    def _ready(self, block: _Block) -> bool:
        op = block.ops[block.pc]
        if op["op"] == "wait":
            source = self._source(block.rank, op["channel"])
            return len(self.released[source]) > self.waited[block.rank, op["channel"]]
        return all(key in self.cells and self.cells[key].write is not None
                   for key in self._packet_keys(block.rank, op))

    def _step(self, block: _Block) -> None:
        op = block.ops[block.pc]
        at = block.location()
        block.pc += 1
        block.clock[block.agent] = block.pc
        me = _Access(block.agent, block.pc, at)
        getattr(self, "_op_" + op["op"])(block, op, me)

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

    # Operations -----------------------------------------------------------------------------------------

    def _op_barrier(self, block, op, me):
        pass

    def _op_copy(self, block, op, me):
        for src, dst in zip(chunk_keys(block.rank, op["src"]), chunk_keys(block.rank, op["dst"])):
            self._write(dst, self._read(src, me, block.clock), me, block.clock)

    def _op_read_packets(self, block, op, me):
        for src, dst in zip(chunk_keys(block.rank, op["src"]), chunk_keys(block.rank, op["dst"])):
            self._write(dst, self._read_packets(src, me, block.rank, op["channel"]), me, block.clock)

    def _op_reduce(self, block, op, me):
        rank = block.rank
        packet_sources = [(item["channel"], chunk_keys(rank, item["src"])) for item in op.get("packet_srcs", [])]
        plain_sources = [chunk_keys(rank, ref) for ref in op["srcs"]]
        for t, dst in enumerate(chunk_keys(rank, op["dst"])):
            values = [self._read(keys[t], me, block.clock) for keys in plain_sources]
            values += [self._read_packets(keys[t], me, rank, channel) for channel, keys in packet_sources]
            result = self._combine(values, me.at)
            self._write(dst, result, me, block.clock)
            for item in op.get("remotes", []):
                peer = self.channels[rank][item["channel"]]["peer"]
                remote = chunk_keys(peer, item["dst"])[t]
                packets = (rank, item["channel"]) if op["op"] == "reduce_packets" else None
                self._write(remote, result, dataclasses.replace(me, packets_from=packets), block.clock)

    _op_reduce_put = _op_reduce
    _op_reduce_packets = _op_reduce

    def _put(self, block, op, me, packets: bool = False) -> None:
        rank, channel = block.rank, op["channel"]
        entry = self.channels[rank][channel]
        if entry["type"] == "port":
            block.dma_puts[channel] += 1
            agent = block.dma_agent(channel)
            writer = _Access(agent, block.dma_puts[channel], me.at)
            knowledge = {**block.clock, agent: writer.epoch}  # the stream's own FIFO order
            block.last_put[channel] = me.at
        else:
            writer = dataclasses.replace(me, packets_from=(rank, channel) if packets else None)
            knowledge = block.clock
        for src, dst in zip(chunk_keys(rank, op["src"]), chunk_keys(entry["peer"], op["dst"])):
            value = self._read(src, dataclasses.replace(writer, packets_from=None), block.clock)
            self._write(dst, value, writer, knowledge)

    def _op_put(self, block, op, me):
        self._put(block, op, me)

    def _op_put_packets(self, block, op, me):
        self._put(block, op, me, packets=True)

    def _op_signal(self, block, op, me):
        channel = op["channel"]
        released = dict(block.clock)
        if block.dma_puts[channel]:
            released[block.dma_agent(channel)] = block.dma_puts[channel]
        self.released[block.rank, channel].append(released)
        self.last_signal[block.rank, channel] = me.at

    def _op_put_with_signal(self, block, op, me):
        self._put(block, op, me)
        self._op_signal(block, op, me)

    def _op_wait(self, block, op, me):
        key = (block.rank, op["channel"])
        _join(block.clock, self.released[self._source(*key)][self.waited[key]])
        self.waited[key] += 1

    def _op_flush(self, block, op, me):
        channel = op["channel"]
        if block.dma_puts[channel]:
            _join(block.clock, {block.dma_agent(channel): block.dma_puts[channel]})

    def _op_switch_reduce(self, block, op, me):
        members = self.channels[block.rank][op["channel"]]["peers"]
        for t, dst in enumerate(chunk_keys(block.rank, op["dst"])):
            values = [self._read(chunk_keys(member, op["src"])[t], me, block.clock) for member in members]
            self._write(dst, self._combine(values, me.at), me, block.clock)

    def _op_switch_broadcast(self, block, op, me):
        members = self.channels[block.rank][op["channel"]]["peers"]
        for t, src in enumerate(chunk_keys(block.rank, op["src"])):
            value = self._read(src, me, block.clock)
            for member in members:
                self._write(chunk_keys(member, op["dst"])[t], value, me, block.clock)

    # Diagnosis ------------------------------------------------------------------------------------------

    def _deadlock(self, pending: list) -> VerificationError:
        for block in pending:
            op, at = block.ops[block.pc], block.location()
            if op["op"] == "wait":
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
        for rank in range(world):
            for index in range(geometry.chunk_total(plan["buffers"], "output")):
                expected = _expected(collective, world, per_block, rank, index)
                cell = self.cells.get((rank, "output", index), _Cell())
                if cell.value != expected:
                    last_writer = cell.write.at if cell.write else None
                    raise VerificationError("postcondition", f"{collective} leaves rank {rank} output[{index}] = "
                                                             f"{_describe_value(cell.value)}; expected "
                                                             f"{_describe_value(expected)}", last_writer)


def _expected(collective: str, world: int, per_block: int, rank: int, index: int) -> tuple:
    """The contributions output chunk ``index`` of ``rank`` must hold (the collective's postcondition)."""
    block, within = divmod(index, per_block)
    if collective == "all_reduce":
        return tuple((q, index) for q in range(world))
    if collective == "reduce_scatter":
        return tuple((q, rank * per_block + index) for q in range(world))
    if collective == "all_gather":
        return ((block, within),)
    return ((block, rank * per_block + within),)  # all_to_all


def _describe_value(value: tuple | None) -> str:
    if value is None:
        return "nothing"
    by_chunk = defaultdict(list)
    for rank, index in value:
        by_chunk[index].append(rank)
    return " (+) ".join(f"input[{index}] of ranks {ranks}" for index, ranks in sorted(by_chunk.items()))
