"""Operation fusion: merge chains of one thread block into single plan operations, as the op table allows
(ops.py: ``reduction``, ``fuses_into``, ``fused_from``).

Four rewrites, each only across operations with no intervening access to the chunks involved (barriers do
not count: they are placed afterwards). With the current table they are:

* sources: ``read_packets(T <- S)`` ... ``reduce(D <- [.., T, ..])`` -> ``reduce_packets(D <- [..],
  packet_srcs=[S])`` when scratch chunk T is a temporary: the reduction is its only reader anywhere in the
  plan. The packets are then unpacked into registers instead of a round trip through T.
* chains: ``reduce(T <- [a, b, ..])`` ... ``reduce(D <- [T, c, ..])`` -> ``reduce(D <- [a, b, .., c, ..])`` when
  T is the second's first source, only waits come between them (the first reduction moves after them: it only
  starts later), and T is either a scratch temporary as above or D itself (an accumulation in place, which no one
  can see between the two without a signal) and the second's other sources do not name it. The order of the
  reduction is unchanged: the same result bit for bit, but for 16-bit floats, which the executor rounds once a
  reduction rather than once a link. A chain of reductions (MSCCLang's ``c = c.reduce(...)``, one source at a
  time, through temporaries or in place) becomes one pass over its sources. The first may itself be a fused
  reduction that reads packets (``reduce_packets``, which adds them after its plain sources) and sends nothing;
  the second then has no plain source but T, so that the order stays the chain's: MSCCL++'s accumulation of the
  peers' packets into the output, one peer at a time, becomes one ``reduce_packets`` over all of them. The
  first may also be a ``copy`` (a reduction of one source): a copy of the input into the output that a
  reduction in place then accumulates into reads the input where it is. The sources of the second are folded
  first: the operation that fills one may come between the two.
* destinations: ``reduce(D <- ...)`` followed by puts of exactly D, with nothing but signals between them ->
  ``reduce_put`` (HB memory channels) or ``reduce_packets`` with ``remotes`` (LL memory channels), then those
  signals in their order: the result goes to the peers from registers. A put moved before a signal on another
  channel only lands sooner (no wait comes between, so nothing its destination's readiness depends on is
  passed), and one moved before its own channel's signal is published by it too. Port channels are left alone
  (no reduction sends over them): their DMA reads memory, so the local write is needed anyway.
* pairs: ``put`` immediately followed by ``signal`` on the same channel -> ``put_with_signal``.

The fused reduction is the first reduction of the table that holds all its entries (ops.py); when none does,
the operations stay apart.
"""

from __future__ import annotations

from collections import Counter

from .access import chunk_keys, op_accesses
from .ops import (BARRIER_OP, COPY_OP, FUSED_PAIRS, READ, REDUCTIONS, SIGNAL_OP, VIA, WAIT_OP, WRITE, Operand,
                  spec_of)


def fuse_plan(plan: dict) -> None:
    """Rewrite every thread block of ``plan`` in place."""
    readers = _reader_counts(plan)
    for rank, rank_plan in enumerate(plan["ranks"]):
        channels = rank_plan["channels"]
        for block in rank_plan["threadblocks"]:
            # Barriers are re-derived after fusion (barriers.py): they neither block nor survive it.
            ops = [op for op in block["ops"] if op["op"] != BARRIER_OP]
            ops = _fold_sources(ops, rank, channels, readers)
            ops = _fold_destinations(ops, channels)
            block["ops"] = _fold_pairs(ops)


def _reader_counts(plan: dict) -> Counter:
    """Chunk key -> number of operations in the whole plan that read it."""
    readers = Counter()
    for rank, rank_plan in enumerate(plan["ranks"]):
        for block in rank_plan["threadblocks"]:
            for op in block["ops"]:
                reads, _ = op_accesses(op, rank, rank_plan["channels"])
                readers.update(set(reads))
    return readers


# Reductions and their entries ---------------------------------------------------------------------------

def _target(op: dict) -> Operand | None:
    """The VIA operand of the reductions that ``op`` can become an entry of (ops.py, ``fuses_into``), or None.
    A read operand takes an operation ``dst <- src`` that fills a temporary; a written one an operation that
    sends the reduction's result."""
    field = spec_of(op["op"]).fuses_into
    if field is None:
        return None
    return next(reduction.operand(field) for reduction in REDUCTIONS if reduction.operand(field))


def _entry(op: dict, operand: Operand) -> tuple[dict, bool]:
    """The entry of ``operand`` that ``op`` becomes, with whether its chunk carries packets."""
    key = operand.entry_key
    return {"channel": op["channel"], key: op[key]}, spec_of(op["op"]).operand(key).packets


def _entries(reduction: dict) -> dict[str, list[tuple[dict, bool]]]:
    """The VIA entries of a reduction, by field, each with whether its chunk carries packets."""
    return {operand.field: [(entry, operand.packets) for entry in reduction[operand.field]]
            for operand in spec_of(reduction["op"]).operands if operand.shape == VIA}


def _holds(spec, entries: dict, channels: list) -> bool:
    for operand in spec.operands:
        if operand.shape == VIA and len(entries.get(operand.field, [])) < operand.min_entries:
            return False
    for field, items in entries.items():
        operand = spec.operand(field)
        if items and (operand is None or operand.shape != VIA):
            return False
        for entry, packets in items:
            channel = channels[entry["channel"]]
            if packets != operand.packets or (channel["type"], channel["protocol"]) not in spec.channel_kinds:
                return False
    return True


def _reduction(origin: dict, srcs: list, entries: dict, channels: list) -> dict | None:
    """The reduction of ``origin``'s destination over ``srcs`` with ``entries``, named after the first
    reduction of the table that holds them; None when none does."""
    spec = next((spec for spec in REDUCTIONS if _holds(spec, entries, channels)), None)
    if spec is None:
        return None
    fused = {"op": spec.name}
    for operand in spec.operands:
        if operand.shape == VIA:
            fused[operand.field] = [entry for entry, _ in entries.get(operand.field, [])]
        else:
            fused[operand.field] = srcs if operand.field == "srcs" else origin[operand.field]
    if "src_line" in origin:
        fused["src_line"] = origin["src_line"]
    return fused


# The three rewrites -------------------------------------------------------------------------------------

def _fold_sources(ops: list, rank: int, channels: list, readers: Counter) -> list:
    out: list = []  # absorbed operations become None until the end
    for op in ops:
        if spec_of(op["op"]).reduction:
            op = _absorb_sources(op, out, rank, channels, readers)
        out.append(op)
    return [op for op in out if op is not None]


def _absorb_sources(reduction: dict, out: list, rank: int, channels: list, readers: Counter) -> dict:
    """``reduction`` with the operations that feed its sources folded in (the sources and chains rewrites), or
    ``reduction`` itself when no reduction of the table holds the result. The sources after the first are
    folded first: a chain's feeder may be followed by the operations that fill them."""
    absorbed = []

    def absorb(position: int) -> dict:
        feeder = out[position]
        absorbed.append((position, feeder))
        out[position] = None
        return feeder

    folded = [None] * len(reduction["srcs"])  # per source: the entry it became, or None while plain
    for i, src in enumerate(reduction["srcs"][1:], start=1):
        position = _feeding_source(src, out, rank, channels, readers)
        if position is not None:
            feeder = absorb(position)
            target = _target(feeder)
            folded[i] = (target.field, _entry(feeder, target))
    srcs = [src for src, entry in zip(reduction["srcs"], folded) if entry is None]
    own = _entries(reduction)
    added = [entry for entry in folded if entry is not None]
    reads = {field for field, items in own.items() if items} | {field for field, _ in added}
    reads = {field for field in reads if _access(field) == READ}
    chain = _feeding_reduction(reduction, len(srcs), reads, out, rank, channels, readers)
    if chain is not None:
        feeder = absorb(chain)
        srcs = _fills(feeder) + srcs[1:]
        first = _entries(feeder)
        own = {field: first.get(field, []) + own.get(field, []) for field in first.keys() | own.keys()}
    else:
        position = _feeding_source(reduction["srcs"][0], out, rank, channels, readers)
        if position is not None:
            feeder = absorb(position)
            target = _target(feeder)
            added.insert(0, (target.field, _entry(feeder, target)))
            srcs = srcs[1:]
    entries = dict(own)
    for field, entry in added:
        entries[field] = entries.get(field, []) + [entry]
    fused = _reduction(reduction, srcs, entries, channels) if absorbed else None
    if fused is None:
        for position, feeder in absorbed:
            out[position] = feeder
        return reduction
    return fused


def _is_temporary(ref: dict, rank: int, readers: Counter) -> bool:
    """Whether ``ref`` is a scratch chunk that a single operation in the whole plan reads."""
    return ref["buffer"] == "scratch" and all(readers[key] == 1 for key in chunk_keys(rank, ref))


def _last_access(ref: dict, out: list, rank: int, channels: list) -> int | None:
    """Position in ``out`` of the last operation that reads or writes ``ref``'s chunks, or None."""
    keys = set(chunk_keys(rank, ref))
    for position in range(len(out) - 1, -1, -1):
        op = out[position]
        if op is not None and keys & set().union(*op_accesses(op, rank, channels)):
            return position
    return None


def _feeding_source(temp: dict, out: list, rank: int, channels: list, readers: Counter) -> int | None:
    """Position in ``out`` of the operation whose only purpose is to fill ``temp`` for the reduction being
    built, and that can become one of its source entries; or None."""
    if not _is_temporary(temp, rank, readers):
        return None
    position = _last_access(temp, out, rank, channels)
    if position is None:
        return None
    op = out[position]
    target = _target(op)
    if target is None or target.access != READ or op["dst"] != temp:
        return None
    slot_keys = set(chunk_keys(rank, op["src"]))
    between = [o for o in out[position + 1:] if o is not None]
    if any(slot_keys & set(op_accesses(o, rank, channels)[1]) for o in between):
        return None
    return position


def _feeding_reduction(reduction: dict, plain_sources: int, reads: set[str], out: list, rank: int, channels: list,
                       readers: Counter) -> int | None:
    """Position in ``out`` of a reduction or copy that fills T, the first source of ``reduction``, for it alone,
    with only waits after it (besides the operations already folded into ``reduction``); or None. T is a scratch
    temporary nothing else reads, or ``reduction``'s own destination (an accumulation in place: with no signal in
    between, no one else may see the value between the two) that its other sources do not name.
    ``plain_sources``: how many of ``reduction``'s sources are still plain; ``reads``: the fields of its read
    entries (``_chains_in_order``)."""
    temp = reduction["srcs"][0]
    if temp == reduction["dst"]:
        temp_keys = set(chunk_keys(rank, temp))
        if any(temp_keys & set(chunk_keys(rank, src)) for src in reduction["srcs"][1:]):
            return None
    elif not _is_temporary(temp, rank, readers):
        return None
    position = _last_access(temp, out, rank, channels)
    if position is None or _fills(out[position]) is None or out[position]["dst"] != temp:
        return None
    if any(o is not None and o["op"] != WAIT_OP for o in out[position + 1:]):
        return None
    if not _chains_in_order(out[position], plain_sources, reads):
        return None
    return position


def _fills(op: dict) -> list | None:
    """The plain sources from which ``op`` computes its destination on its own rank: a reduction's ``srcs``, a
    copy's ``[src]``; None for any other operation."""
    if spec_of(op["op"]).reduction:
        return op["srcs"]
    return [op["src"]] if op["op"] == COPY_OP else None


def _chains_in_order(feeder: dict, plain_sources: int, reads: set[str]) -> bool:
    """Whether ``feeder``'s sources and entries may go first in one reduction with the one it feeds, which has
    ``plain_sources`` plain sources (the fed one first) and read entries of the fields ``reads``. The feeder sends
    nothing (no written entries); when it has read entries (packet sources, which a reduction adds after its
    plain sources), the one it feeds has no plain source but the fed one and its read entries are of the same
    single field, so that the fused order is the chain's: the feeder's plain sources, its entries, then the
    others'."""
    if _via_fields(feeder, WRITE):
        return False
    feeder_reads = _via_fields(feeder, READ)
    return not feeder_reads or (plain_sources == 1 and len(feeder_reads) == 1 and reads <= feeder_reads)


def _via_fields(op: dict, access) -> set[str]:
    """The fields of ``op``'s entries of ``access`` that are not empty."""
    return {operand.field for operand in spec_of(op["op"]).operands
            if operand.shape == VIA and operand.access == access and op.get(operand.field)}


def _access(field: str):
    """Whether the entries of ``field`` are read or written, from the reductions of the op table."""
    return next(spec.operand(field).access for spec in REDUCTIONS if spec.operand(field))


def _fold_destinations(ops: list, channels: list) -> list:
    out, i = [], 0
    while i < len(ops):
        op = ops[i]
        i += 1
        if not spec_of(op["op"]).reduction:
            out.append(op)
            continue
        fused, entries, passed = op, _entries(op), []  # passed: the signals the folded puts moved before
        j = i
        while j < len(ops):
            if ops[j]["op"] == SIGNAL_OP:
                j += 1
                continue
            target = _target(ops[j])
            if target is None or target.access != WRITE or ops[j]["src"] != op["dst"]:
                break
            more = {**entries, target.field: entries.get(target.field, []) + [_entry(ops[j], target)]}
            candidate = _reduction(op, op["srcs"], more, channels)
            if candidate is None:
                break
            fused, entries = candidate, more
            passed += [signal for signal in ops[i:j] if signal["op"] == SIGNAL_OP]
            i = j = j + 1
        out.append(fused)
        out.extend(passed)
    return out


def _fold_pairs(ops: list) -> list:
    """A fused pair keeps the first operation's fields (the second contributes its channel only)."""
    out: list = []
    for op in ops:
        previous = out[-1] if out else None
        fused = FUSED_PAIRS.get((previous["op"], op["op"])) if previous is not None else None
        if fused is not None and previous["channel"] == op["channel"]:
            out[-1] = {**previous, "op": fused}
            continue
        out.append(op)
    return out
