"""bench/device/nccl_clients.py without a GPU: the parsers of nccl-tests' report and of JAX's multi-process launcher
(fed output written in their own formats: nccl-tests' src/util.cu printf formats, jax._src.test_multiprocess's
summary lines), the records, the torch worker's case list and how a launch that ended early is settled, the
bounded runs (a timeout kills the whole process session), the budget, the exit-time counting hooks (against a
stand-in library compiled here), --help and --dry-run."""

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "bench" / "device" / "nccl_clients.py"


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


nc = load(TOOL, "nccl_clients_under_test")
worker = load(ROOT / "bench" / "device" / "_torch_nccl_worker.py", "torch_nccl_worker_under_test")


# ----------------------------------------------------------------------------------------- nccl-tests' report
def header(binary="all_reduce_perf_mpi", ranks=2):
    lines = ["# nccl-tests version 2.19.6 nccl-headers=22809 nccl-library=22809",
             f"# Collective test starting: {binary}",
             "# nThread 1 nGpus 1 minBytes 8 maxBytes 8388608 step: 4(factor) warmup iters: 1 iters: 3 agg iters: 1 "
             "validation: 1 graph: 0 unalign: 0", "#", "# Using devices"]
    lines += [f"#  Rank {r:2d} Group  0 Pid {1000 + r:6d} on       host device  0 [0000:18:00] NVIDIA H200"
              for r in range(ranks)]
    lines += ["#", "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          "
              % ("", "", "", "", ""),
              "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s " % (
                  "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
                  "busbw", "#wrong")]
    return lines


def row(size, count, dtype="float", redop="sum", root=-1, wrong=(0, 0), time_us=(12.5, 11.75)):
    """One result row exactly as writeBenchmarkLinePreamble + writeBenchmarkLineBody print it."""
    text = "%12li  %12li  %8s  %6s  %6s" % (size, count, dtype, redop, "%6i" % root)
    for t, w in zip(time_us, wrong):
        body = "%7.2f" % t, "%6.2f" % (size / t / 1e3), "%6.2f" % (size / t / 1e3)
        text += "  %7s  %6s  %6s" % body + ("    N/A" if w is None else "  %6g" % w)
    return text


def footer(out_of_bounds=0, busbw=0.1234):
    return ["# %-20s : %d %s" % ("Out of bounds values", out_of_bounds, "FAILED" if out_of_bounds else "OK"),
            "# %-20s : %g %s" % ("Avg bus bandwidth", busbw, ""), "#",
            "# Collective test concluded: all_reduce_perf_mpi", "#", ""]


def report(rows, **kw):
    return "\n".join(header() + rows + footer(**kw))


def test_a_clean_report_parses_every_row_and_passes():
    rows = [row(8 * 4 ** i, 2 * 4 ** i) for i in range(12)]
    parsed = nc.parse_nccl_tests_output(report(rows))
    assert len(parsed["rows"]) == 12
    first = parsed["rows"][0]
    assert (first["bytes"], first["count"], first["type"], first["redop"], first["root"]) == (8, 2, "float", "sum", -1)
    assert first["out_of_place"]["wrong"] == 0 and first["in_place"]["time_us"] == 11.75
    assert parsed["out_of_bounds"] == 0 and parsed["out_of_bounds_ok"] and parsed["concluded"]
    assert parsed["average_busbw"] == pytest.approx(0.1234)
    case = nc.nccl_tests_case("all_reduce", report(rows), 0, False, 3.2, forwarded=0, calls={})
    assert case["status"] == "passed" and case["passed"] == 24 and case["failed"] == 0
    assert "12 rows" in case["detail"] and case["average_busbw"] == pytest.approx(0.1234)


def test_wrong_cells_fail_the_case_and_are_named():
    rows = [row(8, 2), row(32, 8, wrong=(3, 0)), row(128, 32, dtype="bfloat16", redop="prod", wrong=(0, 1e6))]
    text = report(rows, out_of_bounds=2) + "\nrank=1 #wrong=3\n"
    case = nc.nccl_tests_case("all_reduce -d all -o all", text, 0, False, 1.0)
    assert case["status"] == "failed"
    assert (case["passed"], case["failed"]) == (4, 2)
    assert "float/sum 32 B out_of_place: 3 wrong" in case["detail"]
    assert "bfloat16/prod 128 B in_place: 1e+06 wrong" in case["detail"]
    assert "rank=1 #wrong=3" in case["detail"]


def test_unchecked_cells_count_for_nothing():
    rows = [row(8, 2, wrong=(None, None)), row(32, 8, wrong=(None, None))]
    case = nc.nccl_tests_case("all_reduce -c 0", report(rows), 0, False, 1.0)
    assert (case["passed"], case["failed"], case["status"]) == (0, 0, "skipped")


def test_a_failed_call_without_a_summary_fails():
    text = "\n".join(header() + [row(8, 2), "host: Test NCCL failure common.cu:1102 'invalid usage / ncclBroadcast: "
                                 "no real communicator (ranks share a GPU)'",
                                 " .. host pid 1001: Test failure common.cu:1180"])
    case = nc.nccl_tests_case("broadcast", text, 3, False, 2.0)
    assert case["status"] == "failed" and case["passed"] == 2 and case["failed"] == 1
    assert "exit status 3" in case["detail"] and "no summary" in case["detail"]
    assert "Test NCCL failure common.cu:1102 'invalid usage" in case["detail"]


def test_a_killed_run_is_timed_out_not_failed():
    case = nc.nccl_tests_case("sendrecv", "\n".join(header() + [row(8, 2)]), None, True, 60.0)
    assert case["status"] == "timed_out" and case["timed_out"] and case["failed"] == 0
    assert "timed out after 60 s" in case["detail"]


def test_rows_of_a_test_without_a_reduction_parse():
    # hypercube prints an empty redop column
    rows = [row(8 * 4 ** i, 2 * 4 ** i, redop="") for i in range(3)]
    case = nc.nccl_tests_case("hypercube", report(rows), 0, False, 1.0)
    assert (case["passed"], case["failed"], case["status"]) == (6, 0, "passed")
    parsed = nc.parse_nccl_tests_output(report(rows))
    assert [(r["redop"], r["root"], r["count"]) for r in parsed["rows"]] == [("", -1, 2), ("", -1, 8), ("", -1, 32)]


def test_out_of_place_blank_rows_parse_their_in_place_cell():
    text = "%12li  %12li  %8s  %6s  %6s" % (64, 16, "float", "sum", "%6i" % -1) + " " * 32 + \
        "  %7s  %6s  %6s  %6g" % ("10.00", "0.01", "0.01", 0)
    parsed = nc.parse_nccl_tests_output(text)
    assert parsed["rows"][0]["out_of_place"] is None and parsed["rows"][0]["in_place"]["wrong"] == 0


def test_variants_cover_every_binary_and_use_flags_nccl_tests_takes():
    full = nc.nccl_tests_variants(2, True)
    names = [v[0].strip() for v in full]
    assert len(names) == len(set(names))
    assert {v[1] for v in full} == set(nc.NCCL_TESTS_BINARIES)
    assert all(name in names for name in nc.NCCL_TESTS_BINARIES)  # each binary's plain sweep
    core = nc.nccl_tests_variants(4, False)
    assert len(core) < len(full)
    assert any(extra.get("NCCL_TESTS_SPLIT") for *_, extra in core)
    assert not any(extra for *_, extra in nc.nccl_tests_variants(2, False))  # no 1-rank groups at 2
    flags = {a for v in full for a in v[2] if a.startswith("-")}
    common = ROOT / ".devcache" / "nccl-tests" / "src" / "common.cu"
    if common.is_file():  # the carried source's getopt string, where it is here
        optstring = re.search(r'getopt_long\(argc, argv, "([^"]+)"', common.read_text()).group(1)
        assert {f[1] for f in flags} <= set(optstring.replace(":", ""))
    for _, _, args, _ in full:
        for flag in ("-d", "-o"):
            if flag in args:
                assert args[args.index(flag) + 1] == "all"
        assert "-c" in args and args[args.index("-c") + 1] == "1"


# ------------------------------------------------------------------------------------------ JAX's launcher
LAUNCHER = """Launching process 0:
  stdout: /tmp/x/jax_0_stdout.log
================================ All launched, running =================================
Process 0 finished.
Process 1 finished.
=================================== All finished ===================================
=================================== Summary ====================================
Process 0, ret: 0, len(stdout): 0, len(stderr): 5012; Ran 8 tests in 12.3s; OK (skipped=2)
Process 1, ret: 1, len(stdout): 0, len(stderr): 5120; Ran 8 tests in 12.4s; FAILED (failures=1, errors=1, skipped=2)
Process 2, ret: -6, len(stdout): 0, len(stderr): 80; Test crashed?
================================ Detailed logs =================================
"""


def test_the_launcher_summary_parses_per_process():
    parsed = nc.parse_jax_launcher_output(LAUNCHER)
    assert [p["process"] for p in parsed] == [0, 1, 2]
    assert parsed[0] == {"process": 0, "returncode": 0, "ran": 8, "failures": 0, "errors": 0, "skipped": 2,
                         "crashed": False, "verdict": "Ran 8 tests in 12.3s; OK (skipped=2)"}
    assert (parsed[1]["failures"], parsed[1]["errors"], parsed[1]["skipped"]) == (1, 1, 2)
    assert parsed[2]["crashed"] and parsed[2]["returncode"] == -6


def test_a_jax_file_case_takes_the_worst_process():
    log = ("FAIL: test_psum1 (__main__.AllReduceTest.test_psum1)\n...\n"
           "ERROR: test_psum_subset_devices (__main__.AllReduceTest.test_psum_subset_devices)\n"
           "jax_mscclpp: rank 1 of 3, peer 0, ncclAllReduce: timed out\n")
    case = nc.jax_case("all_reduce_test.py [LD_PRELOAD]", LAUNCHER, [log], 1, False, 20.0, 0,
                       {"ncclAllReduce": {"one_shot": 6}}, "cmd", 3, 3)
    assert case["status"] == "failed"
    assert case["passed"] == 4  # 8 ran - 1 failure - 1 error - 2 skipped, on process 1
    assert case["failed"] == 3  # process 1's failure and error, and process 2 ended without a verdict
    assert "FAIL test_psum1" in case["detail"] and "ERROR test_psum_subset_devices" in case["detail"]
    assert "processes [2] ended without a test verdict" in case["detail"]
    assert "jax_mscclpp: rank 1 of 3" in case["detail"]


def test_a_jax_file_that_passes_and_one_that_loaded_nothing():
    ok = "\n".join(f"Process {i}, ret: 0, len(stdout): 0, len(stderr): 1; Ran 5 tests in 3.0s; OK" for i in range(2))
    case = nc.jax_case("pmap_test.py [JAX_MSCCLPP_NCCL=1]", ok, [], 0, False, 9.0, None, {}, "cmd", 2, 0)
    assert case["status"] == "passed" and case["passed"] == 5 and case["forwarded"] is None
    assert "loaded in no process" in case["detail"]
    killed = nc.jax_case("pjit_test.py [LD_PRELOAD]", "Launching process 0:\n", [], None, True, 120.0, None, {},
                         "cmd", 2, 0)
    assert killed["status"] == "timed_out" and killed["failed"] == 0


def test_jax_plan_orders_core_files_first():
    full = nc.jax_plan(True, None, ["preload", "switch"])
    assert full[0] == ("all_reduce_test.py", "preload") and ("all_reduce_test.py", "switch") in full
    assert len(full) == len(nc.JAX_CORE_FILES) + 1 + len(nc.JAX_MORE_FILES)
    short = nc.jax_plan(False, None, ["preload", "switch"])
    assert short == [(f, "preload") for f in nc.JAX_CORE_FILES[:nc.JAX_CORE_SHORT]] + [
        ("all_reduce_test.py", "switch")]
    assert nc.jax_plan(False, ["a.py", "b.py"], ["switch"]) == [("a.py", "switch"), ("b.py", "switch")]


# ----------------------------------------------------------------------------------------------- records
def test_records_count_cases_by_status_and_sum_forwarded():
    cases = [nc.make_case("a", passed=3, forwarded=0), nc.make_case("b", passed=2, failed=1, forwarded=4),
             nc.make_case("c", timed_out=True, passed=1), nc.make_case("d", skipped=True),
             nc.not_run_case("e", "budget"), nc.make_case("f", passed=1)]
    assert [c["status"] for c in cases] == ["passed", "failed", "timed_out", "skipped", "not_run", "passed"]
    meta = {"machine": "NVIDIA H200", "gpus": 1, "date": "2026-12-02T00:00:00+00:00", "commit": "abc"}
    record = nc.make_record("torch", 3, cases, meta, 12.34)
    for key in ("machine", "gpus", "date", "commit", "client", "processes", "cases", "passed", "failed",
                "forwarded", "timed_out"):
        assert key in record
    assert (record["passed"], record["failed"], record["timed_out"], record["skipped"], record["not_run"]) == (
        2, 1, 1, 1, 1)
    assert record["forwarded"] == 4 and record["processes"] == 3
    for case in cases:
        assert {"name", "passed", "failed", "forwarded", "timed_out", "seconds", "detail"} <= set(case)
    assert nc.make_record("jax", 2, [nc.make_case("x", passed=1)], meta)["forwarded"] is None
    json.dumps(record)


def test_counts_parse_merge_and_read_from_files(tmp_path):
    text = "ncclAllReduce one_shot 4\nncclAllReduce nccl 2\nncclBroadcast nccl 1\n"
    assert worker.parse_counts(text) == {"ncclAllReduce": {"one_shot": 4, "nccl": 2}, "ncclBroadcast": {"nccl": 1}}
    assert worker.parse_counts("pid 12\n") == {}
    (tmp_path / "1.counts").write_text("pid 1\n" + text)
    (tmp_path / "2.counts").write_text("pid 2\nncclAllReduce one_shot 1\n")
    forwarded, calls, reported = nc.read_counts_dir(str(tmp_path))
    assert (forwarded, reported) == (3, 2) and calls["ncclAllReduce"] == {"one_shot": 5, "nccl": 2}
    assert nc.read_counts_dir(str(tmp_path / "none")) == (None, {}, 0)


# ------------------------------------------------------------------------------------------------ the torch worker
def test_worker_cases_are_unique_and_the_quick_ones_a_subset():
    for world in (2, 3, 4):
        full, quick = worker.case_names(world), worker.case_names(world, quick=True)
        assert len(full) == len(set(full)) and set(quick) < set(full)
        assert full[-1] == "time_estimator all_reduce float32"  # may leave a group open: last
        for op in worker.REDUCE_OPS:
            assert f"all_reduce {op} float32" in full
        assert "all_reduce PREMUL_SUM int32" not in full
        for dtype in worker.DTYPES:
            assert f"all_to_all_single unequal {dtype}" in full


def test_every_worker_case_has_a_family():
    cases = object.__new__(worker.Cases)
    called = []
    for method in ("all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
                   "all_to_all", "all_to_all_unequal", "gather", "scatter", "barrier", "p2p", "send_to_self",
                   "asynchronous", "new_group", "split_group", "coalescing", "cuda_graph", "time_estimator"):
        setattr(cases, method, lambda *a, method=method, **k: called.append(method) or [])
    for name in worker.case_names(4):
        cases.run(name)
    assert len(called) == len(worker.case_names(4))
    with pytest.raises(KeyError):
        cases.run("no_such_family float32")


def test_unequal_splits_differ_per_pair_and_match_between_sender_and_receiver():
    world = 4
    sent = [[worker.Cases.split(s, d, 3) for d in range(world)] for s in range(world)]
    assert len({x for r in sent for x in r}) == 3 and all(x % 3 == 0 for r in sent for x in r)


def test_worker_counts_delta():
    before = {"ncclAllReduce": {"one_shot": 2}}
    after = {"ncclAllReduce": {"one_shot": 5, "nccl": 1}, "ncclSend": {"p2p": 2}}
    assert worker.counts_delta(after, before) == {"ncclAllReduce": {"one_shot": 3, "nccl": 1}, "ncclSend": {"p2p": 2}}


def rank_output(rank, cases, ready=True, timed_out=None):
    lines = ["W1202 some torch logging"] + ([f"READY rank {rank} of 2: torch 2.11"] if ready else [])
    for name in cases:
        lines.append("CASE " + json.dumps({"case": name, "rank": rank, "passed": 2, "failed": 0, "skipped": False,
                                           "timed_out": False, "seconds": 0.1, "detail": "", "forwarded": 0,
                                           "calls": {"ncclAllReduce": {"one_shot": 2}}}))
    if timed_out:
        lines.append("CASE " + json.dumps({"case": timed_out, "rank": rank, "passed": 0, "failed": 0,
                                           "skipped": False, "timed_out": True, "seconds": 40.0,
                                           "detail": "timed out after 40 s", "forwarded": None, "calls": None}))
    return "\n".join(lines)


def test_a_launch_that_ran_every_case():
    names = ["a", "b", "c"]
    done, remaining, ended_by = nc.settle_launch(names, [rank_output(0, names), rank_output(1, names)], [0, 0], False)
    assert ended_by is None and remaining == [] and list(done) == names
    assert done["a"]["passed"] == 4 and done["a"]["forwarded"] == 0
    assert done["a"]["calls"] == {"ncclAllReduce": {"one_shot": 4}}


def test_a_launch_that_hung_at_a_case_settles_it_and_leaves_the_rest():
    names = ["a", "b", "c", "d"]
    outputs = [rank_output(0, ["a", "b"], timed_out="c"), rank_output(1, ["a", "b"])]
    done, remaining, ended_by = nc.settle_launch(names, outputs, [124, None], False)
    assert ended_by == "c" and remaining == ["d"]
    assert done["c"]["status"] == "timed_out" and done["b"]["status"] == "passed"
    crashed = [rank_output(0, ["a"]), rank_output(1, ["a", "b"])]
    done, remaining, ended_by = nc.settle_launch(names, crashed, [-6, 0], False)
    assert ended_by == "b" and remaining == ["c", "d"] and done["b"]["status"] == "failed"
    assert "rank 0: -6" in done["b"]["detail"]


def test_a_launch_whose_group_never_started():
    names = ["a", "b"]
    outputs = [rank_output(0, [], ready=False) + "\nRuntimeError: NCCL error", rank_output(1, [], ready=False)]
    done, remaining, ended_by = nc.settle_launch(names, outputs, [1, 1], False)
    assert ended_by == "a" and remaining == [] and done["a"]["status"] == "failed"
    assert "did not start" in done["a"]["detail"] and "RuntimeError: NCCL error" in done["a"]["detail"]


# -------------------------------------------------------------------------------------- processes, budget
def test_a_timeout_kills_the_whole_session(tmp_path):
    pid_file = tmp_path / "pid"
    started = time.monotonic()
    code, _, timed_out, seconds = nc.run_bounded(["sh", "-c", f"sleep 30 & echo $! > {pid_file}; sleep 30"],
                                                 dict(os.environ), 1.0)
    assert timed_out and code is None and time.monotonic() - started < 15
    grandchild = int(pid_file.read_text())
    for _ in range(50):
        try:
            state = Path(f"/proc/{grandchild}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            break
        if state == "Z":
            break
        time.sleep(0.1)
    else:
        pytest.fail("the backgrounded grandchild survived the timeout")
    code, output, timed_out, _ = nc.run_bounded(["sh", "-c", "echo hi; exit 3"], dict(os.environ), 10)
    assert (code, output.strip(), timed_out) == (3, "hi", False)


def test_the_budget_shares_and_bounds():
    budget = nc.Budget(0.0, [1, 1])
    assert budget.open() and budget.limit(60) == 60
    budget = nc.Budget(100.0, [1, 3])
    assert budget.ends[0] - budget.started == pytest.approx(25)
    assert budget.ends[1] - budget.started == pytest.approx(100)
    assert budget.open() and budget.limit(600) <= 100
    budget.started -= 50
    budget.ends = [e - 50 for e in budget.ends]
    assert not budget.open()  # stage 0's share (25 s) is spent
    budget.stage = 1
    assert budget.open() and budget.limit(600) <= 50


# ------------------------------------------------------------------------------------ the exit-time hooks
STAND_IN = r"""
const char* jax_mscclpp_nccl_call_counts(void) {
  static __thread char text[64];
  const char* fixed = "ncclAllReduce one_shot 5\nncclBroadcast nccl 2\n";
  for (int i = 0; (text[i] = fixed[i]) != 0; ++i) {}
  return text;
}
"""


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory):
    """A library answering jax_mscclpp_nccl_call_counts(), SONAME libnccl.so.2, as ours would."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    folder = tmp_path_factory.mktemp("stand_in")
    (folder / "stand_in.c").write_text(STAND_IN)
    library = folder / "libnccl.so.2"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(library), str(folder / "stand_in.c"),
                    "-Wl,-soname,libnccl.so.2"], check=True)
    return cc, folder, library


def test_the_c_preload_writes_counts_at_exit(stand_in, tmp_path):
    cc, folder, library = stand_in
    (tmp_path / "hook.c").write_text(nc.COUNTS_AT_EXIT_C)
    preload = tmp_path / "libcounts.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(preload), str(tmp_path / "hook.c"), f"-L{folder}",
                    "-Wl,--no-as-needed", "-l:libnccl.so.2", "-pthread"], check=True)
    counts = tmp_path / "counts"
    counts.mkdir()
    env = dict(os.environ, LD_PRELOAD=str(preload), LD_LIBRARY_PATH=str(folder),
               NCCL_CLIENTS_COUNTS_DIR=str(counts))
    subprocess.run(["true"], env=env, check=True)  # returns from main: exit() runs the destructors
    forwarded, calls, reported = nc.read_counts_dir(str(counts))
    assert reported >= 1 and forwarded == 2 * reported
    assert calls["ncclAllReduce"]["one_shot"] == 5 * reported


def test_the_sitecustomize_writes_counts_at_exit_only_where_ours_is_loaded(stand_in, tmp_path):
    _, _, library = stand_in
    hooks, counts = tmp_path / "hooks", tmp_path / "counts"
    hooks.mkdir()
    counts.mkdir()
    (hooks / "sitecustomize.py").write_text(nc.COUNTS_SITECUSTOMIZE)
    env = dict(os.environ, PYTHONPATH=str(hooks), NCCL_CLIENTS_LIBRARY=str(library),
               NCCL_CLIENTS_COUNTS_DIR=str(counts))
    env.pop("LD_PRELOAD", None)
    subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
    assert nc.read_counts_dir(str(counts)) == (None, {}, 0)  # not loaded: nothing written
    subprocess.run([sys.executable, "-c", "pass"], env=dict(env, LD_PRELOAD=str(library)), check=True)
    forwarded, calls, reported = nc.read_counts_dir(str(counts))
    assert (forwarded, reported) == (2, 1) and calls["ncclAllReduce"] == {"one_shot": 5}


# --------------------------------------------------------------------------------------------------- the CLI
def run_tool(*args):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=120, env=env,
                          cwd=ROOT)


def test_help_describes_the_records():
    proc = run_tool("--help")
    assert proc.returncode == 0, proc.stderr
    for word in ("--clients", "--processes", "--budget", "--full-at", "--dry-run", "forwarded", "nccl-clients-"):
        assert word in proc.stdout


def test_dry_run_prints_every_clients_commands_and_runs_nothing(tmp_path):
    proc = run_tool("--dry-run", "--processes", "2,4", "--work", str(tmp_path / "work"))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for stage in ("== torch 2 processes (full)", "== jax 4 processes", "== nccl_tests 4 processes"):
        assert stage in out
    assert "mpiexec -launcher fork -n 4" in out and "NCCL_TESTS_DEVICE=0" in out
    assert "NCCL_TESTS_SPLIT=%2" in out
    assert "all_reduce_perf -b 8 -e 64K -f 32 -c 1 -n 3 -w 1 -d all -o all" in out
    assert "LD_PRELOAD=" in out and "JAX_MSCCLPP_NCCL=1" in out and "--num_processes=4" in out
    assert "RANK=3 WORLD_SIZE=4" in out
    assert not (tmp_path / "work").exists()


def test_bad_arguments_are_refused():
    assert run_tool("--clients", "mpi").returncode == 2
    assert run_tool("--processes", "1", "--dry-run").returncode == 2
    assert run_tool("--clients", "torch").returncode == 2  # --out is required
