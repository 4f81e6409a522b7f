"""Our plan in MSCCL++'s executor JSON format: what ``JSON()`` / ``Json()`` write.

The format is that of MSCCL++'s channel-API DSL (``CollectiveProgram.to_json``): per rank (``gpus``) its
channels grouped by type (``connected_to``: the peer of each; the k-th channel of rank a toward rank b pairs with
the k-th of b toward a, which our plan's channel order keeps, both ends being made together), the peers' buffers
it writes (``remote_buffers``), and its thread blocks, each listing the channels and remote buffers it uses,
which its operations name by position in those lists.

Operations map one to one: copy ``copy``, reduce ``re``, put ``put``, put_with_signal ``pws`` (on a memory
channel ``put`` and ``signal``: MSCCL++ runs ``pws`` on port channels only), put_packets ``ppkt``, read_packets
``upkt`` (a local unpack: MSCCL++ reads packets without naming their channel),
reduce_packets ``repkt`` (``respkt`` with remotes), reduce_put ``res``, signal, wait, flush (on port channels: it has no effect on memory ones), barrier ``nop``,
switch_reduce ``glre``, switch_broadcast ``gstore``. Buffers are ``i``, ``o``, ``s``; indices and sizes count
chunks, as in our plan. Signals and waits on channels from a rank to itself are written as MSCCL++ orders thread
blocks: barriers and semaphores (``_SelfOrder``).
"""

from __future__ import annotations

import json

from ..access import operand_refs
from ..ops import VIA, spec_of
from ..thread_block_merge import ordering_only_self_channels

_BUFFER_CODE = {"input": "i", "output": "o", "scratch": "s"}
# Our operation -> MSCCL++'s instruction name.
_NAME = {"copy": "copy", "reduce": "re", "put": "put", "put_with_signal": "pws", "put_packets": "ppkt",
         "read_packets": "upkt", "reduce_put": "res", "signal": "signal", "wait": "wait", "flush": "flush",
         "barrier": "nop", "switch_reduce": "glre", "switch_broadcast": "gstore"}


def to_executor_json(plan: dict, program, indent: int = 2) -> str:
    """``plan`` (verified, PLAN.md) as MSCCL++ executor JSON text; ``program`` (frontend.py) gives the header."""
    packets = plan["buffers"]["scratch"]["packets"]
    document = {
        "name": plan["name"],
        "collective": program.collective.name,
        "protocol": "LL" if packets else "Simple",
        "inplace": program.collective.inplace,
        "reuse_resources": False,
        "gpus": [_Rank(plan, rank).to_dict() for rank in range(plan["world_size"])],
        "num_threads_per_block": program.num_threads_per_block,
        "use_double_scratch_buffer": program.use_double_scratch_buffer,
        "buffer_alignment": program.options.get("buffer_alignment", 16),
        "min_message_size": program.min_message_size,
        "max_message_size": program.max_message_size,
    }
    return json.dumps(document, indent=indent)


def _local(ref: dict) -> dict:
    return {"type": _BUFFER_CODE[ref["buffer"]], "index": ref["index"], "size": ref["count"]}


class _Rank:
    def __init__(self, plan: dict, rank: int):
        self.rank = rank
        self.channels = plan["ranks"][rank]["channels"]
        buffers = plan["buffers"]
        self.chunks = {name: buffers[name]["blocks"] * buffers[name]["chunks_per_block"] for name in buffers}
        blocks = plan["ranks"][rank]["threadblocks"]
        self.self_order = _SelfOrder(rank, plan["ranks"][rank])
        # our channel index -> its index among this rank's channels of its type
        self.typed_index: dict[int, int] = {}
        self.connected_to: dict[str, list] = {}
        self.switch_groups: list[list] = []
        for index, channel in enumerate(self.channels):
            if index in self.self_order.channels:
                continue
            if channel["type"] == "switch":
                self.typed_index[index] = len(self.switch_groups)
                self.switch_groups.append(channel["peers"])
            else:
                peers = self.connected_to.setdefault(channel["type"], [])
                self.typed_index[index] = len(peers)
                peers.append(channel["peer"])
        self.remote_buffers: dict[int, set] = {}  # peer rank -> channel types writing its scratch
        self.threadblocks = [self._threadblock(tb, block["ops"]) for tb, block in enumerate(blocks)]

    def _threadblock(self, tb: int, ops: list) -> dict:
        used_channels: dict[str, list] = {}
        used_remotes: dict[str, list] = {}

        def channel_id(channel: int) -> int:
            ids = used_channels.setdefault(self.channels[channel]["type"], [])
            if self.typed_index[channel] not in ids:
                ids.append(self.typed_index[channel])
            return ids.index(self.typed_index[channel])

        def remote(channel: int, ref: dict) -> dict:
            kind, peer = self.channels[channel]["type"], self.channels[channel]["peer"]
            self.remote_buffers.setdefault(peer, set()).add(kind)
            buffer_id = list(self.remote_buffers).index(peer)
            ids = used_remotes.setdefault(kind, [])
            if buffer_id not in ids:
                ids.append(buffer_id)
            return {"buffer_id": ids.index(buffer_id), "index": ref["index"], "size": ref["count"]}

        converted = []
        for op in self.self_order.ops(tb, ops):
            converted += [op] if "name" in op else self._ops(op, channel_id, remote)
        return {"id": tb, "ops": converted,
                "channels": [{"channel_type": kind, "channel_ids": ids} for kind, ids in used_channels.items()],
                "remote_buffer_refs": [{"access_channel_type": kind, "remote_buffer_ids": ids}
                                       for kind, ids in used_remotes.items()]}

    def _ops(self, op: dict, channel_id, remote) -> list[dict]:
        """The MSCCL++ operations of one of ours: one, except that MSCCL++ runs ``pws`` and ``flush`` on port
        channels only, so on a memory channel put_with_signal is a put and a signal, and a flush nothing."""
        name, channel = op["op"], op.get("channel")
        kind = self.channels[channel]["type"] if channel is not None else None
        if kind == "memory" and name == "flush":
            return []
        if kind == "memory" and name == "put_with_signal":
            put = {key: value for key, value in op.items() if key != "op"}
            return (self._ops({"op": "put", **put}, channel_id, remote)
                    + self._ops({"op": "signal", "channel": channel}, channel_id, remote))
        return [self._op(op, channel_id, remote)]

    def _op(self, op: dict, channel_id, remote) -> dict:
        name = op["op"]
        spec = spec_of(name)
        if name == "reduce_packets":
            out = {"name": "respkt" if op["remotes"] else "repkt"}
        else:
            out = {"name": _NAME[name]}
        channel = op.get("channel")
        kind = self.channels[channel]["type"] if channel is not None else None
        if name == "switch_reduce":
            src = op["src"]
            return {**out, "buffer_type": "s", "buffer_offset": src["index"], "size": src["count"],
                    "dst_chunk": _local(op["dst"]), "channel_ids": [channel_id(channel)], "channel_type": "switch",
                    "reduce_op": "sum"}
        if name == "switch_broadcast":
            dst = op["dst"]
            return {**out, "src_buff": [_local(op["src"])],
                    "dst_buff": [{"switch_channel_id": channel_id(channel), "index": dst["index"],
                                  "size": dst["count"]}], "channel_type": "switch"}
        src_buff, dst_buff, through_channels = [], [], []
        for operand in spec.operands:
            into = src_buff if operand.access == "read" else dst_buff
            for ref, through in operand_refs(operand, op):
                is_remote = operand.place == "remote" or (operand.shape == VIA and operand.access == "write")
                into.append(remote(through, ref) if is_remote else _local(ref))
                if through is not None:
                    through_channels.append(through)
        if src_buff or dst_buff:
            out.update(src_buff=src_buff, dst_buff=dst_buff)
        # Every channel an operation goes through is in its thread block's list (MSCCL++ finds the channel of a
        # memory put there); the operation names it only for synchronization and port DMA.
        ids = [channel_id(c) for c in dict.fromkeys(through_channels)]
        if through_channels:
            kind = self.channels[through_channels[0]]["type"]
            out["channel_type"] = kind
        if channel is not None and (spec.sync is not None or kind == "port"):
            out["channel_ids"] = ids or [channel_id(channel)]
            out["channel_type"] = kind
        if spec.reduction:
            out["reduce_op"] = "sum"
        return out

    def to_dict(self) -> dict:
        channels = [{"channel_type": kind, "connected_to": peers} for kind, peers in self.connected_to.items()]
        channels += [{"channel_type": "switch", "buffer_type": "s",
                      "rank_groups": [{"size": len(group), "ranks": group}]} for group in self.switch_groups]
        return {"id": self.rank, "input_chunks": self.chunks["input"], "output_chunks": self.chunks["output"],
                "scratch_chunks": self.chunks["scratch"], "threadblocks": self.threadblocks, "channels": channels,
                "remote_buffers": [{"rank": peer, "type": "s", "access_channel_types": sorted(kinds)}
                                   for peer, kinds in self.remote_buffers.items()],
                "semaphores": [{"init_value": 0} for _ in self.self_order.semaphores]}


class _SelfOrder:
    """How a rank's thread blocks order each other, as MSCCL++ writes it. Our plans do it through channels from the
    rank to itself; MSCCL++ has barriers (``{"name": "barrier", "barrier_id", "num_threadblocks"}``: the thread
    blocks naming one id meet) and device semaphores (``sem_release`` / ``sem_acquire`` of ``semaphore_ids``, the
    gpu's ``semaphores``). A run of self-channel signals then waits on one thread block, signalling exactly the
    thread blocks it waits for, is a barrier of those and itself (what ``Rank.barrier`` lowers to); every other
    self channel is a semaphore starting at 0 that its signalling thread block releases and its waiting one
    acquires. Self channels then leave the channel lists. (Where one end of a self channel serves several thread
    blocks, which our lowering does not make, or a self channel carries data, they are written as they are.)"""

    def __init__(self, rank: int, rank_plan: dict):
        self.channels_of_rank = rank_plan["channels"]
        self.ids: dict[tuple, int] = {}  # member thread blocks -> barrier id, by first appearance
        self.semaphores: dict[int, int] = {}  # signalling end of a self channel -> semaphore id
        ops_by_tb = [block["ops"] for block in rank_plan["threadblocks"]]
        own = ordering_only_self_channels(rank, rank_plan)
        users: dict[tuple[str, int], set] = {}  # ("signal" | "wait", self channel) -> thread blocks using it
        for tb, ops in enumerate(ops_by_tb):
            for op in ops:
                if op["op"] in ("signal", "wait") and op.get("channel") in own:
                    users.setdefault((op["op"], op["channel"]), set()).add(tb)
        if any(len(tbs) > 1 for tbs in users.values()):
            own, users = set(), {}
        self.user = {key: next(iter(tbs)) for key, tbs in users.items()}
        self.channels = own  # they leave the channel lists
        self.runs = {tb: self._runs(tb, ops) for tb, ops in enumerate(ops_by_tb)}

    def _other_end(self, op: dict) -> int | None:
        """The thread block at the other end of a self-channel signal (its waiter) or wait (its signaller)."""
        partner = self.channels_of_rank[op["channel"]]["peer_channel"]
        return self.user.get(("wait" if op["op"] == "signal" else "signal", partner))

    def _is_self(self, op: dict, kind: str) -> bool:
        return op["op"] == kind and op.get("channel") in self.channels

    def _runs(self, tb: int, ops: list) -> dict[int, tuple[list, int]]:
        """First op index -> (members, length) of each barrier in ``tb``'s ops."""
        runs, i = {}, 0
        while i < len(ops):
            j = i
            while j < len(ops) and self._is_self(ops[j], "signal"):
                j += 1
            k = j
            while k < len(ops) and self._is_self(ops[k], "wait"):
                k += 1
            targets = {self._other_end(op) for op in ops[i:j]}
            sources = {self._other_end(op) for op in ops[j:k]}
            if j > i and k > j and targets == sources and None not in targets and tb not in targets:
                runs[i] = (sorted(targets | {tb}), k - i)
                i = k
            else:
                i += 1
        return runs

    def _semaphore(self, signalling_end: int) -> int:
        return self.semaphores.setdefault(signalling_end, len(self.semaphores))

    def ops(self, tb: int, ops: list) -> list[dict]:
        """``tb``'s ops with each barrier run and every other self-channel signal and wait written as MSCCL++'s."""
        out, i = [], 0
        while i < len(ops):
            op = ops[i]
            if i in self.runs[tb]:
                members, length = self.runs[tb][i]
                barrier_id = self.ids.setdefault(tuple(members), len(self.ids))
                out.append({"name": "barrier", "barrier_id": barrier_id, "num_threadblocks": len(members)})
                i += length
                continue
            if self._is_self(op, "signal"):
                out.append({"name": "sem_release", "semaphore_ids": [self._semaphore(op["channel"])]})
            elif self._is_self(op, "wait"):
                signalling_end = self.channels_of_rank[op["channel"]]["peer_channel"]
                out.append({"name": "sem_acquire", "semaphore_ids": [self._semaphore(signalling_end)]})
            else:
                out.append(op)
            i += 1
        return out
