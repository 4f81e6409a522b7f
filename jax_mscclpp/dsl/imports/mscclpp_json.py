"""MSCCL++ JSON execution plans (what ``mscclpp.language``'s ``Json()`` writes) as DSL programs.

A plan lists, per gpu, its channels (``{"channel_type", "connected_to": [peers]}``, numbered per type in
order), the peer buffers it writes (``remote_buffers``: ``{"rank", "type"}``) and its thread blocks; a thread
block names the channels and remote buffers it uses (``channels``, ``remote_buffer_refs``), and its ops name
them by position in those lists. The k-th channel of a type from rank ``a`` to ``b`` is the other end of the
k-th from ``b`` to ``a``. Input, output and scratch are cut into chunks of one size (``input_chunks`` of them
span the input), so chunk ``i`` of each is ours (``collectives.py``).

Each MSCCL++ channel becomes a directed DSL channel per direction: what rank ``a`` signals on it, rank ``b``
waits for. Operations (``OPS``): ``signal``/``wait`` (and their relaxed forms, which we run with full
ordering), ``flush``, ``put``/``pws``/``pwsf`` (a put into a peer's scratch; on port channels ``pws``
signals after it and ``pwsf`` flushes too),
``copy``, ``re`` (local reduce), ``res`` (reduce, then store the result into peers' scratch), and on LL
packets ``ppkt`` (put packets), ``upkt`` (unpack), ``repkt``/``respkt`` (reduce local data with unpacked
packets, then put the result as packets) and ``rppkt`` (unpack, then put as packets). Switch channels
(``channel_type`` "switch", one per entry of its ``rank_groups``) over scratch: ``glre`` (reduce the members' scratch
chunks into a local chunk), ``gstore`` (a local chunk into every member's scratch) and ``glres`` (both, through a
scratch temporary); the k-th switch channel of a gpu over a group is the k-th of every member over it. ``nop`` orders
the thread block only: lowering places the barriers that are needed. ``barrier`` (``barrier_id``,
``num_threadblocks``) joins the thread blocks of the gpu that name that id: the k-th barrier of each waits for the
k-th of every other, through a signal to each and a wait on each over channels from the gpu to itself
(``thread_block_order.py``). A semaphore of the gpu (``semaphores``, starting at ``init_value`` 0) that one thread
block releases (``sem_release``) and one other acquires (``sem_acquire``) is a channel of its own from the gpu to
itself: the k-th acquire waits for the k-th release. Packets travel on an LL channel from the
writing thread block to the one that unpacks them, which the plan leaves implicit: each scratch chunk is
unpacked by one thread block, found before translation.

A gpu's input lives where ``input_places.py`` puts it: in place, in the output; out of place, in a private copy
in scratch when an op of the gpu writes it.

Refused, naming the op: reads of a peer's buffer (``get``, ``rre``, ``rres``), writes into a peer's input
or output, semaphores released or acquired by several thread blocks or starting above 0, pipelines, switch (NVLS)
channels over input or output and switch stores of packets (``gstorepkt``), packets written into the local scratch
(``cpkt``, ``recpkt``, ``recspkt``), thread block groups that split chunks.
"""

from __future__ import annotations

import dataclasses

from .. import geometry
from ..channels import MemoryChannel, PortChannel, SwitchChannel
from ..program import Chunk, Program
from . import in_place
from .collectives import chunks_per_block, our_collective
from .errors import PlanImportError
from .input_places import InputPlaces
from .lowered import lowered_plan
from .thread_block_order import ThreadBlockOrder

PROTOCOLS = ("Simple", "LL")
BUFFERS = {"i": "input", "o": "output", "s": "scratch"}
CHANNEL_TYPES = ("memory", "port")  # channels between two gpus
SWITCH = "switch"

# Ops we translate -> what they do (the translation is ``_Translation._op``).
OPS = {
    "nop": "orders the thread block (barriers are placed by lowering)",
    "signal": "signal on each named channel", "rlxsignal": "signal on each named channel",
    "wait": "wait on each named channel", "rlxwait": "wait on each named channel",
    "flush": "flush each named port channel",
    "put": "put src[i] into peer scratch dst[i]", "pws": "port put, then signal", "pwsf": "port put, signal, flush",
    "copy": "local copy", "re": "local reduce of the sources into dst[0]",
    "res": "local reduce into dst[0], stored into peer scratch dst[1:]",
    "ppkt": "put src[i] as packets into peer scratch dst[i]", "upkt": "unpack local packets into dst[0]",
    "repkt": "dst[0] <- src[0] (+) unpacked src[1:]", "respkt": "repkt, result put as packets into dst[1:]",
    "rppkt": "unpack src[0] and put it as packets into dst[i]",
    "barrier": "the num_threadblocks thread blocks of the gpu that name barrier_id wait for each other",
    "sem_release": "release each named semaphore of the gpu", "sem_acquire": "acquire each named semaphore",
    "glre": "dst_chunk <- the reduction over the switch channel's members of their scratch chunks",
    "gstore": "the switch channel members' scratch chunks dst <- the local src",
    "glres": "glre into a scratch temporary, then gstore of it",
}
# Ops we cannot run -> why.
REFUSED = {
    "get": "reads a peer's buffer: our executors only write into peers' scratch",
    "rre": "reads a peer's buffer: our executors only write into peers' scratch",
    "rres": "reads a peer's buffer: our executors only write into peers' scratch",
    "pipeline": "pipelined loops over chunk units have no counterpart in our plans",
    "gstorepkt": "stores packets through a switch channel: our switch channels carry plain data",
    "cpkt": "writes packets into the local scratch: our packets only travel to a peer",
    "recpkt": "writes packets into the local scratch: our packets only travel to a peer",
    "recspkt": "writes packets into the local scratch: our packets only travel to a peer",
}
# Ops that MSCCL++ runs on port channels only (on a memory channel its executor would drop the signal or
# flush, or read the source as packets) -> the channel type they need.
_PORT_ONLY = {"pws": "port", "pwsf": "port", "flush": "port"}
_MEMORY_ONLY = {"ppkt": "memory", "rppkt": "memory", "respkt": "memory", "res": "memory"}
# Ops that read packets from the local scratch: source positions that are packets.
_PACKET_SOURCES = {"upkt": slice(0, 1), "repkt": slice(1, None), "respkt": slice(1, None), "rppkt": slice(0, 1)}
# Ops that write packets into peers' scratch: destination positions that are remote.
_PACKET_DESTINATIONS = {"ppkt": slice(0, None), "respkt": slice(1, None), "rppkt": slice(0, None)}


def from_json(document) -> dict:
    """The verified plan of an MSCCL++ JSON plan (module docstring); PlanImportError when it cannot be run as
    written."""
    return _Translation(_Plan(document)).plan


@dataclasses.dataclass(frozen=True)
class Ref:
    """A chunk range of an op: ``rank``'s ``buffer`` (ours), ``index``, ``count``; ``remote`` when it is a peer's
    buffer reached through ``channel_type``."""

    rank: int
    buffer: str
    index: int
    count: int
    remote: bool


def _field(value: dict, key: str, where: str, kind=int):
    if not isinstance(value, dict) or key not in value:
        raise PlanImportError(where, key, "is missing")
    item = value[key]
    if kind is int and (not isinstance(item, int) or isinstance(item, bool) or item < 0):
        raise PlanImportError(where, key, f"must be a non-negative integer, got {item!r}")
    if kind is list and not isinstance(item, list):
        raise PlanImportError(where, key, f"must be a list, got {type(item).__name__}")
    return item


class _Plan:
    """The JSON document, parsed and checked against itself: gpus, channels and their pairing, buffers."""

    def __init__(self, document):
        where = "MSCCL++ plan"
        if not isinstance(document, dict):
            raise PlanImportError(where, None, "an MSCCL++ plan is a JSON object")
        self.name = document.get("name") or "mscclpp"
        self.collective = our_collective(document.get("collective"), where, "collective")
        protocol = document.get("protocol")
        if protocol not in PROTOCOLS:
            raise PlanImportError(where, "protocol", f"unknown protocol {protocol!r}; one of {', '.join(PROTOCOLS)}")
        self.packets = protocol == "LL"
        self.in_place = document.get("inplace", False)
        if not isinstance(self.in_place, bool):
            raise PlanImportError(where, "inplace", f"must be true or false, got {self.in_place!r}")
        if self.in_place and (reason := in_place.refusal(self.collective)):
            raise PlanImportError(where, "inplace", reason)
        self.gpus = _field(document, "gpus", where, list)
        self.world_size = len(self.gpus)
        if not self.gpus:
            raise PlanImportError(where, "gpus", "is empty")
        for rank, gpu in enumerate(self.gpus):
            if _field(gpu, "id", f"gpus[{rank}]") != rank:
                raise PlanImportError(f"gpus[{rank}]", "id", f"is {gpu['id']}, but entry {rank} of the "
                                                             f"{self.world_size} gpus must have id {rank}")
        self.chunks_per_block = self._chunks_per_block()
        # (rank, type) -> peer of each channel of that type, in numbering order.
        self.channel_peers = {(rank, kind): self._channel_peers(rank, kind) for rank in range(self.world_size)
                              for kind in CHANNEL_TYPES}
        # rank -> the members of each of its switch channels (over scratch), in numbering order
        self.switch_channels = [self._switch_channels(rank) for rank in range(self.world_size)]
        self._check_switch_pairing()

    @staticmethod
    def where(rank: int, tb: int | None = None, op: int | None = None, name: str | None = None) -> str:
        """How errors and ``src_line`` name a gpu, a thread block of it, or an op of that."""
        text = f"gpu {rank}"
        if tb is not None:
            text += f", threadblock {tb}"
        if op is not None:
            text += f", op {op}" + (f' ("{name}")' if name else "")
        return text

    def _chunks_per_block(self) -> int:
        _, output_blocks = geometry.buffer_blocks(self.collective, self.world_size)
        result = None
        for rank, gpu in enumerate(self.gpus):
            where = self.where(rank)
            per_block = chunks_per_block(self.collective, self.world_size, _field(gpu, "input_chunks", where),
                                         "input", where, "input_chunks")
            if _field(gpu, "output_chunks", where) != output_blocks * per_block:
                raise PlanImportError(where, "output_chunks", f"is {gpu['output_chunks']}, but chunks of one size "
                                                              f"need {output_blocks * per_block} for "
                                                              f"{gpu['input_chunks']} input chunks")
            _field(gpu, "scratch_chunks", where)
            if result is not None and per_block != result:
                raise PlanImportError(where, "input_chunks", "differs from gpu 0's")
            result = per_block
        return result

    def _channel_peers(self, rank: int, kind: str) -> list[int]:
        peers = []
        for index, channel in enumerate(self.gpus[rank].get("channels", [])):
            where = f"{self.where(rank)} channels[{index}]"
            channel_type = _field(channel, "channel_type", where, str)
            if channel_type not in CHANNEL_TYPES + (SWITCH,):
                raise PlanImportError(where, "channel_type", f"{channel_type!r} channels are not ones we run; "
                                                             f"we run {', '.join(CHANNEL_TYPES + (SWITCH,))}")
            if channel_type != kind:
                continue
            for peer in _field(channel, "connected_to", where, list):
                if not isinstance(peer, int) or not 0 <= peer < self.world_size or peer == rank:
                    raise PlanImportError(where, "connected_to", f"peer {peer!r} is not another of the "
                                                                 f"{self.world_size} gpus")
                peers.append(peer)
        return peers

    def _switch_channels(self, rank: int) -> list[tuple[int, ...]]:
        channels = []
        for index, channel in enumerate(self.gpus[rank].get("channels", [])):
            if channel.get("channel_type") != SWITCH:
                continue
            where = f"{self.where(rank)} channels[{index}]"
            letter = channel.get("buffer_type")
            if letter not in BUFFERS:
                raise PlanImportError(where, "buffer_type", f"unknown buffer {letter!r}; one of {', '.join(BUFFERS)}")
            if BUFFERS[letter] != "scratch":
                raise PlanImportError(where, "buffer_type", f"a switch channel over the {BUFFERS[letter]}: our "
                                                            "switch channels multicast scratch only")
            for group in _field(channel, "rank_groups", where, list):
                ranks = _field(group, "ranks", where, list)
                if (len(set(ranks)) != len(ranks) or rank not in ranks
                        or not all(isinstance(r, int) and 0 <= r < self.world_size for r in ranks)):
                    raise PlanImportError(where, "rank_groups", f"ranks {ranks!r} are not distinct gpus of the "
                                                                f"{self.world_size} that include gpu {rank}")
                if group.get("size", len(ranks)) != len(ranks):
                    raise PlanImportError(where, "rank_groups", f"size {group['size']!r} is not the number of "
                                                                f"ranks {ranks!r}")
                channels.append(tuple(sorted(ranks)))
        return channels

    def _check_switch_pairing(self) -> None:
        """Every member of a group has as many switch channels over it."""
        for rank, channels in enumerate(self.switch_channels):
            for members in sorted(set(channels)):
                for member in members:
                    ours, theirs = channels.count(members), self.switch_channels[member].count(members)
                    if theirs != ours:
                        raise PlanImportError(f"{self.where(rank)} channels", "rank_groups",
                                              f"gpu {rank} has {ours} switch channels over gpus {list(members)}, "
                                              f"gpu {member} {theirs}")

    def switch_occurrence(self, rank: int, channel: int) -> tuple[tuple[int, ...], int]:
        """(members, k): switch channel ``channel`` of ``rank`` is its k-th over those members."""
        channels = self.switch_channels[rank]
        return channels[channel], channels[:channel].count(channels[channel])

    def occurrence(self, rank: int, kind: str, channel: int) -> tuple[int, int]:
        """(peer, k): gpu-level channel ``channel`` of ``rank`` is its k-th of its type to ``peer``."""
        peers = self.channel_peers[rank, kind]
        peer = peers[channel]
        return peer, peers[:channel].count(peer)

    def tb_list(self, rank: int, tb: dict, key: str, kind: str, entry_key: str, tb_index: int) -> list[int]:
        """The gpu-level ids a thread block lists under ``key`` (``channels`` or ``remote_buffer_refs``) for
        channel type ``kind``, in order."""
        ids = []
        for entry in tb.get(key, []):
            type_key = "channel_type" if key == "channels" else "access_channel_type"
            if entry.get(type_key) == kind:
                ids += _field(entry, entry_key, f"{self.where(rank, tb_index)} {key}", list)
        return ids


class _Translation:
    """The DSL program of a ``_Plan``, lowered."""

    def __init__(self, plan: _Plan):
        self.plan_in = plan
        self.readers = self._packet_readers()
        self.writers = self._packet_writers()
        self.barriers = self._barrier_members()
        self._check_semaphores()
        self.next_scratch = [gpu["scratch_chunks"] for gpu in plan.gpus]
        self.inputs = self._input_places()
        total = [self.next_scratch[r] + self._temp_total(r) for r in range(plan.world_size)]
        self.program = Program(plan.collective, plan.world_size, name=plan.name, chunks=plan.chunks_per_block,
                               scratch_chunks=max(total), protocol="LL" if plan.packets else "HB")
        self.order = ThreadBlockOrder(self.program)
        self.pipes: dict[tuple, object] = {}
        self.switches: dict[tuple, SwitchChannel] = {}  # (members, k) -> the DSL channel
        for rank, gpu in enumerate(plan.gpus):
            tbs = _field(gpu, "threadblocks", plan.where(rank), list)
            self.inputs.add_prologue(self.program, self.order, rank, len(tbs))
            for tb_index, tb in enumerate(tbs):
                self._threadblock(rank, tb_index, tb)
        self.plan = lowered_plan(self.program, self.inputs)

    # Packets: who writes and who unpacks each scratch chunk ---------------------------------------------

    def _ops(self):
        """(rank, tb index, tb, op index, op) over the whole plan."""
        for rank, gpu in enumerate(self.plan_in.gpus):
            for tb_index, tb in enumerate(_field(gpu, "threadblocks", self.plan_in.where(rank), list)):
                if _field(tb, "id", self.plan_in.where(rank, tb_index)) != tb_index:
                    raise PlanImportError(self.plan_in.where(rank, tb_index), "id", f"is {tb['id']}, not its "
                                                                                    f"position {tb_index}")
                for index, op in enumerate(_field(tb, "ops", self.plan_in.where(rank, tb_index), list)):
                    yield rank, tb_index, tb, index, op

    def _packet_chunks(self, positions: dict[str, slice], key: str):
        """(rank, thread block, where, ref, chunk) for every chunk of the packet references that the ops listed
        in ``positions`` (op name -> positions in ``key``) name."""
        for rank, tb_index, tb, index, op in self._ops():
            name = op.get("name")
            if name in positions:
                where = self.plan_in.where(rank, tb_index, index, name)
                for ref in self._refs(rank, tb_index, tb, op, key, where)[positions[name]]:
                    for chunk in range(ref.index, ref.index + ref.count):
                        yield rank, tb_index, where, ref, chunk

    def _packet_readers(self) -> dict[tuple[int, int], int]:
        """(rank, scratch chunk) -> the thread block that unpacks it."""
        readers: dict[tuple[int, int], int] = {}
        for rank, tb_index, where, ref, chunk in self._packet_chunks(_PACKET_SOURCES, "src_buff"):
            if ref.buffer != "scratch" or ref.remote:
                raise PlanImportError(where, "src_buff", "packets are read from the local scratch only")
            other = readers.setdefault((rank, chunk), tb_index)
            if other != tb_index:
                raise PlanImportError(where, "src_buff", f"scratch chunk {chunk} is unpacked by thread blocks "
                                                         f"{other} and {tb_index}: our packets have one reader")
        return readers

    def _packet_writers(self) -> dict[tuple[int, int], tuple[int, int]]:
        """(rank, scratch chunk) -> (rank, thread block) that writes packets into it."""
        writers: dict[tuple[int, int], tuple[int, int]] = {}
        for rank, tb_index, where, ref, chunk in self._packet_chunks(_PACKET_DESTINATIONS, "dst_buff"):
            if (ref.rank, chunk) not in self.readers:
                raise PlanImportError(where, "dst_buff", f"no thread block of gpu {ref.rank} unpacks the packets "
                                                         f"written into its scratch chunk {chunk}")
            if writers.setdefault((ref.rank, chunk), (rank, tb_index)) != (rank, tb_index):
                raise PlanImportError(where, "dst_buff", f"scratch chunk {chunk} of gpu {ref.rank} receives packets "
                                                         "from two thread blocks")
        return writers

    def _barrier_members(self) -> dict[tuple[int, int], list[int]]:
        """(rank, barrier_id) -> the thread blocks that name it, each as often as the others and as many as
        every such barrier's num_threadblocks says."""
        arrivals: dict[tuple[int, int], dict[int, int]] = {}
        sizes: dict[tuple[int, int], tuple[int, str]] = {}
        for rank, tb_index, _, index, op in self._ops():
            if not isinstance(op, dict) or op.get("name") != "barrier":
                continue
            where = self.plan_in.where(rank, tb_index, index, "barrier")
            key = (rank, _field(op, "barrier_id", where))
            size = _field(op, "num_threadblocks", where)
            if sizes.setdefault(key, (size, where))[0] != size:
                raise PlanImportError(where, "num_threadblocks", f"is {size}, but {sizes[key][1]} names "
                                                                 f"barrier {key[1]} with {sizes[key][0]}")
            counts = arrivals.setdefault(key, {})
            counts[tb_index] = counts.get(tb_index, 0) + 1
        members = {}
        for key, counts in arrivals.items():
            size, where = sizes[key]
            if len(counts) != size:
                raise PlanImportError(where, "num_threadblocks", f"is {size}, but thread blocks {sorted(counts)} "
                                                                 f"of gpu {key[0]} name barrier {key[1]}")
            if len(set(counts.values())) > 1:
                times = ", ".join(f"thread block {tb} {n} times" for tb, n in sorted(counts.items()))
                raise PlanImportError(where, "barrier_id", f"barrier {key[1]} is reached by {times}: the k-th "
                                                           "arrivals of every member meet")
            members[key] = sorted(counts)
        return members

    def _check_semaphores(self) -> None:
        """Every semaphore used starts at 0 and has one releasing thread block and one other acquiring it."""
        users: dict[tuple[int, int, str], set] = {}
        first: dict[tuple[int, int], str] = {}
        for rank, tb_index, _, index, op in self._ops():
            name = op.get("name") if isinstance(op, dict) else None
            if name not in ("sem_release", "sem_acquire"):
                continue
            where = self.plan_in.where(rank, tb_index, index, name)
            semaphores = self.plan_in.gpus[rank].get("semaphores", [])
            for semaphore in _field(op, "semaphore_ids", where, list):
                if not isinstance(semaphore, int) or not 0 <= semaphore < len(semaphores):
                    raise PlanImportError(where, "semaphore_ids", f"gpu {rank} has no semaphore {semaphore!r}")
                if semaphores[semaphore].get("init_value", 0) != 0:
                    raise PlanImportError(where, "semaphore_ids", f"semaphore {semaphore} starts at "
                                                                  f"{semaphores[semaphore]['init_value']}: ours "
                                                                  "start each call at 0")
                users.setdefault((rank, semaphore, name), set()).add(tb_index)
                first.setdefault((rank, semaphore), where)
        for (rank, semaphore), where in first.items():
            releasers = users.get((rank, semaphore, "sem_release"), set())
            acquirers = users.get((rank, semaphore, "sem_acquire"), set())
            if len(releasers) != 1 or len(acquirers) != 1 or releasers == acquirers:
                raise PlanImportError(where, "semaphore_ids", f"semaphore {semaphore} of gpu {rank} is released by "
                                                              f"thread blocks {sorted(releasers)} and acquired by "
                                                              f"{sorted(acquirers)}: we run a semaphore between one "
                                                              "releasing and one other acquiring thread block")

    def _input_places(self) -> InputPlaces:
        """Out of place, a gpu an op of which writes its input runs on a private copy past the scratch the plan
        declares (temporaries come after it)."""
        plan = self.plan_in
        input_chunks = geometry.buffer_blocks(plan.collective, plan.world_size)[0] * plan.chunks_per_block
        writers = set() if plan.in_place else {
            rank for rank, _, _, _, op in self._ops() if isinstance(op, dict) and op.get("name") in OPS
            and any(isinstance(entry, dict) and "buffer_id" not in entry and entry.get("type") == "i"
                    for entry in [*op.get("dst_buff", []), op.get("dst_chunk")])}
        copies = {rank: self._temp(rank, input_chunks).index for rank in sorted(writers)}
        return InputPlaces(plan.collective, plan.chunks_per_block, input_chunks, plan.in_place, copies)

    def _temp_total(self, rank: int) -> int:
        return sum(self._temp_chunks(op) for r, _, _, _, op in self._ops() if r == rank)

    @staticmethod
    def _temp_chunks(op: dict) -> int:
        """Scratch temporaries an op needs: one chunk range per packet source it reduces or forwards."""
        name = op.get("name")
        if name in ("repkt", "respkt", "rppkt"):
            sources = op.get("src_buff", [])[_PACKET_SOURCES[name]]
            return sum(source.get("size", 0) for source in sources)
        if name == "glres":  # the reduction, before it is stored through the switch
            return sum(source.get("size", 0) for source in op.get("src_buff", [])[:1] if isinstance(source, dict))
        return 0

    def _temp(self, rank: int, count: int) -> Chunk:
        start = self.next_scratch[rank]
        self.next_scratch[rank] += count
        return Chunk(rank, "scratch", start, count)

    # References and channels ------------------------------------------------------------------------------

    def _refs(self, rank: int, tb_index: int, tb: dict, op: dict, key: str, where: str) -> list[Ref]:
        plan = self.plan_in
        refs = []
        for position, entry in enumerate(op.get(key, [])):
            entry_where = f"{where} {key}[{position}]"
            index, count = _field(entry, "index", entry_where), _field(entry, "size", entry_where)
            if "buffer_id" in entry:
                kind = op.get("channel_type")
                ids = plan.tb_list(rank, tb, "remote_buffer_refs", kind, "remote_buffer_ids", tb_index)
                buffer_id = _field(entry, "buffer_id", entry_where)
                if buffer_id >= len(ids):
                    raise PlanImportError(entry_where, "buffer_id", f"the thread block lists {len(ids)} remote "
                                                                    f"buffers for {kind!r} channels")
                remote_buffers = plan.gpus[rank].get("remote_buffers", [])
                if ids[buffer_id] >= len(remote_buffers):
                    raise PlanImportError(entry_where, "buffer_id", f"names remote buffer {ids[buffer_id]}, which "
                                                                    f"gpu {rank} does not list")
                remote = remote_buffers[ids[buffer_id]]
                owner, letter, is_remote = _field(remote, "rank", entry_where), remote.get("type"), True
                if owner >= plan.world_size:
                    raise PlanImportError(entry_where, "buffer_id", f"names gpu {owner}, not one of the "
                                                                    f"{plan.world_size} gpus")
            else:
                owner, letter, is_remote = rank, entry.get("type"), False
            if letter not in BUFFERS:
                raise PlanImportError(entry_where, "type", f"unknown buffer {letter!r}; one of {', '.join(BUFFERS)}")
            buffer = BUFFERS[letter]
            if is_remote and buffer != "scratch":
                raise PlanImportError(entry_where, "buffer_id", f"writes gpu {owner}'s {buffer}: our executors only "
                                                                "write into peers' scratch")
            if count < 1:
                raise PlanImportError(entry_where, "size", "must be at least 1")
            blocks = dict(zip(("input", "output"), geometry.buffer_blocks(plan.collective, plan.world_size)))
            size = (plan.gpus[owner]["scratch_chunks"] if buffer == "scratch"
                    else blocks[buffer] * plan.chunks_per_block)
            if index + count > size:
                raise PlanImportError(entry_where, "index", f"chunks {index}..{index + count - 1} are past the "
                                                            f"{size} chunks of gpu {owner}'s {buffer}")
            refs.append(Ref(owner, buffer, index, count, is_remote))
        return refs

    def _pipe(self, kind: str, sender: int, receiver: int, key, protocol: str = "HB"):
        """The directed DSL channel ``key`` of ``kind`` from ``sender`` to ``receiver``, made on first use."""
        full_key = (kind, sender, receiver, key, protocol)
        if full_key not in self.pipes:
            if kind == "port":
                self.pipes[full_key] = PortChannel(self.program, sender, receiver)
            else:
                self.pipes[full_key] = MemoryChannel(self.program, sender, receiver, protocol)
        return self.pipes[full_key]

    def _channels(self, rank: int, tb_index: int, tb: dict, op: dict, where: str) -> list[tuple[str, int, int]]:
        """(type, peer, k) of each channel an op names (``channel_ids``, positions in the thread block's list)."""
        kind = op.get("channel_type")
        if kind not in CHANNEL_TYPES:
            raise PlanImportError(where, "channel_type", f"{kind!r} is not one of {', '.join(CHANNEL_TYPES)}")
        ids = self.plan_in.tb_list(rank, tb, "channels", kind, "channel_ids", tb_index)
        result = []
        for position in _field(op, "channel_ids", where, list):
            if not isinstance(position, int) or not 0 <= position < len(ids):
                raise PlanImportError(where, "channel_ids", f"{position!r} is not one of the thread block's "
                                                            f"{len(ids)} {kind} channels")
            channel = ids[position]
            if not isinstance(channel, int) or not 0 <= channel < len(self.plan_in.channel_peers[rank, kind]):
                raise PlanImportError(where, "channel_ids", f"gpu {rank} has no {kind} channel {channel!r}")
            peer, k = self.plan_in.occurrence(rank, kind, channel)
            result.append((kind, peer, k))
        return result

    def _signal_pipe(self, rank: int, channel: tuple[str, int, int]):
        kind, peer, k = channel
        return self._pipe(kind, rank, peer, k)

    def _wait_pipe(self, rank: int, channel: tuple[str, int, int]):
        kind, peer, k = channel
        return self._pipe(kind, peer, rank, k)

    def _data_pipe(self, rank: int, tb_index: int, tb: dict, op: dict, ref: Ref, where: str, position: int = 0):
        """The HB channel a put into ``ref`` (a peer's scratch, the op's destination ``position``) goes through:
        on a port channel the op's channel of that position; on memory, the thread block's first memory channel
        to that peer (a memory channel signal releases puts on any channel)."""
        kind = op.get("channel_type", "memory")
        if kind == "port":
            channels = self._channels(rank, tb_index, tb, op, where)
            matching = [channels[position]] if position < len(channels) and channels[position][1] == ref.rank else []
        else:
            ids = self.plan_in.tb_list(rank, tb, "channels", "memory", "channel_ids", tb_index)
            matching = [("memory",) + self.plan_in.occurrence(rank, "memory", c) for c in ids
                        if 0 <= c < len(self.plan_in.channel_peers[rank, "memory"])]
            matching = [c for c in matching if c[1] == ref.rank]
        if not matching:
            raise PlanImportError(where, "dst_buff", f"the thread block has no {kind} channel to gpu {ref.rank}")
        return self._signal_pipe(rank, matching[0])

    # Translation ------------------------------------------------------------------------------------------

    def _threadblock(self, rank: int, tb_index: int, tb: dict) -> None:
        for index, op in enumerate(tb["ops"]):
            name = op.get("name") if isinstance(op, dict) else None
            where = self.plan_in.where(rank, tb_index, index, name)
            if name in REFUSED:
                raise PlanImportError(where, "name", f"{name!r} {REFUSED[name]}")
            if name not in OPS:
                raise PlanImportError(where, "name", f"unknown operation {name!r}; the operations we run are "
                                                     f"{', '.join(OPS)}")
            needed = _PORT_ONLY.get(name) or _MEMORY_ONLY.get(name)
            if needed and op.get("channel_type", "memory") != needed:
                raise PlanImportError(where, "channel_type", f"MSCCL++ runs {name!r} on {needed} channels only, "
                                                             f"not {op.get('channel_type', 'memory')!r}")
            group = op.get("tbg_info")
            if group is not None and group.get("tbg_size", 1) != 1:
                raise PlanImportError(where, "tbg_info", "a thread block group splits chunks into element ranges; "
                                                         "our operations move whole chunks")
            first = len(self.program.operations)
            self._op(rank, tb_index, tb, op, name, where)
            for operation in self.program.operations[first:]:
                operation.src_line = where

    def _op(self, rank: int, tb_index: int, tb: dict, op: dict, name: str, where: str) -> None:
        if name == "nop":
            return
        if name in ("sem_release", "sem_acquire"):
            for semaphore in op["semaphore_ids"]:  # a channel of its own from the gpu to itself
                pipe = self._pipe("memory", rank, rank, ("semaphore", semaphore))
                if name == "sem_release":
                    pipe.signal(tb=tb_index)
                else:
                    pipe.wait(tb=tb_index)
            return
        if name == "barrier":
            others = [tb for tb in self.barriers[rank, op["barrier_id"]] if tb != tb_index]
            for other in others:
                self.order.signal(rank, tb_index, other)
            for other in others:
                self.order.wait(rank, other, tb_index)
            return
        if name in ("signal", "rlxsignal", "wait", "rlxwait", "flush"):
            for channel in self._channels(rank, tb_index, tb, op, where):
                if name == "flush":
                    self._signal_pipe(rank, channel).flush(tb=tb_index)
                elif name.endswith("signal"):
                    self._signal_pipe(rank, channel).signal(tb=tb_index)
                else:
                    self._wait_pipe(rank, channel).wait(tb=tb_index)
            return
        if name in ("glre", "gstore", "glres"):
            self._switch_op(rank, tb_index, tb, op, name, where)
            return
        srcs = self._refs(rank, tb_index, tb, op, "src_buff", where)
        dsts = self._refs(rank, tb_index, tb, op, "dst_buff", where)
        self._check_places(name, srcs, dsts, where)
        chunk = self._chunk
        local = self.program.rank(rank)
        if name == "copy":
            local.copy(chunk(dsts[0]), chunk(srcs[0]), tb=tb_index)
        elif name in ("put", "pws", "pwsf"):
            for position, (src, dst) in enumerate(zip(srcs, dsts)):
                pipe = self._data_pipe(rank, tb_index, tb, op, dst, where, position)
                pipe.put(chunk(dst), chunk(src), tb=tb_index)
                if name != "put":
                    pipe.signal(tb=tb_index)
                if name == "pwsf":
                    pipe.flush(tb=tb_index)
        elif name in ("re", "res"):
            local.reduce(chunk(dsts[0]), [chunk(src) for src in srcs], tb=tb_index)
            for dst in dsts[1:]:
                self._data_pipe(rank, tb_index, tb, op, dst, where).put(chunk(dst), chunk(dsts[0]), tb=tb_index)
        elif name == "ppkt":
            for src, dst in zip(srcs, dsts):
                self._put_packets(rank, tb_index, dst, chunk(src))
        elif name == "upkt":
            self._unpack(rank, tb_index, srcs[0], chunk(dsts[0]))
        elif name in ("repkt", "respkt"):
            unpacked = []
            for source in srcs[1:]:
                unpacked.append(self._temp(rank, source.count))
                self._unpack(rank, tb_index, source, unpacked[-1])
            local.reduce(chunk(dsts[0]), [chunk(srcs[0])] + unpacked, tb=tb_index)
            for dst in dsts[1:]:
                self._put_packets(rank, tb_index, dst, chunk(dsts[0]))
        elif name == "rppkt":
            unpacked = self._temp(rank, srcs[0].count)
            self._unpack(rank, tb_index, srcs[0], unpacked)
            for dst in dsts:
                self._put_packets(rank, tb_index, dst, unpacked)

    def _switch_op(self, rank: int, tb_index: int, tb: dict, op: dict, name: str, where: str) -> None:
        """glre, gstore and glres (module docstring): a switch reduce and/or broadcast over scratch chunks."""
        if name == "glre":
            if op.get("buffer_type") != "s":
                raise PlanImportError(where, "buffer_type", f"a switch reduction over {op.get('buffer_type')!r}: "
                                                            "our switch channels multicast scratch only")
            channels = _field(op, "channel_ids", where, list)
            if len(channels) != 1:
                raise PlanImportError(where, "channel_ids", "names one switch channel")
            source = {"index": _field(op, "buffer_offset", where), "size": _field(op, "size", where)}
            switch, src = self._switch_ref(rank, tb_index, tb, channels[0], source, where, "channel_ids")
            (dst,) = self._refs(rank, tb_index, tb, {"dst_buff": [op.get("dst_chunk")]}, "dst_buff",
                                f"{where} dst_chunk")
            if dst.count != src.count:
                raise PlanImportError(where, "size", "all chunk ranges of an operation have one size")
            switch.reduce(self._chunk(dst), src, tb=tb_index)
            return
        def switch_refs(key):
            return [self._switch_ref(rank, tb_index, tb, _field(entry, "switch_channel_id", where), entry, where, key)
                    for entry in _field(op, key, where, list)]

        targets = switch_refs("dst_buff")
        if name == "glres":
            sources = switch_refs("src_buff")
            if len(sources) != 1:
                raise PlanImportError(where, "src_buff", f"{name!r} reduces one chunk range")
            switch, src = sources[0]
            value = self._temp(rank, src.count)
            switch.reduce(value, src, tb=tb_index)
        else:
            refs = self._refs(rank, tb_index, tb, op, "src_buff", where)
            if len(refs) != 1 or refs[0].remote:
                raise PlanImportError(where, "src_buff", f"{name!r} stores one local chunk range")
            value = self._chunk(refs[0])
        for switch, dst in targets:
            if dst.count != value.count:
                raise PlanImportError(where, "size", "all chunk ranges of an operation have one size")
            switch.broadcast(dst, value, tb=tb_index)

    def _switch_ref(self, rank: int, tb_index: int, tb: dict, position, entry: dict, where: str, key: str):
        """(DSL switch channel, this rank's scratch chunk range) of a switch reference: ``position`` in the thread
        block's switch channels, chunks ``entry["index"]`` on, ``entry["size"]`` of them, in every member's
        scratch."""
        ids = self.plan_in.tb_list(rank, tb, "channels", SWITCH, "channel_ids", tb_index)
        if not isinstance(position, int) or not 0 <= position < len(ids):
            raise PlanImportError(where, key, f"{position!r} is not one of the thread block's {len(ids)} switch "
                                              "channels")
        channel = ids[position]
        if not isinstance(channel, int) or not 0 <= channel < len(self.plan_in.switch_channels[rank]):
            raise PlanImportError(where, key, f"gpu {rank} has no switch channel {channel!r}")
        members, k = self.plan_in.switch_occurrence(rank, channel)
        index, count = _field(entry, "index", where), _field(entry, "size", where)
        for member in members:
            if count < 1 or index + count > self.plan_in.gpus[member]["scratch_chunks"]:
                raise PlanImportError(where, key, f"chunks {index}..{index + count - 1} are not in gpu {member}'s "
                                                  f"{self.plan_in.gpus[member]['scratch_chunks']} scratch chunks")
        if (members, k) not in self.switches:
            self.switches[members, k] = SwitchChannel(self.program, members)
        return self.switches[members, k], Chunk(rank, "scratch", index, count)

    def _check_places(self, name: str, srcs: list[Ref], dsts: list[Ref], where: str) -> None:
        """Sources are local; destinations are local except those the op sends to; counts agree."""
        remote_from = {"put": 0, "pws": 0, "pwsf": 0, "ppkt": 0, "rppkt": 0, "res": 1, "respkt": 1}.get(name)
        for ref in srcs:
            if ref.remote:
                raise PlanImportError(where, "src_buff", f"{name!r} reads gpu {ref.rank}'s buffer: our executors "
                                                         "only write into peers' scratch")
        for position, ref in enumerate(dsts):
            if ref.remote != (remote_from is not None and position >= remote_from):
                expected = "a peer's scratch" if not ref.remote else "a local buffer"
                raise PlanImportError(where, "dst_buff", f"entry {position} of {name!r} must be {expected}")
        if not srcs or not dsts:
            raise PlanImportError(where, "src_buff" if not srcs else "dst_buff", f"{name!r} needs at least one")
        if len({ref.count for ref in srcs + dsts}) > 1:
            raise PlanImportError(where, "size", "all chunk ranges of an operation have one size")
        if name in ("put", "pws", "pwsf", "ppkt") and len(srcs) != len(dsts):
            raise PlanImportError(where, "dst_buff", f"{name!r} pairs each source with one destination")

    def _chunk(self, ref: Ref) -> Chunk:
        return self.inputs.chunk(ref.rank, ref.buffer, ref.index, ref.count)

    def _runs(self, ref: Ref, owner_of) -> list[tuple[int, int, object]]:
        """(offset, length, owner) of the runs of chunks of ``ref`` that ``owner_of(chunk)`` maps alike."""
        runs = []
        for t in range(ref.count):
            owner = owner_of(ref.index + t)
            if runs and runs[-1][2] == owner:
                runs[-1] = (runs[-1][0], runs[-1][1] + 1, owner)
            else:
                runs.append((t, 1, owner))
        return runs

    def _put_packets(self, rank: int, tb_index: int, dst: Ref, src: Chunk) -> None:
        """Packets of ``src`` into ``dst`` (a peer's scratch), each run on the LL channel to its reader."""
        for offset, length, reader in self._runs(dst, lambda chunk: self.readers[dst.rank, chunk]):
            pipe = self._pipe("memory", rank, dst.rank, (tb_index, reader), "LL")
            pipe.put_packets(Chunk(dst.rank, "scratch", dst.index + offset, length),
                             Chunk(src.rank, src.buffer, src.index + offset, length), tb=tb_index)

    def _unpack(self, rank: int, tb_index: int, src: Ref, dst: Chunk) -> None:
        """Unpack the packets of ``src`` (local scratch) into ``dst``, each run from the channel of its writer."""
        def writer(chunk):
            if (rank, chunk) not in self.writers:
                raise PlanImportError(self.plan_in.where(rank, tb_index), "src_buff", f"scratch chunk {chunk} is "
                                                                                      "unpacked but no op writes "
                                                                                      "packets into it")
            return self.writers[rank, chunk]

        for offset, length, (sender, sender_tb) in self._runs(src, writer):
            pipe = self._pipe("memory", sender, rank, (sender_tb, tb_index), "LL")
            pipe.read_packets(Chunk(dst.rank, dst.buffer, dst.index + offset, length),
                              Chunk(rank, "scratch", src.index + offset, length), tb=tb_index)
