"""Thread blocks of one rank that only order each other, merged into one thread block.

A foreign schedule splits a rank's work over thread blocks that wait for each other through memory channels from
the rank to itself: MSCCL-IR gives a thread block one peer to send to and one to receive from, so MSCCLang's
all-pairs all-reduce runs a thread block per peer and one that reduces, joined by signals. On a GPU each is a
block of its own and each such wait a round trip through memory; our own plans put that work on one thread block.
``merge_thread_blocks`` merges every group of a rank's thread blocks that self channels join into one:

* its operations are the group's, in the order one symbolic run of the verified plan performed them
  (``verify.execution_order``). That order is one the merged plan can run in: every rank's merged thread blocks
  perform their operations in the run's order, and the run performed each operation after everything it waits
  for, so no wait can be left waiting for an operation ordered after it (no deadlock); each channel's signals
  keep their order;
* the signals and waits of the self channels inside a group order what program order now orders: they go, with
  those channels (the rank's channels renumbered). A self channel that also carries data keeps its operations;
* an operation fused from two (``put_with_signal``) is split back into them, and the sends (puts and signals)
  move earlier, past operations they neither read nor write the chunks of and share no channel with, never
  past a flush or another send (which keeps every channel's order and what each signal releases), and past a
  wait only when they read no scratch (what a wait acquires is what peers wrote into this rank's scratch). Sending
  earlier delays no one, so the merged order stays free of deadlock, and the thread block's sends gather as our
  own plans write them, right after the reduction whose result they send (fusion then folds them into it);
* thread blocks left without operations go, fusion, scratch compaction and barrier placement run again
  (``lowering.place``), and the result must verify.
  Where it does not (a put moved ahead of the wait that lets it reuse a slot is a race), the merge is tried with
  sends kept behind every wait, then with sends where the run put them, and otherwise the plan is kept as it was.

Groups stay apart: instances, each on thread blocks of its own that no self channel joins to another instance's,
keep their parallelism.
"""

from __future__ import annotations

import copy

from .access import op_accesses
from .errors import VerificationError
from .lowering import place
from .ops import BARRIER_OP, FLUSH, SIGNAL_OP, WAIT, WAIT_OP, spec_of
from .plan_format import drop_channels
from .verify import execution_order, op_channels, verify_plan

_ORDERING_OPS = (SIGNAL_OP, WAIT_OP)


def merge_thread_blocks(plan: dict) -> dict:
    """``plan`` with each rank's thread blocks that self channels join merged (see the module docstring), verified;
    ``plan`` itself where nothing merges or the merged plan does not verify."""
    try:
        order = execution_order(plan)
    except VerificationError:
        return plan
    for sends_past in (_PAST_WAITS, _PAST_DATA, _NOWHERE):
        merged = _merged(plan, order, sends_past)
        if merged is None:
            return plan
        place(merged)
        try:
            return verify_plan(merged)
        except VerificationError:
            continue
    return plan


# How far a send may move earlier: past waits too (when it reads no scratch), past data operations only, nowhere.
_PAST_WAITS, _PAST_DATA, _NOWHERE = "waits", "data", "nowhere"


def _merged(plan: dict, order: list, sends_past: str) -> dict | None:
    """A copy of ``plan`` with its groups merged in ``order``, before fusion and barriers; None if nothing merges."""
    merged = copy.deepcopy(plan)
    changed = False
    for rank, rank_plan in enumerate(merged["ranks"]):
        groups = _groups(rank, rank_plan)
        if len(groups) == len(rank_plan["threadblocks"]):
            continue
        changed = True
        position = {(tb, index): n for n, (r, tb, index) in enumerate(order) if r == rank}
        inner = ordering_only_self_channels(rank, rank_plan)
        blocks = []
        for group in groups:
            placed = sorted((position[tb, index], op) for tb in group
                            for index, op in enumerate(rank_plan["threadblocks"][tb]["ops"])
                            if not (op["op"] in _ORDERING_OPS and op["channel"] in inner))
            ops = [part for _, op in placed if op["op"] != BARRIER_OP for part in _unfused(op)]
            blocks.append({"ops": _sends_early(ops, rank, rank_plan["channels"], sends_past)})
        rank_plan["threadblocks"] = [block for block in blocks if block["ops"]] or blocks[:1]
        drop_channels(merged, rank, inner)
    return merged if changed else None


_SENDS = ("put", "put_packets", "put_with_signal", "signal")


def _unfused(op: dict) -> list[dict]:
    """``op``, or the two operations it was fused from (ops.py, ``fused_from``): the first with its operands, the
    second (a signal) on its channel. Fusion joins them again where they stay side by side."""
    pair = spec_of(op["op"]).fused_from
    if pair is None:
        return [op]
    line = {"src_line": op["src_line"]} if "src_line" in op else {}
    return [{**op, "op": pair[0]}, {"op": pair[1], "channel": op["channel"], **line}]


def _sends_early(ops: list, rank: int, channels: list, sends_past: str) -> list:
    """``ops`` with each send moved before the operations it may pass (see the module docstring)."""
    out: list = []
    for op in ops:
        at = len(out)
        if op["op"] in _SENDS and sends_past != _NOWHERE:
            while at > 0 and _may_pass(op, out[at - 1], rank, channels, sends_past == _PAST_WAITS):
                at -= 1
        out.insert(at, op)
    return out


def _may_pass(send: dict, earlier: dict, rank: int, channels: list, past_waits: bool) -> bool:
    sync = spec_of(earlier["op"]).sync
    if earlier["op"] in _SENDS or sync == FLUSH or set(op_channels(send)) & set(op_channels(earlier)):
        return False
    reads, writes = map(set, op_accesses(send, rank, channels))
    if sync == WAIT and not (past_waits and all(buffer != "scratch" for _, buffer, _ in reads)):
        return False
    earlier_reads, earlier_writes = map(set, op_accesses(earlier, rank, channels))
    return not (writes & (earlier_reads | earlier_writes) or reads & earlier_writes)


def _is_self(rank: int, channel: dict) -> bool:
    return channel["type"] == "memory" and channel["peer"] == rank


def _groups(rank: int, rank_plan: dict) -> list[list[int]]:
    """The rank's thread blocks grouped by the self channels between them (each group's blocks in order, the
    groups in the order of their first block)."""
    channels = rank_plan["channels"]
    parent = list(range(len(rank_plan["threadblocks"])))

    def root(tb: int) -> int:
        while parent[tb] != tb:
            parent[tb] = parent[parent[tb]]
            tb = parent[tb]
        return tb

    users: dict[int, int] = {}  # self channel endpoint -> the thread block using it
    for tb, block in enumerate(rank_plan["threadblocks"]):
        for op in block["ops"]:
            for channel in op_channels(op):
                if _is_self(rank, channels[channel]):
                    users[channel] = tb
    for channel, tb in users.items():
        other = users.get(channels[channel]["peer_channel"])
        if other is not None:
            parent[root(tb)] = root(other)
    groups: dict[int, list[int]] = {}
    for tb in range(len(parent)):
        groups.setdefault(root(tb), []).append(tb)
    return sorted(groups.values())


def ordering_only_self_channels(rank: int, rank_plan: dict) -> set[int]:
    """The rank's self channel endpoints whose pair carries only signals and waits."""
    channels = rank_plan["channels"]
    carries_data: set[int] = set()
    for block in rank_plan["threadblocks"]:
        for op in block["ops"]:
            if op["op"] not in _ORDERING_OPS:
                carries_data.update(op_channels(op))
    return {c for c, channel in enumerate(channels) if _is_self(rank, channel)
            and c not in carries_data and channel["peer_channel"] not in carries_data}
