"""Which chunks a plan operation reads and writes, and which operations are thread-block-wide sync points.

A chunk key is ``(rank, buffer, index)``. Remote chunks are resolved through the operation's channel: the
peer of a memory/port channel, every member of a switch channel. Lowering uses this to place barriers and to
find fusable chains; the verifier uses it to check barriers.
"""

from __future__ import annotations

# Operations that the executor runs as a barrier point of the whole thread block: every thread finishes
# what came before before any thread starts what comes after (PLAN.md, "Barriers").
SYNC_OPS = frozenset({"barrier", "signal", "wait", "flush", "put_with_signal"})


def chunk_keys(rank: int, ref: dict) -> list[tuple[int, str, int]]:
    return [(rank, ref["buffer"], ref["index"] + t) for t in range(ref["count"])]


def channel_ranks(rank: int, channel: dict) -> list[int]:
    """The ranks whose memory an operation on ``channel`` addresses remotely."""
    return list(channel["peers"]) if channel["type"] == "switch" else [channel["peer"]]


def _on(ranks: list[int], ref: dict) -> list[tuple[int, str, int]]:
    return [key for r in ranks for key in chunk_keys(r, ref)]


def op_accesses(op: dict, rank: int, channels: list[dict]) -> tuple[list, list]:
    """(chunks read, chunks written) by ``op`` running on ``rank`` whose channel list is ``channels``."""
    name = op["op"]
    local = [rank]
    if name in ("copy", "read_packets"):
        return chunk_keys(rank, op["src"]), chunk_keys(rank, op["dst"])
    if name in ("put", "put_packets", "put_with_signal"):
        return chunk_keys(rank, op["src"]), _on(channel_ranks(rank, channels[op["channel"]]), op["dst"])
    if name in ("reduce", "reduce_put", "reduce_packets"):
        reads = [key for ref in op["srcs"] for key in chunk_keys(rank, ref)]
        reads += [key for item in op.get("packet_srcs", []) for key in chunk_keys(rank, item["src"])]
        writes = chunk_keys(rank, op["dst"])
        for item in op.get("remotes", []):
            writes += _on(channel_ranks(rank, channels[item["channel"]]), item["dst"])
        return reads, writes
    if name == "switch_reduce":
        return _on(channel_ranks(rank, channels[op["channel"]]), op["src"]), _on(local, op["dst"])
    if name == "switch_broadcast":
        return _on(local, op["src"]), _on(channel_ranks(rank, channels[op["channel"]]), op["dst"])
    return [], []


def conflicts(reads: list, writes: list, pending: dict) -> bool:
    """Whether accesses conflict with ``pending`` (chunk key -> written?) of earlier operations."""
    return any(pending.get(key) for key in reads) or any(key in pending for key in writes)


def add_pending(reads: list, writes: list, pending: dict) -> None:
    for key in reads:
        pending.setdefault(key, False)
    for key in writes:
        pending[key] = True
