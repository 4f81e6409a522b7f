"""What ``auto`` runs in a kernel record's virtual-rank cells, against the fastest algorithm of each cell.

A virtual:N setting is N ranks of one process sharing one GPU and reaching each other's buffers: there the
runtime's choice is the selection's shared-GPU rows (``selection.choose``), an all-pairs or point-to-point
algorithm's blocks run by the protocol rows (``selection.protocol_of``), and a call that then streams as HB runs
in place on the ranks' buffers from the in-place rows' size on (``selection_table.in_place_min_rank_bytes``), as the
call entry decides it (kernels/collectives/in_place.cu, ``in_place_algorithm``: for the sums and dtypes the records
time, on at most ``kDirectPeers`` ranks, 16). ``auto_algorithm`` restates that decision for a cell, and
tests/gpu/test_collectives.py holds it to the call entry's own; ``compare_auto`` finds every cell whose ``auto``
time is more than the threshold over the fastest algorithm the record timed for it.
"""

from __future__ import annotations

from typing import Mapping

from ...collective_specs import SPECS
from .units import format_size

# The algorithms that stream through scratch as HB, which the call entry runs in place between ranks of one
# process (in_place.cu, runs_streaming_hb); the permutation has no kernel in place.
STREAMING_HB = ("1pa_hb", "2pa_hb", "allpairs_hb")
_COLLECTIVE_OF = {spec.name: spec.collective for spec in SPECS.values()}


def auto_algorithm(op: str, size: int, world: int, dtype: str) -> str:
    """The algorithm ``auto`` runs for a cell of ``op`` at ``size`` (nccl-tests' size) in ``dtype`` on ``world``
    virtual ranks (the record's algorithm names: a protocol's variant, ``in_place``)."""
    from ... import selection, selection_table
    from .kernel_record_jax import layout

    collective = _COLLECTIVE_OF[op]
    lay = layout(op, size, world, dtype)
    chosen = selection.choose(collective, "gpu", lay.selection_bytes, None, world, shares_gpu=True)
    runs = selection.protocol_of(chosen, "gpu", lay.block_elems * lay.itemsize, collective=collective, world=world,
                                 shares_gpu=True) or chosen
    if op != "permute" and runs in STREAMING_HB and lay.size >= selection_table.in_place_min_rank_bytes(world):
        return "in_place"
    return runs


def compare_auto(doc: Mapping, threshold: float) -> dict | None:
    """``auto`` against the fastest algorithm of every virtual-rank cell of ``doc`` (op, size, dtype) whose ``auto``
    algorithm was timed: ``{"cells": compared, "slower": [{setting, op, size, dtype, auto, auto_us, fastest,
    fastest_us, ratio}, ...]}`` for those more than ``threshold`` over it; None where the record has no such cell."""
    times: dict = {}
    for row in doc["rows"]:
        if row["kind"] == "virtual" and row["status"] == "ok":
            key = (row["setting"], row["ranks"], row["op"], row["size"], row["dtype"])
            times.setdefault(key, {})[row["algorithm"]] = row["time_us"]
    compared, slower = 0, []
    for (setting, ranks, op, size, dtype), by_algorithm in sorted(times.items()):
        auto = auto_algorithm(op, size, ranks, dtype)
        if auto not in by_algorithm:
            continue
        compared += 1
        fastest = min(by_algorithm, key=by_algorithm.get)
        ratio = by_algorithm[auto] / by_algorithm[fastest]
        if ratio > 1 + threshold:
            slower.append({"setting": setting, "op": op, "size": size, "dtype": dtype, "auto": auto,
                           "auto_us": by_algorithm[auto], "fastest": fastest, "fastest_us": by_algorithm[fastest],
                           "ratio": ratio})
    return {"cells": compared, "slower": slower, "threshold": threshold} if compared else None


def format_auto(cmp: Mapping | None) -> list[str]:
    """The comparison's lines: a summary, then an ``AUTO SLOWER`` line per cell."""
    if cmp is None:
        return ["# auto: no virtual-rank cell whose auto algorithm was timed"]
    lines = [f"# auto against the fastest algorithm of each virtual-rank cell: {cmp['cells']} cells compared, "
             f"{len(cmp['slower'])} more than {cmp['threshold'] * 100:.0f} % slower"]
    for s in cmp["slower"]:
        lines.append(f"AUTO SLOWER {s['setting']} {s['op']} {format_size(s['size'])} {s['dtype']}: auto runs "
                     f"{s['auto']} {s['auto_us']:.1f} us, {s['fastest']} {s['fastest_us']:.1f} us ({s['ratio']:.2f}x)")
    return lines
