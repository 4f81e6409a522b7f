"""MSCCL++ JSON execution plans for the load_plan tests, in the form ``mscclpp.language``'s ``Json()`` writes
(gpus with ``channels``/``remote_buffers``, thread blocks naming them by position), made by small generators
of this file.

``JsonWriter`` numbers a gpu's channels per type in the order they are made; ``tb_channel`` and
``remote`` register a channel or a peer scratch buffer with a thread block and return its position there,
which is what ops name.
"""

from __future__ import annotations

import json


class JsonWriter:
    def __init__(self, name: str, collective: str, n: int, protocol: str, input_chunks: int, output_chunks: int,
                 scratch_chunks: int, inplace: bool = False):
        self.head = {"name": name, "collective": collective, "protocol": protocol, "inplace": inplace,
                     "reuse_resources": False, "num_threads_per_block": 1024, "use_double_scratch_buffer": False,
                     "buffer_alignment": 16, "min_message_size": 0, "max_message_size": 2 ** 64 - 1}
        self.gpus = [{"id": r, "input_chunks": input_chunks, "output_chunks": output_chunks,
                      "scratch_chunks": scratch_chunks, "channels": {}, "remote_buffers": [],
                      "threadblocks": [], "semaphores": []} for r in range(n)]

    def tb(self, rank: int) -> int:
        tbs = self.gpus[rank]["threadblocks"]
        tbs.append({"id": len(tbs), "ops": [], "channels": {}, "remote_buffer_refs": {}})
        return len(tbs) - 1

    def tb_channel(self, rank: int, tb: int, peer: int, kind: str = "memory") -> int:
        """A new gpu-level channel of ``kind`` from ``rank`` to ``peer``, used by ``tb``: its position in the
        thread block's list."""
        gpu_channels = self.gpus[rank]["channels"].setdefault(kind, [])
        gpu_channels.append(peer)
        tb_channels = self.gpus[rank]["threadblocks"][tb]["channels"].setdefault(kind, [])
        tb_channels.append(len(gpu_channels) - 1)
        return len(tb_channels) - 1

    def remote(self, rank: int, tb: int, owner: int, index: int, size: int = 1, kind: str = "memory") -> dict:
        """A chunk range of ``owner``'s scratch, as ``rank``'s thread block ``tb`` names it."""
        buffers = self.gpus[rank]["remote_buffers"]
        entry = {"rank": owner, "type": "s", "access_channel_types": [kind]}
        if entry not in buffers:
            buffers.append(entry)
        refs = self.gpus[rank]["threadblocks"][tb]["remote_buffer_refs"].setdefault(kind, [])
        if buffers.index(entry) not in refs:
            refs.append(buffers.index(entry))
        return {"buffer_id": refs.index(buffers.index(entry)), "index": index, "size": size}

    def op(self, rank: int, tb: int, name: str, **fields) -> None:
        self.gpus[rank]["threadblocks"][tb]["ops"].append({"name": name, **fields})

    def text(self) -> str:
        gpus = []
        for gpu in self.gpus:
            tbs = [{"id": tb["id"], "ops": tb["ops"],
                    "channels": [{"channel_type": k, "channel_ids": v} for k, v in tb["channels"].items()],
                    "remote_buffer_refs": [{"access_channel_type": k, "remote_buffer_ids": v}
                                           for k, v in tb["remote_buffer_refs"].items()]}
                   for tb in gpu["threadblocks"]]
            gpus.append({**gpu, "channels": [{"channel_type": k, "connected_to": v}
                                             for k, v in gpu["channels"].items()], "threadblocks": tbs})
        return json.dumps({**self.head, "gpus": gpus}, indent=2)


def local(buffer: str, index: int, size: int = 1) -> dict:
    return {"type": buffer, "index": index, "size": size}


def _peers(r: int, n: int) -> list[int]:
    return [(r + d) % n for d in range(1, n)]


def allpairs_allreduce_packets(n: int, instances: int = 1, into_input: bool = False) -> str:
    """LL: every rank puts chunk p as packets into rank p's scratch; rank r reduces chunk r with the packets it
    got (``respkt``) and puts the result as packets to every peer, which unpacks it. Instance i handles chunks
    ``c * instances + i`` on its own thread blocks and scratch. ``into_input``: the reduction goes into input
    chunk r, which the reducer then copies into the output."""
    k = instances
    xml = JsonWriter("allpairs_allreduce_packets", "allreduce", n, "LL", n * k, n * k, 2 * n * k)
    for r in range(n):
        for i in range(k):
            base = 2 * n * i
            senders = {p: xml.tb(r) for p in _peers(r, n)}
            reducer, unpacker = xml.tb(r), xml.tb(r)
            for p, tb in senders.items():
                xml.op(r, tb, "ppkt", src_buff=[local("i", p * k + i)],
                       dst_buff=[xml.remote(r, tb, p, base + r)], channel_type="memory")
            reduced = local("i" if into_input else "o", r * k + i)
            xml.op(r, reducer, "respkt",
                   src_buff=[local("i", r * k + i)] + [local("s", base + q) for q in _peers(r, n)],
                   dst_buff=[reduced] + [xml.remote(r, reducer, p, base + n + r) for p in _peers(r, n)],
                   channel_type="memory", reduce_op="sum")
            if into_input:
                xml.op(r, reducer, "copy", src_buff=[reduced], dst_buff=[local("o", r * k + i)])
            for q in _peers(r, n):
                xml.op(r, unpacker, "upkt", src_buff=[local("s", base + n + q)], dst_buff=[local("o", q * k + i)])
    return xml.text()


def allpairs_allreduce_simple(n: int, instances: int = 1, inplace: bool = False) -> str:
    """Simple, one thread block per instance with a channel to every peer: a relaxed handshake, puts of chunk p
    into rank p's scratch, signal/wait, a local reduce, ``res`` storing the result into every peer's scratch,
    signal/wait, copies into the output (in place: into the input)."""
    k = instances
    out = "i" if inplace else "o"
    xml = JsonWriter("allpairs_allreduce_simple", "allreduce", n, "Simple", n * k, n * k, 2 * n * k, inplace)
    for r in range(n):
        for i in range(k):
            base, tb = 2 * n * i, xml.tb(r)
            channels = [xml.tb_channel(r, tb, p) for p in _peers(r, n)]
            xml.op(r, tb, "rlxsignal", channel_ids=channels, channel_type="memory")
            xml.op(r, tb, "rlxwait", channel_ids=channels, channel_type="memory")
            for p in _peers(r, n):
                xml.op(r, tb, "put", src_buff=[local("i", p * k + i)], dst_buff=[xml.remote(r, tb, p, base + r)],
                       channel_type="memory")
            xml.op(r, tb, "signal", channel_ids=channels, channel_type="memory")
            xml.op(r, tb, "wait", channel_ids=channels, channel_type="memory")
            xml.op(r, tb, "nop")
            xml.op(r, tb, "res", src_buff=[local("i", r * k + i)] + [local("s", base + q) for q in _peers(r, n)],
                   dst_buff=[local(out, r * k + i)] + [xml.remote(r, tb, p, base + n + r) for p in _peers(r, n)],
                   channel_type="memory", reduce_op="sum")
            xml.op(r, tb, "signal", channel_ids=channels, channel_type="memory")
            xml.op(r, tb, "wait", channel_ids=channels, channel_type="memory")
            for q in _peers(r, n):
                xml.op(r, tb, "copy", src_buff=[local("s", base + n + q)], dst_buff=[local(out, q * k + i)])
    return xml.text()


def allgather_port(n: int) -> str:
    """Simple over port channels: ``pwsf`` of the input into every peer's scratch, wait, copies."""
    xml = JsonWriter("allgather_port", "allgather", n, "Simple", 1, n, n)
    for r in range(n):
        tb = xml.tb(r)
        channels = {p: xml.tb_channel(r, tb, p, "port") for p in _peers(r, n)}
        xml.op(r, tb, "copy", src_buff=[local("i", 0)], dst_buff=[local("o", r)])
        for p, channel in channels.items():
            xml.op(r, tb, "pwsf", src_buff=[local("i", 0)], dst_buff=[xml.remote(r, tb, p, r, kind="port")],
                   channel_ids=[channel], channel_type="port")
        xml.op(r, tb, "wait", channel_ids=list(channels.values()), channel_type="port")
        for q in _peers(r, n):
            xml.op(r, tb, "copy", src_buff=[local("s", q)], dst_buff=[local("o", q)])
    return xml.text()


def allpairs_reducescatter_packets(n: int) -> str:
    """LL: chunk p as packets into rank p's scratch, then ``repkt`` of the own chunk with what arrived."""
    xml = JsonWriter("allpairs_reducescatter_packets", "reducescatter", n, "LL", n, 1, n)
    for r in range(n):
        reducer = xml.tb(r)
        for p in _peers(r, n):
            xml.op(r, reducer, "ppkt", src_buff=[local("i", p)], dst_buff=[xml.remote(r, reducer, p, r)],
                   channel_type="memory")
        xml.op(r, reducer, "repkt", src_buff=[local("i", r)] + [local("s", q) for q in _peers(r, n)],
               dst_buff=[local("o", 0)], reduce_op="sum")
    return xml.text()


def allpairs_reducescatter_into_input(n: int, protocol: str = "Simple", chunks: int = 2) -> str:
    """Blocks of ``chunks`` chunks; block p of the input into rank p's scratch (Simple: ``put``, ``signal``,
    ``wait``; LL: ``ppkt``), the own block reduced with what arrived into itself, in the input (``re``,
    ``repkt``), then copied into the output."""
    k = chunks
    xml = JsonWriter(f"allpairs_reducescatter_into_input_{protocol}", "reducescatter", n, protocol, n * k, k, n * k)
    for r in range(n):
        tb = xml.tb(r)
        own, arrived = local("i", r * k, k), [local("s", q * k, k) for q in _peers(r, n)]
        if protocol == "LL":
            for p in _peers(r, n):
                xml.op(r, tb, "ppkt", src_buff=[local("i", p * k, k)], dst_buff=[xml.remote(r, tb, p, r * k, k)],
                       channel_type="memory")
            xml.op(r, tb, "repkt", src_buff=[own] + arrived, dst_buff=[own], reduce_op="sum")
        else:
            channels = [xml.tb_channel(r, tb, p) for p in _peers(r, n)]
            for p in _peers(r, n):
                xml.op(r, tb, "put", src_buff=[local("i", p * k, k)], dst_buff=[xml.remote(r, tb, p, r * k, k)],
                       channel_type="memory")
            xml.op(r, tb, "signal", channel_ids=channels, channel_type="memory")
            xml.op(r, tb, "wait", channel_ids=channels, channel_type="memory")
            xml.op(r, tb, "re", src_buff=[own] + arrived, dst_buff=[own], reduce_op="sum")
        xml.op(r, tb, "copy", src_buff=[own], dst_buff=[local("o", 0, k)])
    return xml.text()


def allpairs_alltoall(n: int) -> str:
    """Simple, a thread block per peer: a put of block p into rank p's scratch, signal, wait, copy into block
    p."""
    xml = JsonWriter("allpairs_alltoall", "alltoall", n, "Simple", n, n, n)
    for r in range(n):
        for p in _peers(r, n):
            tb = xml.tb(r)
            channel = xml.tb_channel(r, tb, p)
            xml.op(r, tb, "put", src_buff=[local("i", p)], dst_buff=[xml.remote(r, tb, p, r)],
                   channel_type="memory")
            xml.op(r, tb, "signal", channel_ids=[channel], channel_type="memory")
            xml.op(r, tb, "wait", channel_ids=[channel], channel_type="memory")
            xml.op(r, tb, "copy", src_buff=[local("s", p)], dst_buff=[local("o", p)])
        xml.op(r, 0, "copy", src_buff=[local("i", r)], dst_buff=[local("o", r)])
    return xml.text()


def allgather_barrier(n: int, barrier: bool = True) -> str:
    """Simple, two thread blocks: thread block 0 puts the input into every peer's scratch, signals and waits, then
    meets thread block 1 at barrier 0 (``barrier``: else it does not), after which thread block 1 copies what
    arrived into the output (it copied the own block before)."""
    xml = JsonWriter("allgather_barrier", "allgather", n, "Simple", 1, n, n)
    for r in range(n):
        sender, copier = xml.tb(r), xml.tb(r)
        channels = [xml.tb_channel(r, sender, p) for p in _peers(r, n)]
        for p in _peers(r, n):
            xml.op(r, sender, "put", src_buff=[local("i", 0)], dst_buff=[xml.remote(r, sender, p, r)],
                   channel_type="memory")
        xml.op(r, sender, "signal", channel_ids=channels, channel_type="memory")
        xml.op(r, sender, "wait", channel_ids=channels, channel_type="memory")
        xml.op(r, copier, "copy", src_buff=[local("i", 0)], dst_buff=[local("o", r)])
        if barrier:
            for tb in (sender, copier):
                xml.op(r, tb, "barrier", barrier_id=0, num_threadblocks=2)
        for q in _peers(r, n):
            xml.op(r, copier, "copy", src_buff=[local("s", q)], dst_buff=[local("o", q)])
    return xml.text()
