"""An MSCCL++ program's trace (trace.py) as our Program (dsl/program.py), which then lowers, fuses, places
barriers and verifies as any program of ours does.

What the translation decides, seeing the whole program:

* **Pipes.** Our channels are pipes between one thread block of the sender and one of the receiver; an MSCCL++
  channel direction (``Link``) may be used from several thread blocks. Each (link, sender thread block,
  receiver thread block) becomes one pipe of ours: memory HB, memory LL or port.
* **Signals and waits.** On each link, the k-th signal (in program order) is the one the k-th wait receives,
  as MSCCL++'s semaphores count them; both then use the pipe of their two thread blocks. Counts that differ are
  an error, as in MSCCL++.
* **Puts.** A put goes on the pipe of the next signal of its thread block on its link, which publishes it (the
  last one's if none follows). A port put stays pending until a flush of its thread block on the link, which
  flushes every pipe it went on; what is pending when the program ends is flushed there.
* **Packets.** MSCCL++ reads LL packets with local calls (``unpack_packets``, a packet ``reduce``), ours through
  the channel of their sender: every scratch chunk read as packets is matched with the put that wrote it, and
  the put is cut where its chunks' readers change thread block. A packet reduce reads its packets into
  temporary scratch chunks (placed after the program's own), which fusion folds into one ``reduce_packets``.
* **Barriers** across thread blocks of a rank become signals and waits on channels from the rank to itself.
"""

from __future__ import annotations

from collections import defaultdict

from ..channels import MemoryChannel, PortChannel, SwitchChannel
from ..errors import VerificationError
from ..program import Program
from . import aliasing
from .trace import PUT, SIGNAL, UNPACK, WAIT, Span, Step


def build_program(name: str, collective: str, world_size: int, chunks_per_block: int, scratch_chunks: int,
                  steps: list[Step], inplace: bool) -> Program:
    """Our Program computing what the MSCCL++ program of these ``steps`` computes."""
    if inplace:
        steps = aliasing.resolve(steps, collective, world_size, chunks_per_block)
    temps = sum(span.size for step in steps for span in step.packet_srcs)
    program = Program(collective, world_size, name=name, chunks=chunks_per_block,
                      scratch_chunks=scratch_chunks + temps)
    _Translation(program, steps, scratch_chunks).run()
    return program


def _error(kind: str, step: Step, detail: str) -> VerificationError:
    return VerificationError(kind, f"{step.call}: {detail}", src_line=step.src_line)


class _Translation:
    def __init__(self, program: Program, steps: list[Step], first_temp: int):
        self.program = program
        self.steps = steps
        self.next_temp = first_temp
        self.pipes: dict[tuple, object] = {}
        self.switches: dict[tuple, SwitchChannel] = {}
        self.pending_flush: dict[tuple, list] = defaultdict(list)  # (link, sender tb) -> receiver tbs put on
        self.receiver_tb: dict[int, int | None] = {}  # id(signal or HB put) -> receiver thread block
        self.sender_tb: dict[int, int] = {}  # id(wait) -> sender thread block
        self.packet_writer: dict[tuple, tuple] = {}  # (rank, scratch chunk) -> (link, sender tb)
        self.packet_reader: dict[tuple, int] = {}  # (rank, scratch chunk) -> receiver tb
        self._pair_signals()
        self._assign_puts()
        self._match_packets()

    # Analysis of the whole program ---------------------------------------------------------------------

    def _pair_signals(self) -> None:
        signals, waits = defaultdict(list), defaultdict(list)
        for step in self.steps:
            if step.kind == SIGNAL:
                signals[step.link].append(step)
            elif step.kind == WAIT:
                waits[step.link].append(step)
        for link in signals.keys() | waits.keys():
            sent, received = signals[link], waits[link]
            if len(sent) != len(received):
                at = (sent or received)[0]
                raise _error("sync" if len(sent) > len(received) else "deadlock", at,
                             f"rank {link.sender} signals rank {link.receiver} {len(sent)} time(s) on this "
                             f"{link.type} channel but rank {link.receiver} waits {len(received)} time(s): every "
                             "signal needs its wait")
            for signal, wait in zip(sent, received):
                self.receiver_tb[id(signal)] = wait.tb
                self.sender_tb[id(wait)] = signal.tb

    def _assign_puts(self) -> None:
        """The receiver thread block of every plain put: that of the next signal of its thread block on its
        link, else of the last one."""
        waiting: dict[tuple, list] = defaultdict(list)
        last: dict[tuple, int] = {}
        for step in self.steps:
            if step.kind == PUT and not step.packets:
                waiting[step.link, step.tb].append(step)
            elif step.kind == SIGNAL:
                last[step.link, step.tb] = self.receiver_tb[id(step)]
                for put in waiting.pop((step.link, step.tb), []):
                    self.receiver_tb[id(put)] = last[step.link, step.tb]
        for key, puts in waiting.items():
            for put in puts:
                self.receiver_tb[id(put)] = last.get(key)

    def _match_packets(self) -> None:
        for step in self.steps:
            if step.kind == PUT and step.packets:
                for c in range(step.dst.index, step.dst.index + step.dst.size):
                    if (step.dst.rank, c) in self.packet_writer:
                        raise _error("packets", step, f"rank {step.dst.rank} scratch chunk {c} already receives "
                                                      "packets in this program: one packet write per chunk")
                    self.packet_writer[step.dst.rank, c] = (step.link, step.tb)
        for step in self.steps:
            for span in self._packet_reads(step):
                for c in range(span.index, span.index + span.size):
                    reader = self.packet_reader.setdefault((span.rank, c), step.tb)
                    if reader != step.tb:
                        raise _error("channel", step, f"rank {span.rank} scratch chunk {c} is read as packets by "
                                                      f"thread blocks {reader} and {step.tb}; our channel "
                                                      "endpoints belong to one thread block")

    @staticmethod
    def _packet_reads(step: Step) -> tuple:
        return step.srcs if step.kind == UNPACK else step.packet_srcs

    # Emission ------------------------------------------------------------------------------------------

    def run(self) -> None:
        for step in self.steps:
            first = len(self.program.operations)
            getattr(self, "_" + step.kind)(step)
            for operation in self.program.operations[first:]:
                operation.src_line = step.src_line
        for (link, tb), receivers in self.pending_flush.items():
            for receiver in receivers:
                self._pipe(link, tb, receiver, "HB").flush(tb)

    def chunk(self, span: Span):
        return getattr(self.program.rank(span.rank), span.buffer)[span.index:span.index + span.size]

    def _pipe(self, link, sender_tb: int, receiver_tb: int | None, protocol: str):
        key = (link, sender_tb, receiver_tb, protocol)
        if key not in self.pipes:
            if link.type == "port":
                self.pipes[key] = PortChannel(self.program, link.sender, link.receiver)
            else:
                self.pipes[key] = MemoryChannel(self.program, link.sender, link.receiver, protocol)
        return self.pipes[key]

    def _copy(self, step: Step) -> None:
        self.program.rank(step.rank).copy(self.chunk(step.dst), self.chunk(step.srcs[0]), step.tb)

    def _reduce(self, step: Step) -> None:
        temps = []
        for span in step.packet_srcs:
            temp = Span(step.rank, "scratch", self.next_temp, span.size)
            self.next_temp += span.size
            self._read_packets(step, temp, span)
            temps.append(temp)
        sources = [self.chunk(span) for span in step.srcs + tuple(temps)]
        self.program.rank(step.rank).reduce(self.chunk(step.dst), sources, step.tb)

    def _unpack(self, step: Step) -> None:
        self._read_packets(step, step.dst, step.srcs[0])

    def _read_packets(self, step: Step, dst: Span, src: Span) -> None:
        """dst <- the packets in scratch ``src``, each run of chunks through the pipe of the put that wrote it."""
        for start, stop, writer in _runs([self.packet_writer.get((src.rank, src.index + t)) for t in range(src.size)]):
            if writer is None:
                raise _error("deadlock", step, f"reads packets from rank {src.rank} scratch chunk "
                                               f"{src.index + start} that no put of packets writes")
            link, sender_tb = writer
            self._pipe(link, sender_tb, step.tb, "LL").read_packets(self.chunk(dst.part(start, stop)),
                                                                    self.chunk(src.part(start, stop)), step.tb)

    def _put(self, step: Step) -> None:
        dst, src = step.dst, step.srcs[0]
        if step.packets:
            readers = [self.packet_reader.get((dst.rank, dst.index + t)) for t in range(dst.size)]
            for start, stop, reader in _runs(readers):
                self._pipe(step.link, step.tb, reader, "LL").put_packets(
                    self.chunk(dst.part(start, stop)), self.chunk(src.part(start, stop)), step.tb)
            return
        receiver = self.receiver_tb[id(step)]
        self._pipe(step.link, step.tb, receiver, "HB").put(self.chunk(dst), self.chunk(src), step.tb)
        pending = self.pending_flush[step.link, step.tb]
        if step.link.type == "port" and receiver not in pending:
            pending.append(receiver)

    def _signal(self, step: Step) -> None:
        self._pipe(step.link, step.tb, self.receiver_tb[id(step)], "HB").signal(step.tb)

    def _wait(self, step: Step) -> None:
        self._pipe(step.link, self.sender_tb[id(step)], step.tb, "HB").wait(step.tb)

    def _flush(self, step: Step) -> None:
        for receiver in self.pending_flush.pop((step.link, step.tb), []):
            self._pipe(step.link, step.tb, receiver, "HB").flush(step.tb)

    def _barrier(self, step: Step) -> None:
        group = step.group
        for a in group:
            for b in group:
                if a != b:
                    self._self_pipe(step.rank, a, b).signal(a)
        for b in group:
            for a in group:
                if a != b:
                    self._self_pipe(step.rank, a, b).wait(b)

    def _self_pipe(self, rank: int, a: int, b: int) -> MemoryChannel:
        key = ("barrier", rank, a, b)
        if key not in self.pipes:
            self.pipes[key] = MemoryChannel(self.program, rank, rank, "HB")
        return self.pipes[key]

    def _switch(self, step: Step) -> SwitchChannel:
        if step.group not in self.switches:
            self.switches[step.group] = SwitchChannel(self.program, step.group)
        return self.switches[step.group]

    def _switch_reduce(self, step: Step) -> None:
        self._switch(step).reduce(self.chunk(step.dst), self.chunk(step.srcs[0]), step.tb)

    def _switch_broadcast(self, step: Step) -> None:
        self._switch(step).broadcast(self.chunk(step.dst), self.chunk(step.srcs[0]), step.tb)


def _runs(values: list):
    """(start, stop, value) of each run of equal consecutive ``values``."""
    start = 0
    for t in range(1, len(values) + 1):
        if t == len(values) or values[t] != values[start]:
            yield start, t, values[start]
            start = t

