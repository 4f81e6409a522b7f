"""Lowering: a Program to an execution plan.

Steps, in order:
1. Layout: thread blocks per rank and channel endpoints. Replication (``instances=k``) runs k copies of the
   program side by side: instance i owns thread blocks ``i*T .. i*T+T-1`` of a rank that uses T, its own copy
   of every memory/port channel, and chunk ``i*C + j`` of every block where the program says chunk j of C
   (chunks of scratch likewise, with C the scratch size, until compaction renumbers them); switch channels are
   shared (they hold no state).
   A thread block group of size G uses G copies of each memory/port channel it touches, member g copy g.
2. Expansion of every DSL operation into plan operations, per instance and group member.
3. Structural validation (before fusion can remove a chunk reference).
4. Fusion (fusion.py), scratch compaction (scratch_compaction.py), then barrier placement (barriers.py).
5. Verification (verify.py) unless disabled.
"""

from __future__ import annotations

import copy

from . import barriers, fusion
from .errors import VerificationError
from .ops import OPS, RECV, SEND, spec_of
from .plan_format import PLAN_VERSION, iter_ops, validate_plan
from .scratch_compaction import compact_scratch
from .verify import verify_plan

# Program, Operation and Chunk (program.py) appear only in annotations, which are never evaluated: program.py
# imports this module (Program.lower), so this one does not import it back.


def lower(program: Program, *, instances: int = 1, fuse: bool = True, verify: bool = True,
          compact: bool = True) -> dict:
    """The plan of ``program`` replicated ``instances`` times (see the module docstring). ``compact=False`` keeps
    the program's scratch indices, for a caller that maps them before it places the plan again (imports/)."""
    if not isinstance(instances, int) or instances < 1:
        raise VerificationError("program", f"instances must be a positive int, got {instances!r}")
    layout = _Layout(program, instances)
    ranks = [{"channels": layout.channels[r],
              "threadblocks": [{"ops": []} for _ in range(layout.tb_count[r] * instances)]}
             for r in range(program.world_size)]
    for instance in range(instances):
        for operation in program.operations:
            for tb, op in layout.expand(operation, instance):
                ranks[operation.rank]["threadblocks"][tb]["ops"].append(op)
    buffers = copy.deepcopy(program.buffers)
    for name in ("input", "output", "scratch"):
        buffers[name]["chunks_per_block"] *= instances
    plan = {"version": PLAN_VERSION, "name": program.name, "collective": program.collective,
            "world_size": program.world_size, "buffers": buffers, "ranks": ranks}
    if program.permutation is not None:
        plan["permutation"] = copy.deepcopy(program.permutation)
    buffers["scratch"]["packets"] = any(spec_of(op["op"]).uses_packets for *_, op in iter_ops(plan))
    validate_plan(plan)
    place(plan, fuse=fuse, compact=compact)
    if verify:
        verify_plan(plan)
    return plan


def place(plan: dict, *, fuse: bool = True, compact: bool = True) -> dict:
    """Step 4 on ``plan``, in place: fusion (unless ``fuse`` is False), scratch compaction (unless ``compact`` is
    False), barrier placement. Every rewrite of a lowered plan's operations ends here before it is verified again."""
    if fuse:
        fusion.fuse_plan(plan)
    if compact:
        compact_scratch(plan)
    barriers.place_barriers(plan)
    return plan


def fuse_and_place_barriers(plan: dict) -> dict:
    """Steps 4 and 5 again on ``plan``, a lowered plan rewritten since (imports/: reads moved to where the data
    already is can leave fusions to make, scratch chunks no operation names and barriers that order nothing): a
    fused and compacted copy with its barriers placed anew if it verifies, else ``plan`` itself."""
    rewritten = place(copy.deepcopy(plan))
    try:
        return verify_plan(rewritten)
    except VerificationError:
        return plan


class _Layout:
    """Thread block counts and channel endpoints of the replicated program."""

    def __init__(self, program: Program, instances: int):
        self.program = program
        self.instances = instances
        self.tb_count = [0] * program.world_size
        copies: dict[int, int] = {}
        for operation in program.operations:
            group = operation.thread_blocks
            self.tb_count[operation.rank] = max(self.tb_count[operation.rank], max(group) + 1)
            if operation.channel is not None:
                key = id(operation.channel)
                copies[key] = max(copies.get(key, 0), len(group))
        self.channels: list[list[dict]] = [[] for _ in range(program.world_size)]
        # (id(channel), instance, group member, side) -> channel index on that side's rank; side is SEND or RECV
        # (ops.py) or, for a switch channel, the member rank.
        self.endpoints: dict[tuple, int] = {}
        for instance in range(instances):
            for channel in program.channels:
                if id(channel) not in copies:
                    continue
                if channel.type == "switch":
                    if instance == 0:
                        self._add_switch(channel)
                    continue
                for member in range(copies[id(channel)]):
                    self._add_pipe(channel, instance, member)

    def _add_pipe(self, channel, instance: int, member: int) -> None:
        base = {"type": channel.type, "protocol": channel.protocol}
        sender = len(self.channels[channel.src])
        self.channels[channel.src].append({**base, "peer": channel.dst})
        receiver = len(self.channels[channel.dst])
        self.channels[channel.dst].append({**base, "peer": channel.src})
        self.channels[channel.src][sender]["peer_channel"] = receiver
        self.channels[channel.dst][receiver]["peer_channel"] = sender
        self.endpoints[id(channel), instance, member, SEND] = sender
        self.endpoints[id(channel), instance, member, RECV] = receiver

    def _add_switch(self, channel) -> None:
        indices = [len(self.channels[r]) for r in channel.ranks]
        for r, index in zip(channel.ranks, indices):
            self.channels[r].append({"type": "switch", "protocol": "HB", "peers": list(channel.ranks),
                                     "peer_channels": indices})
            self.endpoints[id(channel), 0, 0, r] = index

    def expand(self, operation: Operation, instance: int):
        """(thread block, plan op) for each member of the operation's thread block group, in one instance."""
        if operation.name not in OPS:
            raise VerificationError("program", f"unknown operation {operation.name!r}", src_line=operation.src_line)
        spec = OPS[operation.name]
        group = operation.thread_blocks
        base_tb = instance * self.tb_count[operation.rank]
        for member, tb in enumerate(group):
            op = {"op": operation.name}
            empty = False
            for field, value in operation.args.items():
                if isinstance(value, list):
                    op[field] = [self._ref(c, instance, member, len(group), operation) for c in value]
                else:
                    op[field] = self._ref(value, instance, member, len(group), operation)
                refs = op[field] if isinstance(op[field], list) else [op[field]]
                empty = empty or any(ref["count"] == 0 for ref in refs)
            if operation.channel is not None:
                op["channel"] = self._channel(operation, instance, member)
            if empty:  # this member's share of the chunks is empty: what remains is the part without chunks
                rest = [part for part in spec.fused_from or () if not OPS[part].operands]
                if not rest:
                    continue
                op = {"op": rest[0], "channel": op["channel"]}
            if operation.src_line:
                op["src_line"] = operation.src_line
            yield base_tb + tb, op

    def _channel(self, operation: Operation, instance: int, member: int) -> int:
        channel = operation.channel
        if channel.type == "switch":
            return self.endpoints[id(channel), 0, 0, operation.rank]
        return self.endpoints[id(channel), instance, member, OPS[operation.name].side]

    def _ref(self, chunk: Chunk, instance: int, member: int, group_size: int, operation: Operation) -> dict:
        """The plan reference of ``chunk`` in ``instance``, narrowed to a group member's share."""
        per_block = self.program.buffers[chunk.buffer]["chunks_per_block"]
        index = chunk.index
        if self.instances > 1 and per_block:
            block, within = divmod(chunk.index, per_block)
            if within + chunk.count > per_block:
                raise VerificationError("program", f"{chunk.buffer}[{chunk.index}:{chunk.index + chunk.count}] "
                                                   "crosses a block boundary, so it cannot be replicated",
                                        src_line=operation.src_line)
            index = (block * self.instances + instance) * per_block + within
        low = member * chunk.count // group_size
        high = (member + 1) * chunk.count // group_size
        return {"buffer": chunk.buffer, "index": index + low, "count": high - low}
