"""Copy forwarding: a foreign receive's copy out of its slot, taken out where its readers can read the slot.

A foreign receive lands in a scratch slot of its own and is then copied where the foreign plan put it
(``msccl_ir.py``: ``r`` with ``proto="Simple"`` is ``wait`` then ``copy(dst <- slot)``); MSCCL's interpreter does the
same through its connection buffers. Where the destination is a scratch chunk that only serves later reads, those
reads can read the slot directly and the copy goes: one pass over the data fewer. ``forward_copies`` does that for
every such copy of a lowered plan at once: each read that sees a copy's write for all its chunks (the verifier's
symbolic run says which, ``verify.writers_of_reads``) names the copy's source instead, and the copy is dropped when
no read of what it wrote is left. The waits and signals around it stay, so every read keeps the order it had after
the copy's source was written. The result must verify; where it does not (a source overwritten before a reader
gets to it), the plan is returned unchanged.
"""

from __future__ import annotations

import copy

from ..access import placed_refs, with_ref
from ..errors import VerificationError
from ..ops import LOCAL
from ..verify import verify_plan, writers_of_reads


def forward_copies(plan: dict) -> dict:
    """``plan`` with its local copies into scratch forwarded to their readers (module docstring). A copy of what
    another copy wrote is forwarded once that one is gone, on the next pass."""
    while True:
        forwarded = _forward_once(plan)
        if forwarded is plan:
            return plan
        plan = forwarded


def _forward_once(plan: dict) -> dict:
    log = writers_of_reads(plan)
    copies = {(rank, tb, index): op for rank, rank_plan in enumerate(plan["ranks"])
              for tb, block in enumerate(rank_plan["threadblocks"]) for index, op in enumerate(block["ops"])
              if op["op"] == "copy" and op["dst"]["buffer"] == "scratch"}
    # A copy whose source another copy wrote waits for a later pass, so that no read is sent to a chunk that
    # nothing writes any more.
    copies = {at: op for at, op in copies.items()
              if not any(w is not None and (w.rank, w.threadblock, w.index) in copies for w in log[(*at, ("src",))])}
    renames, kept = {}, set()  # read (rank, tb, index, path) -> its new reference; copies a read still needs
    for (rank, tb, index, path), writers in log.items():
        sources = {(w.rank, w.threadblock, w.index) if w is not None else None for w in writers}
        forwarded = sources & copies.keys()
        if not forwarded:
            continue
        writer = next(iter(forwarded))
        reader = plan["ranks"][rank]["threadblocks"][tb]["ops"][index]
        place = next(place for place in placed_refs(reader, rank, plan["ranks"][rank]["channels"])
                     if place.path == path)
        source = _source_of(place.ref, copies[writer]) if len(sources) == 1 and place.rank == rank == writer[0] \
            and place.operand.place == LOCAL else None
        if source is None:
            kept |= forwarded
        else:
            renames[rank, tb, index, path] = source
    dropped = copies.keys() - kept
    if not dropped:
        return plan
    forwarded_plan = copy.deepcopy(plan)
    for (rank, tb, index, path), source in renames.items():
        ops = forwarded_plan["ranks"][rank]["threadblocks"][tb]["ops"]
        ops[index] = with_ref(ops[index], path, source)
    for rank, rank_plan in enumerate(forwarded_plan["ranks"]):
        for tb, block in enumerate(rank_plan["threadblocks"]):
            block["ops"] = [op for index, op in enumerate(block["ops"]) if (rank, tb, index) not in dropped]
    try:
        return verify_plan(forwarded_plan)
    except VerificationError:
        return plan


def _source_of(ref: dict, copy_op: dict) -> dict | None:
    """The chunks of ``copy_op``'s source that ``ref``, inside its destination, was copied from; None where
    ``ref`` is not wholly inside it."""
    dst, src = copy_op["dst"], copy_op["src"]
    offset = ref["index"] - dst["index"]
    if ref["buffer"] != dst["buffer"] or offset < 0 or offset + ref["count"] > dst["count"]:
        return None
    return {"buffer": src["buffer"], "index": src["index"] + offset, "count": ref["count"]}
