"""Operation fusion: merge chains of one thread block into single plan operations.

Three rewrites, each only across operations with no intervening access to the chunks involved (barriers do
not count: they are placed afterwards):

* ``read_packets(T <- S)`` ... ``reduce(D <- [.., T, ..])`` -> ``reduce_packets(D <- [..], packet_srcs=[S])``
  when scratch chunk T is a temporary: the reduction is its only reader anywhere in the plan. The packets
  are then unpacked into registers instead of a round trip through T.
* ``reduce(D <- ...)`` immediately followed by puts of exactly D -> ``reduce_put`` (HB memory channels) or
  ``reduce_packets`` with ``remotes`` (LL memory channels): the result goes to the peers from registers.
  Port channels are left alone: their DMA reads memory, so the local write is needed anyway.
* ``put`` immediately followed by ``signal`` on the same channel -> ``put_with_signal``.
"""

from __future__ import annotations

from collections import Counter

from .access import chunk_keys, op_accesses


def fuse_plan(plan: dict) -> None:
    """Rewrite every thread block of ``plan`` in place."""
    readers = _reader_counts(plan)
    for rank, rank_plan in enumerate(plan["ranks"]):
        channels = rank_plan["channels"]
        for block in rank_plan["threadblocks"]:
            # Barriers are re-derived after fusion (barriers.py): they neither block nor survive it.
            ops = [op for op in block["ops"] if op["op"] != "barrier"]
            ops = _fold_packet_reads(ops, rank, channels, readers)
            ops = _fold_result_puts(ops, channels)
            block["ops"] = _fold_put_signal(ops)


def _reader_counts(plan: dict) -> Counter:
    """Chunk key -> number of operations in the whole plan that read it."""
    readers = Counter()
    for rank, rank_plan in enumerate(plan["ranks"]):
        for block in rank_plan["threadblocks"]:
            for op in block["ops"]:
                reads, _ = op_accesses(op, rank, rank_plan["channels"])
                readers.update(set(reads))
    return readers


def _with_src_line(op: dict, origin: dict) -> dict:
    if "src_line" in origin:
        op["src_line"] = origin["src_line"]
    return op


def _fold_packet_reads(ops: list, rank: int, channels: list, readers: Counter) -> list:
    out: list = []  # removed read_packets become None until the end
    for op in ops:
        if op["op"] == "reduce":
            op = _absorb_packet_reads(op, out, rank, channels, readers)
        out.append(op)
    return [op for op in out if op is not None]


def _absorb_packet_reads(reduce: dict, out: list, rank: int, channels: list, readers: Counter) -> dict:
    srcs, packet_srcs = [], []
    for src in reduce["srcs"]:
        position = _feeding_packet_read(src, out, rank, channels, readers)
        if position is None:
            srcs.append(src)
            continue
        read = out[position]
        out[position] = None
        packet_srcs.append({"channel": read["channel"], "src": read["src"]})
    if not packet_srcs:
        return reduce
    fused = {"op": "reduce_packets", "dst": reduce["dst"], "srcs": srcs, "packet_srcs": packet_srcs,
             "remotes": []}
    return _with_src_line(fused, reduce)


def _feeding_packet_read(temp: dict, out: list, rank: int, channels: list, readers: Counter) -> int | None:
    """Position in ``out`` of the read_packets whose only purpose is to fill ``temp`` for the reduction
    being built, or None."""
    temp_keys = set(chunk_keys(rank, temp))
    if temp["buffer"] != "scratch" or any(readers[key] != 1 for key in temp_keys):
        return None
    for position in range(len(out) - 1, -1, -1):
        op = out[position]
        if op is None:
            continue
        reads, writes = op_accesses(op, rank, channels)
        if not temp_keys & (set(reads) | set(writes)):
            continue
        if op["op"] != "read_packets" or op["dst"] != temp:
            return None
        slot_keys = set(chunk_keys(rank, op["src"]))
        between = [o for o in out[position + 1:] if o is not None]
        if any(slot_keys & set(op_accesses(o, rank, channels)[1]) for o in between):
            return None
        return position
    return None


def _result_put_target(op: dict, result: dict, channels: list) -> str | None:
    """The fused operation a put of ``result`` right after its reduction belongs in, or None."""
    if op["op"] not in ("put", "put_packets") or op["src"] != result:
        return None
    channel = channels[op["channel"]]
    if op["op"] == "put" and channel["type"] == "memory" and channel["protocol"] == "HB":
        return "reduce_put"
    if op["op"] == "put_packets":
        return "reduce_packets"
    return None


def _fold_result_puts(ops: list, channels: list) -> list:
    out, i = [], 0
    while i < len(ops):
        op = ops[i]
        i += 1
        if op["op"] not in ("reduce", "reduce_packets"):
            out.append(op)
            continue
        target = "reduce_packets" if op["op"] == "reduce_packets" else None
        remotes = []
        while i < len(ops):
            kind = _result_put_target(ops[i], op["dst"], channels)
            if kind is None or (target is not None and kind != target):
                break
            target = kind
            remotes.append({"channel": ops[i]["channel"], "dst": ops[i]["dst"]})
            i += 1
        if not remotes:
            out.append(op)
            continue
        fused = {"op": target, "dst": op["dst"], "srcs": op["srcs"], "remotes": op.get("remotes", []) + remotes}
        if target == "reduce_packets":
            fused["packet_srcs"] = op.get("packet_srcs", [])
        out.append(_with_src_line(fused, op))
    return out


def _fold_put_signal(ops: list) -> list:
    out: list = []
    for op in ops:
        previous = out[-1] if out else None
        if op["op"] == "signal" and previous is not None and previous["op"] == "put" \
                and previous["channel"] == op["channel"]:
            out[-1] = {**previous, "op": "put_with_signal"}
            continue
        out.append(op)
    return out
