"""The execution plan: schema constants, JSON load/save, and structural validation.

A plan is a plain dict (documented in PLAN.md) that both the GPU executor kernel and the host reference backend
interpret. ``validate_plan`` checks its shape, chunk ranges and channel pairing; ``verify`` (verify.py) proves
what it computes.
"""

from __future__ import annotations

import json

from . import geometry
from .access import operand_refs
from .errors import OpLocation, VerificationError
from .ops import READ, REF, REFS, VIA, spec_of

PLAN_VERSION = 1

CHANNEL_TYPES = ("memory", "port", "switch")

OPTIONAL_OP_FIELDS = ("src_line",)

# Containers whose children plan_to_json writes one per line.
_ONE_PER_LINE = ("ops", "channels", "buffers")


def plan_to_json(plan: dict) -> str:
    """The plan as JSON text: sorted keys ("op" first in an operation), one operation or channel per line,
    so the text of a plan is stable (golden files) and diffs read operation by operation."""
    return _format(plan, 0, False) + "\n"


def plan_from_json(text: str) -> dict:
    """Parse and structurally validate a plan."""
    plan = json.loads(text)
    validate_plan(plan)
    return plan


def _inline(value) -> str:
    """One-line JSON with sorted keys, except that an operation's "op" comes first (an operation the op
    table does not know is refused)."""
    if isinstance(value, dict) and "op" in value:
        spec_of(value["op"])
        rest = json.dumps({k: v for k, v in value.items() if k != "op"}, sort_keys=True)
        return "{" + f'"op": {json.dumps(value["op"])}' + (", " + rest[1:] if len(value) > 1 else "}")
    return json.dumps(value, sort_keys=True)


def _format(value, level: int, children_inline: bool) -> str:
    if not isinstance(value, (dict, list)) or not value:
        return json.dumps(value, sort_keys=True)
    pad, end_pad = "  " * (level + 1), "  " * level
    if isinstance(value, list):
        items = [_inline(v) if children_inline else _format(v, level + 1, False) for v in value]
        return "[\n" + ",\n".join(pad + item for item in items) + "\n" + end_pad + "]"
    items = []
    for key in sorted(value):
        child = value[key]
        text = _inline(child) if children_inline else _format(child, level + 1, key in _ONE_PER_LINE)
        items.append(f"{pad}{json.dumps(key)}: {text}")
    return "{\n" + ",\n".join(items) + "\n" + end_pad + "}"


def describe_ref(ref: dict) -> str:
    """``scratch[3]`` or ``scratch[3:5]``."""
    index, count = ref["index"], ref["count"]
    return f"{ref['buffer']}[{index}]" if count == 1 else f"{ref['buffer']}[{index}:{index + count}]"


def iter_ops(plan: dict):
    """(rank, threadblock, index, op) for every operation of the plan, rank by rank, in program order."""
    for rank, rank_plan in enumerate(plan["ranks"]):
        for tb, block in enumerate(rank_plan["threadblocks"]):
            for index, op in enumerate(block["ops"]):
                yield rank, tb, index, op


def locate(rank: int, tb: int, index: int, op: dict) -> OpLocation:
    return OpLocation(rank, tb, index, op.get("op", "?"), op.get("src_line"))


def validate_plan(plan: dict) -> None:
    """Raise VerificationError (kind ``schema``, ``range`` or ``channel``) unless the plan is well formed."""
    _check_header(plan)
    for rank, rank_plan in enumerate(plan["ranks"]):
        _check_channels(plan, rank, rank_plan)
    for rank, tb, index, op in iter_ops(plan):
        _check_op(plan, rank, op, locate(rank, tb, index, op))


def _schema(detail: str, at: OpLocation | None = None) -> VerificationError:
    return VerificationError("schema", detail, at)


def _is_int(value, minimum: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def permutation_of(plan: dict) -> tuple[tuple[int, int], ...] | None:
    """The (source, destination) pairs of a permutation's plan (None for every other collective)."""
    pairs = plan.get("permutation")
    return None if pairs is None else tuple((int(src), int(dst)) for src, dst in pairs)


def receives_nothing(plan: dict, rank: int) -> bool:
    """Whether ``rank`` is no pair's destination in a permutation's plan: its executor zeroes its output before
    the plan runs, as lax.ppermute gives such a rank zeros, and the plan writes nothing there (PLAN.md)."""
    pairs = permutation_of(plan)
    return pairs is not None and all(dst != rank for _, dst in pairs)


def _check_permutation(plan: dict, world: int) -> None:
    if plan["collective"] != "permute":
        if "permutation" in plan:
            raise _schema(f"only a plan of the permutation has 'permutation'; this one is {plan['collective']}")
        return
    pairs = plan.get("permutation")
    if not isinstance(pairs, list) or not all(
            isinstance(pair, list) and len(pair) == 2 and all(_is_int(r) and r < world for r in pair)
            for pair in pairs):
        raise _schema(f"a plan of the permutation needs 'permutation': a list of [source, destination] pairs of "
                      f"ranks below {world}")
    for side, name in ((0, "source"), (1, "destination")):
        ranks = [pair[side] for pair in pairs]
        if len(set(ranks)) != len(ranks):
            raise _schema(f"'permutation' names a {name} twice: {pairs}")


def _check_header(plan: dict) -> None:
    if not isinstance(plan, dict):
        raise _schema("a plan is a JSON object")
    if plan.get("version") != PLAN_VERSION:
        raise _schema(f"plan version {plan.get('version')!r} is not {PLAN_VERSION}")
    for key in ("name", "collective", "world_size", "buffers", "ranks"):
        if key not in plan:
            raise _schema(f"plan has no {key!r}")
    if plan["collective"] not in geometry.COLLECTIVES:
        raise _schema(f"unknown collective {plan['collective']!r}")
    world = plan["world_size"]
    if not _is_int(world, 1):
        raise _schema("world_size must be a positive int")
    buffers = plan["buffers"]
    if not isinstance(buffers, dict) or set(buffers) != set(geometry.BUFFERS):
        raise _schema(f"buffers must be exactly {geometry.BUFFERS}")
    for name, layout in buffers.items():
        if not _is_int(layout.get("blocks"), 1) or not _is_int(layout.get("chunks_per_block"), 0):
            raise _schema(f"buffer {name} needs int blocks >= 1 and chunks_per_block >= 0")
    _check_permutation(plan, world)
    expected_blocks = geometry.buffer_blocks(plan["collective"], world)
    if (buffers["input"]["blocks"], buffers["output"]["blocks"]) != expected_blocks:
        raise _schema(f"{plan['collective']} over {world} ranks has (input, output) blocks {expected_blocks}")
    if buffers["input"]["chunks_per_block"] != buffers["output"]["chunks_per_block"] \
            or buffers["input"]["chunks_per_block"] < 1:
        raise _schema("input and output share one positive chunks_per_block")
    if buffers["scratch"]["blocks"] != 1 or not isinstance(buffers["scratch"].get("packets"), bool):
        raise _schema("scratch has one block and a boolean 'packets'")
    if not isinstance(plan["ranks"], list) or len(plan["ranks"]) != world:
        raise _schema(f"ranks must list the {world} ranks")
    for rank, rank_plan in enumerate(plan["ranks"]):
        if not isinstance(rank_plan.get("channels"), list) or not isinstance(rank_plan.get("threadblocks"), list):
            raise _schema(f"rank {rank} needs 'channels' and 'threadblocks' lists")
        for tb, block in enumerate(rank_plan["threadblocks"]):
            if not isinstance(block, dict) or not isinstance(block.get("ops"), list):
                raise _schema(f"rank {rank} threadblock {tb} needs an 'ops' list")


def _check_channels(plan: dict, rank: int, rank_plan: dict) -> None:
    world, ranks = plan["world_size"], plan["ranks"]
    for index, channel in enumerate(rank_plan["channels"]):
        where = f"rank {rank} channel {index}"
        kind = channel.get("type")
        if kind not in CHANNEL_TYPES or channel.get("protocol") not in ("LL", "HB"):
            raise _schema(f"{where}: type must be one of {CHANNEL_TYPES} and protocol LL or HB")
        if kind != "memory" and channel["protocol"] != "HB":
            raise _schema(f"{where}: only memory channels speak LL")
        if kind == "switch":
            peers, peer_channels = channel.get("peers"), channel.get("peer_channels")
            if not isinstance(peers, list) or peers != sorted(set(peers)) or rank not in peers \
                    or not all(_is_int(p) and p < world for p in peers) \
                    or not isinstance(peer_channels, list) or len(peer_channels) != len(peers):
                raise _schema(f"{where}: a switch channel lists its sorted member ranks (this one included) "
                              "in 'peers' and their channel indices in 'peer_channels'")
            for peer, peer_channel in zip(peers, peer_channels):
                other = _channel_at(ranks, peer, peer_channel)
                if other is None or other.get("type") != "switch" or other.get("peers") != peers \
                        or other.get("peer_channels") != peer_channels:
                    raise VerificationError("channel", f"{where}: rank {peer} channel {peer_channel} is not the "
                                                       "same switch channel")
            continue
        peer, peer_channel = channel.get("peer"), channel.get("peer_channel")
        if not _is_int(peer) or peer >= world or not _is_int(peer_channel):
            raise _schema(f"{where}: needs an int 'peer' rank and 'peer_channel' index")
        other = _channel_at(ranks, peer, peer_channel)
        if other is None or other.get("type") != kind or other.get("peer") != rank \
                or other.get("peer_channel") != index or other.get("protocol") != channel["protocol"]:
            raise VerificationError("channel", f"{where}: rank {peer} channel {peer_channel} is not its other end")


def _channel_at(ranks: list, rank: int, index) -> dict | None:
    channels = ranks[rank]["channels"]
    return channels[index] if _is_int(index) and index < len(channels) else None


def _check_op(plan: dict, rank: int, op: dict, at: OpLocation) -> None:
    if not isinstance(op, dict):
        raise _schema(f"an operation is a JSON object, got {op!r}", at)
    spec = spec_of(op.get("op"), at)
    fields = spec.fields
    keys = set(op) - {"op"}
    if not set(fields) <= keys or keys - set(fields) - set(OPTIONAL_OP_FIELDS):
        raise _schema(f"fields must be {sorted(fields)} (plus optional {list(OPTIONAL_OP_FIELDS)})", at)
    channel_count = len(plan["ranks"][rank]["channels"])
    channels = [op["channel"]] if spec.channel else []
    for operand in spec.operands:
        if operand.shape in (REFS, VIA) and not isinstance(op[operand.field], list):
            raise _schema(f"{operand.field} must be a list", at)
        if operand.shape == VIA:
            for item in op[operand.field]:
                if not isinstance(item, dict) or set(item) != {"channel", operand.entry_key}:
                    raise _schema(f"{operand.field} entries are {{'channel', '{operand.entry_key}'}}", at)
                channels.append(item["channel"])
    for channel in channels:
        if not _is_int(channel) or channel >= channel_count:
            raise _schema(f"channel {channel!r} is not one of rank {rank}'s {channel_count} channels", at)
    refs = [(operand, ref) for operand in spec.operands for ref, _ in operand_refs(operand, op)]
    for _, ref in refs:
        _check_ref(plan, ref, at)
    if len({ref["count"] for _, ref in refs}) > 1:
        raise _schema("all chunk references of an operation span the same number of chunks", at)
    if sum(operand.access == READ for operand, _ in refs) < spec.min_sources:
        raise _schema(f"{spec.name} needs at least {spec.min_sources} sources", at)
    for operand in spec.operands:
        if operand.shape != REF and len(op[operand.field]) < operand.min_entries:
            raise _schema(f"{spec.name} needs at least {operand.min_entries} {operand.field} entries", at)


def _check_ref(plan: dict, ref, at: OpLocation) -> None:
    if not isinstance(ref, dict) or set(ref) != {"buffer", "index", "count"} \
            or ref["buffer"] not in geometry.BUFFERS or not _is_int(ref["index"]) or not _is_int(ref["count"], 1):
        raise _schema(f"bad chunk reference {ref!r}: needs buffer in {geometry.BUFFERS}, index >= 0, count >= 1", at)
    total = geometry.chunk_total(plan["buffers"], ref["buffer"])
    if ref["index"] + ref["count"] > total:
        raise VerificationError("range", f"{describe_ref(ref)} is out of range: {ref['buffer']} has {total} chunks", at)


def drop_channels(plan: dict, rank: int, dropped: set[int]) -> None:
    """Remove channels ``dropped`` of ``rank``, which no operation uses, renumbering the rest everywhere they
    are named: the rank's operations and the other ends (``peer_channel``, ``peer_channels``) on every rank."""
    if not dropped:
        return
    kept = [index for index in range(len(plan["ranks"][rank]["channels"])) if index not in dropped]
    renumbered = {old: new for new, old in enumerate(kept)}
    for other, rank_plan in enumerate(plan["ranks"]):
        for index, channel in enumerate(rank_plan["channels"]):
            if other == rank and index in dropped:
                continue
            if channel.get("peer") == rank:
                channel["peer_channel"] = renumbered[channel["peer_channel"]]
            if rank in channel.get("peers", ()):
                channel["peer_channels"] = [renumbered[c] if p == rank else c
                                            for p, c in zip(channel["peers"], channel["peer_channels"])]
    rank_plan = plan["ranks"][rank]
    rank_plan["channels"] = [rank_plan["channels"][index] for index in kept]
    for block in rank_plan["threadblocks"]:
        block["ops"] = [_renumbered_channels(op, renumbered) for op in block["ops"]]


def _renumbered_channels(op: dict, renumbered: dict[int, int]) -> dict:
    op = dict(op)
    for field, value in op.items():
        if field == "channel":
            op[field] = renumbered[value]
        elif isinstance(value, list) and value and isinstance(value[0], dict) and "channel" in value[0]:
            op[field] = [{**item, "channel": renumbered[item["channel"]]} for item in value]
    return op
