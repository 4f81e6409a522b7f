"""The kernel record without a GPU: the plan under a budget, the record's schema, the comparison and its flags,
finding the previous record, the comparison with the best of the records (the collectives bench's virtual-rank
records among them, the committed floor read as kernel-record cells), attributing profiled kernels to their runs
(a trace in the profiler's own format), the deadline, the command line end to end on CPU devices (a valid record,
compared with a previous one and with the best), and the virtual-ranks tool's kernel list and default plan
(bench/kernels/kernel_record.py)."""

import gzip
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jax_mscclpp.tools.bench import kernel_record_base as kr
from jax_mscclpp.tools.bench import kernel_record_jax as krj
from jax_mscclpp.tools.bench.units import parse_sizes

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "bench" / "kernels" / "kernel_record.py"
SIZES = parse_sizes(kr.DEFAULT_SIZES)


def cells(settings=("virtual:2", "virtual:8"), algorithms=("a", "b", "c"), sizes=SIZES, op="all_reduce"):
    return [kr.Cell(kr.Setting.parse(s), op, a, size, "bfloat16") for s in settings for a in algorithms
            for size in sizes]


def ok_row(cell, us, spread=0.01, source="cuda_events", memcpy=None, ranks_per_gpu=None):
    return kr.new_row(cell, time_source=source, time_us=us, time_min_us=us * (1 - spread),
                      time_max_us=us * (1 + spread), samples=5, memcpy_us=memcpy, ranks_per_gpu=ranks_per_gpu,
                      cost_s=0.5)


def record(rows, date="2026-12-01T00:00:00+00:00", device_kind="NVIDIA H200", gpu_count=1, commit="abc"):
    return {"schema": kr.SCHEMA, "name": kr.DEFAULT_NAME, "date": date, "commit": commit, "commit_dirty": False,
            "machine": {"platform": "gpu", "device_kind": device_kind, "gpu_count": gpu_count},
            "settings": {}, "budget": {"budget_s": 100.0, "estimated_s": 50.0, "elapsed_s": 60.0},
            "setups": {}, "time_sources": dict(kr.TIME_SOURCES), "notes": [], "rows": rows, "comparison": None}


# ----------------------------------------------------------------------------------------------------- planning
def test_size_priority_takes_the_ends_then_the_middle_of_every_gap():
    K, M = 1 << 10, 1 << 20
    assert kr.size_priority(SIZES) == [K, 256 * M, 256 * K, 16 * K, 4 * M, 4 * K, 64 * K, M, 16 * M, 64 * M]
    assert kr.size_priority([4, 1, 4]) == [1, 4]
    assert kr.size_priority([]) == []


def test_a_short_budget_thins_the_sizes_of_every_kernel():
    all_cells = cells()
    the_plan = kr.plan(all_cells, budget_s=18.0, estimate=lambda c: 1.0, setup=lambda s: 0.0)
    assert len(the_plan.kept) == 18 and len(the_plan.skipped) == len(all_cells) - 18
    kernels = {(c.setting, c.algorithm) for c in all_cells}
    for kernel in kernels:  # every kernel keeps the same three sizes: smallest, largest, middle
        assert sorted(c.size for c in the_plan.kept if (c.setting, c.algorithm) == kernel) == sorted(
            kr.size_priority(SIZES)[:3])
    assert the_plan.estimated_s == 18.0
    # Run order: by size priority first, so a run cut short loses the least wanted sizes.
    ranks = [kr.size_priority(SIZES).index(c.size) for c in the_plan.kept]
    assert ranks == sorted(ranks)


def test_the_plan_counts_each_setup_once_and_still_tries_cheaper_cells():
    all_cells = cells(settings=("virtual:2",), algorithms=("cheap", "dear"), sizes=[1024, 4096])
    cost = {"cheap": 1.0, "dear": 50.0}
    the_plan = kr.plan(all_cells, budget_s=13.0, estimate=lambda c: cost[c.algorithm], setup=lambda s: 10.0)
    assert {(c.algorithm, c.size) for c in the_plan.kept} == {("cheap", 1024), ("cheap", 4096)}
    assert the_plan.estimated_s == 12.0
    assert kr.plan(all_cells, 9.0, lambda c: 1.0, lambda s: 10.0).kept == []  # the setup alone does not fit


def test_estimates_come_from_the_previous_record_where_it_has_them():
    class Model(kr.Source):
        kind = "virtual"

        def cell_estimate_s(self, cell):
            return 7.0

        def setup_estimate_s(self, setting):
            return 3.0

    measured, unmeasured = cells(settings=("virtual:2",), algorithms=("a",), sizes=[1024, 4096])
    previous = record([dict(ok_row(measured, 5.0), cost_s=0.25),
                       kr.new_row(unmeasured, "skipped: budget", estimate_s=99.0)])
    previous["setups"] = {"virtual:2": {"setup_s": 1.5}}
    est = kr.Estimates({"virtual": Model()}, previous)
    assert est.cell(measured) == 0.25 and est.cell(unmeasured) == 7.0
    assert est.setup(kr.Setting("virtual", 2)) == 1.5 and est.setup(kr.Setting("virtual", 4)) == 3.0


def test_settings_parse_and_refuse():
    assert kr.Setting.parse("processes:4") == kr.Setting("processes", 4)
    assert kr.Setting("processes", 4).processes == 4 and kr.Setting("virtual", 8).processes == 1
    for bad in ("virtual", "virtual:x", "gpus:2", "devices:0"):
        with pytest.raises(ValueError):
            kr.Setting.parse(bad)


# ------------------------------------------------------------------------------------------------------- rows
def test_a_row_derives_bandwidths_and_the_memcpy_fractions():
    cell = kr.Cell(kr.Setting("virtual", 8), "all_reduce", "2pa_hb", 1 << 20, "bfloat16")
    row = ok_row(cell, 100.0, memcpy=10.0, ranks_per_gpu=8)
    assert set(row) == set(kr.ROW_FIELDS)
    assert row["algbw_gbps"] == pytest.approx((1 << 20) / 100e-6 / 1e9)
    assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * 2 * 7 / 8)
    assert row["of_memcpy"] == pytest.approx(0.1) and row["gpu_of_memcpy"] == pytest.approx(0.8)
    assert kr.new_row(cell, time_us=-1.0, time_min_us=-2.0, time_max_us=1.0, samples=3)["status"] == "below noise"
    assert kr.new_row(cell)["status"] == "error: no time measured"
    skipped = kr.new_row(cell, "skipped: budget")
    assert skipped["algbw_gbps"] is None and skipped["time_us"] is None
    with pytest.raises(TypeError):
        kr.new_row(cell, speed=1.0)


def test_validate_accepts_a_record_and_names_what_is_wrong():
    a, b = cells(settings=("virtual:2",), algorithms=("1pa_ll",), sizes=[1024, 4096])
    good = record([ok_row(a, 5.0), kr.new_row(b, "skipped: deadline")])
    assert kr.validate(good) == []
    assert kr.validate(json.loads(json.dumps(good))) == []
    assert kr.validate([]) == ["a record is a JSON object"]
    broken = json.loads(json.dumps(good))
    broken["rows"][0]["time_us"] = None
    broken["rows"].append(dict(broken["rows"][1]))
    del broken["machine"]["gpu_count"]
    broken["date"] = "yesterday"
    problems = kr.validate(broken)
    assert any("status ok without a positive time_us" in p for p in problems)
    assert any("a second row" in p for p in problems)
    assert any("machine.gpu_count" in p for p in problems)
    assert any("ISO 8601" in p for p in problems)
    unknown = json.loads(json.dumps(good))
    unknown["rows"][0]["time_source"] = "stopwatch"
    unknown["rows"][1]["op"] = "broadcast"
    problems = kr.validate(unknown)
    assert any("stopwatch" in p for p in problems) and any("broadcast" in p for p in problems)


# ------------------------------------------------------------------------------------------------- comparison
def test_the_comparison_flags_kernels_more_than_the_threshold_slower():
    cs = cells(settings=("virtual:8",), algorithms=("2pa_hb",), sizes=[1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18])
    old = record([ok_row(c, 100.0, memcpy=10.0) for c in cs] + [ok_row(cells(algorithms=("gone",))[0], 5.0)])
    new_times = [111.0, 109.0, 80.0, 100.0, 100.0]
    new_rows = [ok_row(c, t, memcpy=10.0) for c, t in zip(cs, new_times)]
    new_rows[3] = ok_row(cs[3], 300.0, source="profiler")  # another time source: not compared
    new_rows[4] = kr.new_row(cs[4], "skipped: budget")
    extra = ok_row(cells(algorithms=("fresh",))[0], 1.0)
    cmp = kr.compare(record(new_rows + [extra]), old, threshold=0.10)
    assert [e["key"][3] for e in cmp["slower"]] == [1 << 10]
    assert cmp["slower"][0]["ratio"] == pytest.approx(1.11) and cmp["slower"][0]["beyond_spread"]
    assert [e["key"][3] for e in cmp["faster"]] == [1 << 14]
    assert cmp["compared"] == 3
    assert [e["key"][3] for e in cmp["time_source_changed"]] == [1 << 16]
    missing = {tuple(e["key"]): e["status"] for e in cmp["missing"]}
    assert missing[cs[4].key] == "skipped: budget" and missing[cells(algorithms=("gone",))[0].key] == "not asked for"
    assert cmp["new"] == [list(extra_key) for extra_key in [kr.row_key(extra)]]
    assert cmp["memcpy_ratio"] == {"virtual:8": pytest.approx(1.0)}
    lines = kr.format_comparison(cmp)
    assert any(line.startswith("SLOWER virtual:8 all_reduce/2pa_hb 1K bfloat16: 100.0 -> 111.0 us (+11 %)")
               for line in lines)
    assert not any("16K" in line for line in lines if line.startswith("SLOWER"))
    # A slowdown inside the samples' spread is flagged and marked so.
    wide = kr.compare(record([ok_row(cs[0], 120.0, spread=0.3)]), record([ok_row(cs[0], 100.0, spread=0.3)]))
    assert wide["slower"] and not wide["slower"][0]["beyond_spread"]
    assert "(within the samples' spread)" in kr.format_comparison(wide)[1]


def test_a_changed_memcpy_reference_is_called_out():
    c = cells(algorithms=("a",), sizes=[1024])[0]
    cmp = kr.compare(record([ok_row(c, 10.0, memcpy=2.0)]), record([ok_row(c, 10.0, memcpy=1.0)]))
    assert cmp["memcpy_ratio"]["virtual:2"] == pytest.approx(2.0)
    assert any("memcpy reference itself changed by +100 %" in line for line in kr.format_comparison(cmp))


def test_the_previous_record_is_the_newest_of_the_name_and_machine(tmp_path):
    c = cells(algorithms=("a",), sizes=[1024])[0]
    files = {
        "kernel-record-old.json": record([ok_row(c, 1.0)], date="2026-11-01T00:00:00+00:00"),
        "kernel-record-new.json": record([ok_row(c, 1.0)], date="2026-12-01T00:00:00+00:00"),
        "kernel-record-x8.json": record([ok_row(c, 1.0)], date="2026-12-05T00:00:00+00:00", gpu_count=8),
        "kernel-record-other-schema.json": {"schema": "jax_mscclpp.bench/1", "date": "2027-01-01"},
        "bench-kernel-record.json": record([ok_row(c, 1.0)], date="2027-01-01T00:00:00+00:00"),
    }
    for name, doc in files.items():
        (tmp_path / name).write_text(json.dumps(doc))
    (tmp_path / "kernel-record-broken.json").write_text("{")
    h200 = ("gpu", "NVIDIA H200", 1)
    assert kr.find_previous(str(tmp_path), "kernel-record", h200) == str(tmp_path / "kernel-record-new.json")
    assert kr.find_previous(str(tmp_path), "kernel-record", ("gpu", "NVIDIA H200", 8)).endswith("x8.json")
    assert kr.find_previous(str(tmp_path), "kernel-record", h200,
                            exclude=[str(tmp_path / "kernel-record-new.json")]).endswith("old.json")
    assert kr.find_previous(str(tmp_path), "kernel-record", ("cpu", "cpu", 0)) is None
    assert kr.find_previous(str(tmp_path / "kernel-record-x8.json"), "anything", h200).endswith("x8.json")
    assert kr.find_previous(str(tmp_path / "absent"), "kernel-record") is None


def test_record_paths_do_not_overwrite(tmp_path):
    doc = record([], date="2026-12-03T10:20:30+00:00")
    first = kr.record_path(str(tmp_path), "kernel-record", doc)
    assert first == str(tmp_path / "kernel-record-nvidia-h200-2026-12-03.json")
    kr.write_record(doc, first)
    assert kr.record_path(str(tmp_path), "kernel-record", doc).endswith("-2026-12-03-102030.json")
    assert kr.load_record(first)["date"] == doc["date"]
    (tmp_path / "bad.json").write_text(json.dumps({"schema": kr.SCHEMA}))
    with pytest.raises(ValueError, match="not a kernel record"):
        kr.load_record(str(tmp_path / "bad.json"))


# ---------------------------------------------------------------------------------------------- the best
def test_the_best_of_several_records_is_the_fastest_per_cell_and_names_its_record():
    a, b = cells(settings=("virtual:2",), algorithms=("2pa_hb",), sizes=[1024, 4096])
    first = dict(record([ok_row(a, 10.0), ok_row(b, 50.0)], date="2026-11-01T00:00:00+00:00", commit="aaa"),
                 path="first.json")
    second = dict(record([ok_row(a, 12.0), ok_row(b, 40.0)], date="2026-11-15T00:00:00+00:00", commit="bbb"),
                  path="second.json")
    third = dict(record([ok_row(a, 11.0), kr.new_row(b, "skipped: budget")], date="2026-12-01T00:00:00+00:00",
                        commit="ccc"), path="third.json")
    best = kr.fastest_rows([first, second, third])
    assert best[(a.key, "cuda_events")][0]["time_us"] == 10.0 and best[(a.key, "cuda_events")][1] is first
    assert best[(b.key, "cuda_events")][0]["time_us"] == 40.0 and best[(b.key, "cuda_events")][1] is second
    cmp = kr.compare_best(record([ok_row(a, 10.5), ok_row(b, 41.0)]), [first, second, third])
    assert cmp["compared"] == 2 and cmp["slower"] == [] and cmp["faster"] == []
    assert [r["commit"] for r in cmp["best_of"]] == ["aaa", "bbb", "ccc"]
    cmp = kr.compare_best(record([ok_row(a, 20.0), ok_row(b, 80.0)]), [first, second, third])
    slower = {tuple(e["key"]): e for e in cmp["slower"]}
    assert (slower[a.key]["old_us"], slower[a.key]["best_path"], slower[a.key]["best_commit"],
            slower[a.key]["best_date"]) == (10.0, "first.json", "aaa", "2026-11-01T00:00:00+00:00")
    assert (slower[b.key]["old_us"], slower[b.key]["best_commit"]) == (40.0, "bbb")


def test_a_cell_slower_than_the_best_but_equal_to_the_newest_is_flagged():
    c = cells(settings=("virtual:8",), algorithms=("1pa_ll",), sizes=[1 << 20])[0]
    older = dict(record([ok_row(c, 100.0)], date="2026-11-01T00:00:00+00:00", commit="fast"), path="older.json")
    newest = dict(record([ok_row(c, 115.0)], date="2026-12-01T00:00:00+00:00", commit="slow"), path="newest.json")
    new = record([ok_row(c, 115.0)], date="2026-12-05T00:00:00+00:00")
    assert kr.compare(new, newest)["slower"] == []
    cmp = kr.compare_best(new, [older, newest])
    (entry,) = cmp["slower"]
    assert entry["ratio"] == pytest.approx(1.15) and entry["best_commit"] == "fast" and entry["beyond_spread"]
    lines = kr.format_comparison(cmp)
    assert lines[0].startswith("# against the best of 2 records of this machine: 1 cells compared, 1 more than 10 %")
    assert "#   older.json (2026-11-01T00:00:00+00:00, commit fast)" in lines
    assert ("SLOWER virtual:8 all_reduce/1pa_ll 1M bfloat16: 100.0 -> 115.0 us (+15 %) against the best, commit "
            "fast of 2026-11-01") in lines


def test_auto_is_held_to_the_fastest_algorithm_of_each_virtual_cell(tmp_path):
    """compare_auto flags a virtual-rank cell where the algorithm auto runs there (the selection's shared-GPU rows,
    the protocol rows and the in-place rule) is more than the threshold over the cell's fastest, names both, and
    leaves cells of other settings alone; --compare prints it and exits 1."""
    from jax_mscclpp.tools.bench.kernel_record_auto import auto_algorithm, compare_auto

    small, large = 1 << 10, 1 << 26
    auto_small, auto_large = (auto_algorithm("all_gather", size, 8, "float32") for size in (small, large))
    assert auto_small == "allpairs_ll" and auto_large == "in_place"  # LL packets; in place between ranks of a process
    rows = []
    for setting in ("virtual:8", "devices:8"):
        for size, auto, auto_us in ((small, auto_small, 12.5), (large, auto_large, 10.0)):
            for algorithm in ("allpairs", "allpairs_ll", "allpairs_hb", "in_place"):
                cell = kr.Cell(kr.Setting.parse(setting), "all_gather", algorithm, size, "float32")
                rows.append(ok_row(cell, auto_us if algorithm == auto else 10.0))
    doc = record(rows)
    got = compare_auto(doc, 0.10)
    assert got["cells"] == 2
    (flagged,) = got["slower"]
    assert (flagged["setting"], flagged["size"], flagged["auto"], flagged["auto_us"], flagged["fastest_us"]) == (
        "virtual:8", small, auto_small, 12.5, 10.0)
    assert compare_auto(doc, 0.30)["slower"] == []
    path = tmp_path / "record.json"
    path.write_text(json.dumps(doc))
    proc = tool("--compare", str(path), "--previous", "none", "--best", "none")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "AUTO SLOWER virtual:8 all_gather 1K float32: auto runs allpairs_ll 12.5 us" in proc.stdout


def collectives_bench_doc(nranks=4, gpu="NVIDIA H200", gpu_count=1, rows=None,
               timing="CUDA graph of `repeats` calls per rank, events on rank 0, median of 3 replays"):
    """A record as bench/kernels/collectives.py writes it (float32; bytes and count as it computes them)."""
    if rows is None:
        rows = []
        for op, algorithm, nbytes, us in (("all_reduce", "2pa_hb", 1 << 10, 5.0), ("all_gather", "allpairs_hb",
                                          16 << 10, 6.0), ("reduce_scatter", "allpairs", 4 << 20, 70.0),
                                         ("all_to_all", "allpairs_ll", 256 << 10, 9.0), ("all_reduce", "2pa_hb",
                                          32 << 20, 300.0)):
            blocks = 1 if op == "all_reduce" else nranks
            rows.append({"collective": op, "algorithm": algorithm, "bytes": nbytes, "count": nbytes // 4 // blocks,
                         "launches": 1, "repeats": 7, "time_us": us, "algbw_GBps": 1.0, "busbw_GBps": 1.0})
        rows.append({"collective": "permute", "algorithm": "p2p", "bytes": 1 << 10, "count": 256, "repeats": 9,
                     "time_us": 4.0, "algbw_GBps": 0.2, "all_ranks_GBps": 0.8, "of_memcpy": 0.1})
    return {"benchmark": "collectives", "date": "2026-12-04T12:00:00+00:00",
            "machine": {"host": "vm", "gpu": gpu, "gpu_count": gpu_count, "cuda_runtime": 13000},
            "setup": {"nranks": nranks, "ranks_per_gpu": nranks, "dtype": "float32", "op": "sum", "timing": timing},
            "notes": "", "rows": rows}


H200 = ("gpu", "NVIDIA H200", 1)


def test_a_collectives_bench_record_reads_as_virtual_rank_cells(tmp_path):
    path = tmp_path / "collectives-4-virtual-ranks-1234abc-2026-12-04.json"
    path.write_text(json.dumps(collectives_bench_doc()))
    no_commit = tmp_path / "collectives-2026-11-29.json"  # not a name of the pattern: not read
    no_commit.write_text(json.dumps(collectives_bench_doc(nranks=8)))
    (found,) = kr.find_records(str(tmp_path), "kernel-record", H200)
    assert found["commit"] == "1234abc" and found["date"] == "2026-12-04T12:00:00+00:00"
    assert found["path"] == str(path) and kr.machine_key(found) == H200
    rows = {kr.row_key(r): r for r in found["rows"]}
    K, M = 1 << 10, 1 << 20
    assert set(rows) == {("virtual:4", "all_reduce", "2pa_hb", K, "float32"),
                         ("virtual:4", "all_gather", "allpairs_hb", 16 * K, "float32"),
                         ("virtual:4", "reduce_scatter", "allpairs", 4 * M, "float32"),
                         ("virtual:4", "all_to_all", "allpairs_ll", 256 * K, "float32"),
                         ("virtual:4", "permute", "p2p", K, "float32")}  # the 32 MiB row is no size of the record
    gather = rows[("virtual:4", "all_gather", "allpairs_hb", 16 * K, "float32")]
    assert (gather["status"], gather["time_source"], gather["time_us"], gather["repeats"]) == ("ok", "cuda_events",
                                                                                               6.0, 7)
    assert gather["time_min_us"] is None and gather["time_max_us"] is None and gather["ranks_per_gpu"] == 4
    assert gather["of_memcpy"] is None  # the bench's own of_memcpy (permute) is another quantity
    # Against such a row there is no samples' spread to be beyond: null.
    new = record([ok_row(kr.Cell(kr.Setting("virtual", 4), "all_gather", "allpairs_hb", 16 * K, "float32"), 7.0)])
    (entry,) = kr.compare_best(new, [found])["slower"]
    assert entry["beyond_spread"] is None and entry["best_commit"] == "1234abc"
    assert "spread" not in [line for line in kr.format_comparison(kr.compare_best(new, [found]))
                            if line.startswith("SLOWER")][0]
    # Timed another way: not read.
    path.write_text(json.dumps(collectives_bench_doc(timing="host wall time")))
    assert kr.find_records(str(tmp_path), "kernel-record", H200) == []


def test_records_of_another_machine_are_not_among_the_best(tmp_path):
    c = kr.Cell(kr.Setting("virtual", 4), "all_reduce", "2pa_hb", 1 << 10, "float32")
    files = {
        "kernel-record-h200.json": record([ok_row(c, 10.0)]),
        "kernel-record-x8.json": record([ok_row(c, 1.0)], gpu_count=8),
        "kernel-record-a100.json": record([ok_row(c, 1.0)], device_kind="NVIDIA A100"),
        "collectives-4-virtual-ranks-aaaaaaa-2026-12-04.json": collectives_bench_doc(gpu_count=8),
        "collectives-4-virtual-ranks-bbbbbbb-2026-12-04.json": collectives_bench_doc(gpu="NVIDIA A100"),
        "collectives-4-virtual-ranks-ccccccc-2026-12-04.json": collectives_bench_doc(),
    }
    for name, doc in files.items():
        (tmp_path / name).write_text(json.dumps(doc))
    found = kr.find_records(str(tmp_path), "kernel-record", H200)
    assert sorted(os.path.basename(r["path"]) for r in found) == [
        "collectives-4-virtual-ranks-ccccccc-2026-12-04.json", "kernel-record-h200.json"]
    (entry,) = kr.compare_best(record([ok_row(c, 12.0)]), found)["slower"]
    assert entry["old_us"] == 5.0 and entry["best_commit"] == "ccccccc"
    assert kr.find_records(str(tmp_path), "kernel-record", ("gpu", "NVIDIA H200", 8))[0]["path"].endswith("x8.json")
    notes = []
    (tmp_path / "kernel-record-broken.json").write_text(json.dumps({**record([]), "rows": "none"}))
    assert len(kr.find_records(str(tmp_path), "kernel-record", H200, notes=notes)) == 2
    assert len(notes) == 1 and "kernel-record-broken.json is not used" in notes[0]


def test_the_committed_floor_reads_as_kernel_record_cells():
    """The collectives bench's virtual-rank records of 7ba1c30 and 4794fcf in bench/results: every row of a size of
    the record is a cell whose size launch_collective runs with the row's count (bench/kernels/kernel_record.py's
    block_count), the 32 MiB rows are left out, and the records are this H200's."""
    spec = importlib.util.spec_from_file_location("kernel_record_tool_sizes", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    results = ROOT / "bench" / "results"
    floor = sorted(p for commit in ("7ba1c30", "4794fcf")
                   for p in results.glob(f"collectives-*-virtual-ranks-{commit}-2026-12-04.json"))
    assert sorted(p.name.split("-")[1] + p.name.split("-")[4] for p in floor) == [
        "24794fcf", "27ba1c30", "44794fcf", "47ba1c30", "84794fcf", "87ba1c30"]
    for path in floor:
        doc = json.loads(path.read_text())
        n = doc["setup"]["nranks"]
        bench_record = kr.collectives_bench_record(doc, str(path))
        assert kr.machine_key(bench_record) == H200 and bench_record["commit"] == path.name.split("-")[4]
        kept = [r for r in doc["rows"] if r["bytes"] != 32 << 20]
        assert len(bench_record["rows"]) == len(kept) == len(doc["rows"]) * 4 // 5
        for row, original in zip(bench_record["rows"], kept):
            assert (row["setting"], row["op"], row["algorithm"], row["dtype"]) == (
                f"virtual:{n}", original["collective"], original["algorithm"], "float32")
            assert module.block_count(row["op"], row["size"], n, "float32") == original["count"]
            assert row["status"] == "ok" and row["time_us"] == original["time_us"]
    two = json.loads((results / "collectives-2-virtual-ranks-7ba1c30-2026-12-04.json").read_text())
    (time_us,) = [r["time_us"] for r in two["rows"]
                  if (r["collective"], r["algorithm"], r["bytes"]) == ("all_gather", "allpairs_hb", 4 << 20)]
    found = kr.find_records(str(results), kr.DEFAULT_NAME, H200)
    seven = next(r for r in found if r["path"].endswith("collectives-2-virtual-ranks-7ba1c30-2026-12-04.json"))
    rows = {kr.row_key(r): r for r in seven["rows"]}
    assert rows[("virtual:2", "all_gather", "allpairs_hb", 4 << 20, "float32")]["time_us"] == time_us
    legacy = {os.path.basename(r["path"]) for r in found if r["name"] == "collectives"}
    assert {p.name for p in floor} <= legacy  # the floor is read as records
    assert "collectives-2026-11-29.json" not in legacy  # a collectives record without N and commit in its name


# ------------------------------------------------------------------------------------------------- profiles
def write_trace(path, events):
    """A trace as jax.profiler.trace(create_perfetto_trace=True) writes it: metadata, then complete events."""
    meta = [
        {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/device:GPU:0"}},
        {"ph": "M", "pid": 1, "tid": 10, "name": "thread_name", "args": {"name": "Stream #13(compute)"}},
        {"ph": "M", "pid": 1, "tid": 11, "name": "thread_name", "args": {"name": "XLA Ops"}},
        {"ph": "M", "pid": 3, "name": "process_name", "args": {"name": "/device:GPU:1"}},
        {"ph": "M", "pid": 3, "tid": 30, "name": "thread_name", "args": {"name": "Stream #14(compute)"}},
        {"ph": "M", "pid": 2, "name": "process_name", "args": {"name": "/host:CPU"}},
        {"ph": "M", "pid": 2, "tid": 20, "name": "thread_name", "args": {"name": "python"}},
    ]
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": meta + events}, f)


def x(pid, tid, ts, dur, name):
    return {"ph": "X", "pid": pid, "tid": tid, "ts": ts, "dur": dur, "name": name}


def test_profiled_kernels_are_attributed_to_the_run_they_start_in(tmp_path):
    ours = "void jax_mscclpp::collectives::(anonymous namespace)::all_reduce_1pa_ll_kernel(CollectiveContext, Piece)"
    label = krj.ANNOTATION.format("0/0/0")
    other = krj.ANNOTATION.format("0/0/1")
    path = tmp_path / "t.trace.json.gz"
    write_trace(path, [
        x(2, 20, 90.0, 50.0, label), x(2, 20, 200.0, 50.0, other),
        x(1, 10, 100.0, 10.0, ours), x(1, 10, 105.0, 10.0, ours),  # overlapping: 15 us of union
        x(1, 10, 120.0, 5.0, "loop_multiply_fusion"),
        x(1, 11, 100.0, 25.0, "all-reduce.1"),  # the XLA Ops line repeats kernels: not counted
        x(3, 30, 100.0, 30.0, ours),  # another GPU
        x(1, 10, 210.0, 4.0, ours), x(1, 10, 260.0, 4.0, ours),  # the second window; one after it
    ])
    got = krj.window_busy(str(path), [label, other, "absent"])
    assert got[label]["ours_us"] == pytest.approx(15.0) and got[label]["all_us"] == pytest.approx(20.0)
    assert (got[label]["ours_kernels"], got[label]["kernels"]) == (2, 3)
    assert got[label]["names"][0].startswith("void jax_mscclpp::") and "loop_multiply_fusion" in got[label]["names"]
    assert got[other]["ours_us"] == pytest.approx(4.0) and got[other]["ours_kernels"] == 1
    assert got["absent"] is None


# ---------------------------------------------------------------------------------------------- JAX settings
def test_layouts_and_algorithms_of_the_jax_settings():
    assert krj.ring_shift(3) == [(0, 1), (1, 2), (2, 0)]
    lay = krj.layout("permute", 1000, 4, "bfloat16")
    assert (lay.size, lay.in_elems, lay.out_elems) == (1000, 500, 500)
    assert krj.layout("all_gather", 4096, 4, "float32").in_elems == 256
    assert krj.jax_algorithms("all_reduce", "cpu") == ["1pa_ll", "2pa_ll", "1pa_hb", "2pa_hb"]
    assert "2pr" in krj.jax_algorithms("all_reduce", "gpu") and "2ph" not in krj.jax_algorithms("all_reduce", "gpu")
    assert krj.jax_algorithms("permute", "gpu") == ["p2p"]
    opts = krj.Options(steps=3, warmup=1, chain=8, chain_bytes=64 << 20)
    assert [opts.chain_for(s) for s in (1 << 10, 16 << 20, 256 << 20)] == [8, 4, 2]


def test_processes_need_gpus():
    source = krj.ProcessesSource()
    if source.gpus():
        pytest.skip("a GPU is visible here")
    assert "needs GPUs" in source.unavailable(kr.Setting("processes", 2))


def test_cells_past_the_deadline_are_skipped(cpu_devices):
    from jax_mscclpp.tools.bench import programs

    mesh = programs.make_mesh(cpu_devices[:2])
    cs = [{**c.as_dict(), "estimate_s": 1.0} for c in cells(settings=("devices:2",), algorithms=("1pa_ll",),
                                                               sizes=[1024, 4096])]
    rows, _ = krj.measure_on_mesh(mesh, cs, krj.OPTIONS[("devices", "cpu")], time.time() - 1, "bfloat16", None,
                                  log=lambda line: None)
    assert [r["status"] for r in rows] == ["skipped: deadline"] * 2
    rows, _ = krj.measure_on_mesh(mesh, cs[:1], krj.OPTIONS[("devices", "cpu")], time.time() + 600, "bfloat16",
                                  None, log=lambda line: None)
    assert rows[0]["status"] in ("ok", "below noise") and rows[0]["time_source"] == "host"
    assert rows[0]["memcpy_us"] > 0 and rows[0]["repeats"] == 4 and rows[0]["samples"] == 3


def test_a_profile_without_gpu_kernels_turns_to_host_timing(cpu_devices):
    """On CPU the profiler records no device kernels: the memcpy probe finds none, and the cells are host-timed."""
    from jax_mscclpp.tools.bench import programs

    mesh = programs.make_mesh(cpu_devices[:2])
    cs = [{**c.as_dict(), "estimate_s": 1.0} for c in cells(settings=("devices:2",), algorithms=("2pa_hb",),
                                                               sizes=[1024])]
    rows, notes = krj.measure_on_mesh(mesh, cs, krj.OPTIONS[("devices", "cpu")], time.time() + 600, "bfloat16",
                                      None, log=lambda line: None, profile=True)
    assert any("recorded no GPU kernels" in n for n in notes)
    assert rows[0]["time_source"] == "host" and rows[0]["memcpy_us"] > 0


# ----------------------------------------------------------------------------------------------- end to end
def tool(*args, timeout=300, script=None):
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)  # the tool sets the CPU device count itself
    env["JAX_PLATFORMS"] = "cpu"
    env.pop("JAX_MSCCLPP_TUNING_FILE", None)
    cmd = [sys.executable, *([str(script)] if script else ["-m", "jax_mscclpp.tools.bench.kernel_record"]), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)


SMOKE = ["--devices", "2,4", "--sizes", "1K,4K", "--ops", "all_reduce,all_gather,permute", "--algorithms",
         "1pa_ll,allpairs,p2p", "--commit", "0123abc", "--budget", "200"]


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("kernel_record")
    proc = tool(*SMOKE, "--out", str(out), "--previous", "none")
    return proc, out


def test_a_cpu_run_writes_a_valid_record(smoke):
    proc, out = smoke
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (path,) = out.glob("kernel-record-cpu-*.json")
    doc = json.loads(path.read_text())
    assert kr.validate(doc) == []
    assert doc["commit"] == "0123abc" and doc["comparison"] is None and doc["comparison_best"] is None
    assert doc["machine"]["platform"] == "cpu" and doc["machine"]["gpu_count"] == 0
    keys = {(r["setting"], r["op"], r["algorithm"], r["size"]) for r in doc["rows"]}
    assert keys == {(s, op, a, size) for s in ("devices:2", "devices:4") for op, a in
                    (("all_reduce", "1pa_ll"), ("all_gather", "allpairs"), ("permute", "p2p")) for size in (1024, 4096)}
    assert all(r["time_source"] == "host" and r["status"] in ("ok", "below noise") for r in doc["rows"])
    assert set(doc["time_sources"]) == {"host"}
    assert all(r["memcpy_us"] > 0 and r["cost_s"] > 0 for r in doc["rows"])
    assert "no previous record" in proc.stdout and "op/algorithm" in proc.stdout


def test_a_second_run_prints_the_change_and_flags_slower_kernels(smoke, tmp_path):
    _, out = smoke
    (first,) = out.glob("kernel-record-cpu-*.json")
    doc = json.loads(first.read_text())
    for row in doc["rows"]:  # a previous record 100x faster: every kernel is now flagged slower
        if row["status"] == "ok":
            for key in ("time_us", "time_min_us", "time_max_us"):
                row[key] /= 100
    fast = tmp_path / "kernel-record-fast.json"
    fast.write_text(json.dumps(doc))
    proc = tool(*SMOKE, "--out", str(tmp_path), "--previous", str(tmp_path), "--best", str(tmp_path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"# against {fast}" in proc.stdout and "# against the best of 1 records of this machine" in proc.stdout
    slower_lines = [line for line in proc.stdout.splitlines() if line.startswith("SLOWER ")]
    flagged = [line for line in slower_lines if "against the best" not in line]
    assert len(slower_lines) == 2 * len(flagged)
    (second,) = [p for p in tmp_path.glob("kernel-record-cpu-*.json")]
    again = json.loads(second.read_text())
    assert kr.validate(again) == [] and again["comparison"]["previous"] == str(fast)
    # Host timing on CPU devices is noisy: a cell measured in one run may be below noise in the other. Every cell
    # measured in both is compared and flagged; every cell measured before and not now is listed as missing.
    ok_before = {kr.row_key(r) for r in doc["rows"] if r["status"] == "ok"}
    ok_now = {kr.row_key(r) for r in again["rows"] if r["status"] == "ok"}
    assert again["comparison"]["compared"] == len(ok_before & ok_now) > 0
    assert len(flagged) == len(ok_before & ok_now) and "(+" in flagged[0]
    assert {tuple(m["key"]) for m in again["comparison"]["missing"]} == ok_before - ok_now
    assert len(again["comparison"]["slower"]) == len(flagged)
    # The best of the records (here the previous one alone) flags the same cells, naming its record.
    best = again["comparison_best"]
    assert [e["key"] for e in best["slower"]] == [e["key"] for e in again["comparison"]["slower"]]
    assert {e["best_path"] for e in best["slower"]} == {str(fast)} and best["best_of"][0]["path"] == str(fast)
    # --compare measures nothing and prints the same flags, against the previous and against the best.
    proc = tool("--compare", str(second), "--previous", str(fast), "--best", str(tmp_path))
    assert proc.returncode == 1 and proc.stdout.count("SLOWER ") == 2 * len(flagged)
    # --best none: the previous record alone.
    proc = tool("--compare", str(second), "--previous", str(fast), "--best", "none")
    assert proc.returncode == 1 and proc.stdout.count("SLOWER ") == len(flagged)
    assert "against the best" not in proc.stdout
    # Without a previous record, the best of the folder still flags them.
    proc = tool("--compare", str(second), "--previous", "none", "--best", str(tmp_path))
    assert proc.returncode == 1 and proc.stdout.count("SLOWER ") == len(flagged)
    assert all("against the best" in line for line in proc.stdout.splitlines() if line.startswith("SLOWER "))
    proc = tool("--compare", str(second), "--previous", "none", "--best", "none")
    assert proc.returncode == 0 and "SLOWER" not in proc.stdout


def test_a_budget_too_short_for_everything_skips_with_a_note(tmp_path):
    budget = kr.RESERVE_S + 4.0  # about one setup and a cell or two of the CPU model's estimates
    proc = tool("--devices", "2", "--sizes", "1K:1M:4", "--ops", "all_reduce", "--algorithms", "2pa_ll",
                "--budget", str(budget), "--out", str(tmp_path), "--previous", "none")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (path,) = tmp_path.glob("*.json")
    doc = json.loads(path.read_text())
    assert kr.validate(doc) == []
    statuses = [r["status"] for r in doc["rows"]]
    assert len(statuses) == 6 and "skipped: budget" in statuses
    assert set(statuses) <= {"ok", "below noise", "skipped: budget"}
    assert any("left out by the plan" in n for n in doc["notes"])
    assert doc["budget"]["elapsed_s"] < budget


def test_settings_that_cannot_run_here_are_noted(tmp_path):
    proc = tool("--processes", "2", "--virtual-ranks", "2", "--sizes", "1K", "--out", str(tmp_path), "--previous",
                "none", "--budget", "60")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert kr.validate(doc) == [] and doc["rows"] == []
    assert doc["setups"]["processes:2"]["status"].startswith("unavailable: needs GPUs")
    assert "bench/kernels/kernel_record.py" in doc["setups"]["virtual:2"]["status"]


def test_the_dry_run_prints_the_plan():
    proc = tool("--devices", "2", "--sizes", "1K,1M", "--ops", "all_gather", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "devices:2 all_gather/allpairs 1K bfloat16" in proc.stdout
    assert "# 2 of 2 cells planned" in proc.stdout


# ------------------------------------------------------------------------------- bench/kernels/kernel_record.py
@pytest.fixture(scope="module")
def virtual():
    spec = importlib.util.spec_from_file_location("kernel_record_tool_under_test", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    source = module.VirtualRanksSource()
    if source.cuda is None:
        pytest.skip("the GPU test harness module is not built here")
    return module, source


def test_the_virtual_source_times_every_kernel_launch_collective_runs(virtual):
    _, source = virtual
    eight = kr.Setting("virtual", 8)
    assert source.algorithms("all_reduce", eight) == ["1pa_ll", "2pa_ll", "1pa_hb", "2pa_hb", "2pr", "2pa_nvls",
                                                      "in_place"]
    for op in ("all_gather", "reduce_scatter", "all_to_all"):
        assert source.algorithms(op, eight) == ["allpairs", "allpairs_ll", "allpairs_hb", "in_place"]
    assert source.algorithms("permute", eight) == ["p2p", "p2p_ll", "p2p_hb"]
    assert "2pa_nvls" not in source.algorithms("all_reduce", kr.Setting("virtual", 9))  # emulation: 8 at most
    if source.cuda.device_count() == 0:
        assert source.unavailable(eight) == "no GPU here"


def test_the_default_device_plan_keeps_every_kernel_within_one_call(virtual):
    """The recipe's sweep (virtual:2,4,8 and processes:2,4, 1K to 256M) in what one ten-minute device call leaves
    after a build (about 130 s), with no previous record: every kernel of every setting keeps its smallest,
    largest and middle size."""
    _, source = virtual
    sources = {"virtual": source, "processes": krj.ProcessesSource()}
    settings = [kr.Setting("virtual", n) for n in (2, 4, 8)] + [kr.Setting("processes", p) for p in (2, 4)]
    all_cells = kr.cells_of(settings, sources, kr.OPS, SIZES, "bfloat16")
    assert len({(c.setting, c.op, c.algorithm) for c in all_cells}) == 3 * 22 + 2 * 10
    est = kr.Estimates(sources)
    the_plan = kr.plan(all_cells, 420 - 130 - kr.RESERVE_S, est.cell, est.setup)
    assert the_plan.estimated_s <= 420 - 130
    for kernel in {(c.setting, c.op, c.algorithm) for c in all_cells}:
        kept = {c.size for c in the_plan.kept if (c.setting, c.op, c.algorithm) == kernel}
        assert set(kr.size_priority(SIZES)[:3]) <= kept, kernel


def test_the_harness_operands_cover_the_size(virtual):
    module, _ = virtual
    for op, blocks in (("all_reduce", 1), ("all_gather", 4), ("reduce_scatter", 4), ("all_to_all", 4),
                       ("permute", 1)):
        assert module.block_count(op, 1 << 20, 4, "bfloat16") * blocks * 2 == 1 << 20
    lo, hi = module.destination_words(3)
    assert [(lo >> (8 * r)) & 0xFF for r in range(8)] == [1, 2, 0] + [0xFF] * 5 and hi == (1 << 64) - 1


def test_the_tool_without_a_gpu_runs_the_package_settings(tmp_path, virtual):
    _, source = virtual
    if source.cuda.device_count():
        pytest.skip("a GPU is visible here")
    proc = tool("--dry-run", "--sizes", "1K", "--ops", "all_reduce", script=TOOL)
    assert proc.returncode == 0, proc.stderr
    assert "devices:8 all_reduce/1pa_ll 1K bfloat16" in proc.stdout
    proc = tool("--dry-run", "--virtual-ranks", "2", "--sizes", "1K", script=TOOL)
    assert "# virtual:2: not run here: no GPU here" in proc.stdout


def test_the_recipe_is_listed():
    proc = subprocess.run(["bash", str(ROOT / "bench" / "device" / "recipes.sh"), "list"], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "OUT": "/tmp/kernel-record-recipes-list"})
    assert any(line.startswith("kernel_record ") for line in proc.stdout.splitlines()), proc.stdout
