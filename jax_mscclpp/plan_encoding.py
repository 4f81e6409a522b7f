"""The integer encoding of an execution plan, as the native executors receive it.

The JSON plan (``dsl/PLAN.md``) is the documented interchange format; the executors receive it as plain
integers, decoded and checked once when a plan is bound to a communicator (``runtime/reference/host_executor.h``; on GPUs once per
local device, ``runtime/gpu/communicator.h``):

    geometry      [input blocks, output blocks, chunks per block, scratch chunks, scratch packets (0/1)]
    channel       [type, peer, peer_channel] (memory 0, port 1) or [2, -1, -1, member, member, ...] (switch)
    operation     [code, channel, n_srcs, n_packet_srcs, n_remotes, dst(3), src(3), srcs(3 each),
                   packet_srcs(channel + 3 each), remotes(channel + 3 each)]
    chunk         [buffer (input 0, output 1, scratch 2, none -1), index, count]
"""

from __future__ import annotations

from ._codes import CODE_TABLES, Collective
from .dsl import ops as _ops

# The codes of the encoding (kernels/include/jax_mscclpp/codes.def): operation name -> code (the operations of
# the op table, dsl/ops.py; tests/dsl/test_dsl_ops.py checks that the two list the same), buffers, channel types.
OPCODES = {row["name"]: row["code"] for row in CODE_TABLES["plan_op"]}
_BUFFERS = {row["name"]: row["code"] for row in CODE_TABLES["plan_buffer"]}
_CHANNEL_TYPES = {row["name"]: row["code"] for row in CODE_TABLES["plan_channel"]}
_COLLECTIVES = {c.name.lower(): c for c in Collective}


def _chunk(ref: dict | None) -> list[int]:
    return [_BUFFERS["none"], 0, 0] if ref is None else [_BUFFERS[ref["buffer"]], ref["index"], ref["count"]]


def encode_op(op: dict) -> list[int]:
    """The words of one operation (module docstring); an operation the op table or the executors do not know is
    refused."""
    code = OPCODES.get(_ops.spec_of(op["op"]).name)
    if code is None:
        raise ValueError(f"operation {op['op']!r} has no code in the integer encoding (codes.def)")
    srcs, packet_srcs, remotes = op.get("srcs", []), op.get("packet_srcs", []), op.get("remotes", [])
    words = [code, op.get("channel", -1), len(srcs), len(packet_srcs), len(remotes)]
    words += _chunk(op.get("dst")) + _chunk(op.get("src"))
    for ref in srcs:
        words += _chunk(ref)
    for item in packet_srcs:
        words += [item["channel"], *_chunk(item["src"])]
    for item in remotes:
        words += [item["channel"], *_chunk(item["dst"])]
    return words


def encode_plan(plan: dict) -> dict:
    """The integer form of a plan, as ``register_host_plan`` and ``cuda.comm_bind_plan`` take it."""
    buffers = plan["buffers"]
    geometry = [
        buffers["input"]["blocks"],
        buffers["output"]["blocks"],
        buffers["input"]["chunks_per_block"],
        buffers["scratch"]["blocks"] * buffers["scratch"]["chunks_per_block"],
        int(bool(buffers["scratch"].get("packets", False))),
    ]
    channels, threadblocks = [], []
    for rank in plan["ranks"]:
        channels.append([
            [_CHANNEL_TYPES["switch"], -1, -1, *c["peers"]] if c["type"] == "switch"
            else [_CHANNEL_TYPES[c["type"]], c["peer"], c["peer_channel"]]
            for c in rank["channels"]
        ])
        threadblocks.append([[w for op in tb["ops"] for w in encode_op(op)] for tb in rank["threadblocks"]])
    return {
        "name": plan["name"],
        "collective": int(_COLLECTIVES[plan["collective"]]),
        "world_size": plan["world_size"],
        "geometry": geometry,
        "channels": channels,
        "threadblocks": threadblocks,
    }
