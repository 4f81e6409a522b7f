"""``python -m jax_mscclpp.tools.bench`` end to end on CPU: tiny sizes, few iterations, files written and parsed."""

import csv
import glob
import importlib.util
import json

import pytest

from jax_mscclpp.tools.bench import metrics, report, sweep
from tests.bench.bench_command import FAST, bench

# Records of the module's run: all_reduce and all_gather, two sizes, each algorithm the CPU backend runs and auto.
N_RECORDS = 2 * sum(
    len(sweep.expand_algorithms(["all"], op, "cpu")) for op in ("all_reduce", "all_gather")
)


@pytest.fixture(scope="module")
def run_with_files(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    proc = bench("--ops", "all_reduce,all_gather", "--sizes", "1K,4K", "--dtype", "float32", "--out", str(out),
                 "--name", "result", *FAST)
    return proc, out


def test_cli_runs_and_prints_a_table(run_with_files):
    proc, _ = run_with_files
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    header = next(line for line in lines if line.startswith("op "))
    for column in ("size", "algorithm", "ours_us", "lax_us", "speedup", "busbw", "disp_us"):
        assert column in header
    assert any(line.startswith("# ") and "speedup = lax/ours" in line for line in lines)
    rows = [line for line in lines if line.startswith(("all_reduce", "all_gather"))]
    # Every algorithm the CPU backend runs on one axis, and auto; two sizes each.
    assert len(rows) == N_RECORDS
    assert "command buffers are a GPU feature" in proc.stdout  # cmdbuf does not apply on CPU
    # The figures are said to be the host backend's against XLA:CPU's, once, above the table.
    (caveat,) = [line for line in lines if line.startswith("# caveat: ")]
    assert lines.index(caveat) < lines.index(header)
    assert "host reference backend" in caveat and "XLA:CPU" in caveat and "not a GPU speed claim" in caveat


def test_cli_writes_json(run_with_files):
    _, out = run_with_files
    doc = json.loads((out / "result.json").read_text())
    assert doc["schema"] == "jax_mscclpp.bench/1"
    assert doc["caveat"] == report.CPU_CAVEAT
    assert "host reference backend" in doc["caveat"] and "not a GPU speed claim" in doc["caveat"]
    meta = doc["meta"]
    for key in ("date", "hostname", "platform", "device_kind", "device_count", "gpu_count", "gpu_model", "versions"):
        assert key in meta
    assert meta["platform"] == "cpu" and meta["device_count"] == 4 and meta["gpu_count"] == 0
    assert meta["versions"]["jax"] and meta["versions"]["jax_mscclpp"]
    records = doc["records"]
    assert len(records) == N_RECORDS
    for r in records:
        assert r["status"] == "ok" and r["check"] == "ok", r
        assert r["world"] == 4 and r["chain"] == 2 and r["iters"] == 2
        assert r["lax_dispatch_us"] > 0 and r["ours_dispatch_us"] > 0
        assert r["ours_min_us"] <= r["ours_us"] <= r["ours_max_us"]
        # nccl-tests' formulas, wherever a bandwidth was reported.
        for who in ("ours", "lax"):
            us = r[f"{who}_us"]
            if r[f"{who}_algbw"] is not None:
                assert r[f"{who}_algbw"] == pytest.approx(r["size"] / (us * 1e-6) / 1e9)
                assert r[f"{who}_busbw"] == pytest.approx(r[f"{who}_algbw"] * metrics.bus_factor(r["op"], 4))
            else:
                assert us <= 0
    auto = [r for r in records if r["algorithm"] == "auto" and r["op"] == "all_reduce"]
    assert {r["chosen"] for r in auto} <= {"1pa_ll", "2pa_ll", "2pa_hb", "lax"}
    gathers = [r for r in records if r["op"] == "all_gather"]
    assert {r["count"] for r in gathers} == {1024 // 4 // 4, 4096 // 4 // 4}  # a rank's input is size / n


def test_cli_writes_csv(run_with_files):
    _, out = run_with_files
    with open(out / "result.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == N_RECORDS
    for key in ("date", "hostname", "device_kind", "device_count", "jax", "jax_mscclpp", "op", "size", "ours_us",
                "lax_us", "speedup", "ours_busbw", "lax_busbw"):
        assert key in rows[0]
    assert {row["op"] for row in rows} == {"all_reduce", "all_gather"}
    assert all(float(row["lax_dispatch_us"]) > 0 for row in rows)


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="matplotlib not installed")
def test_cli_writes_png(run_with_files):
    _, out = run_with_files
    png = (out / "result.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_caveat_only_on_cpu(tmp_path):
    """A GPU run's table and JSON carry no CPU caveat; a CPU run's carry it once."""
    gpu = {"platform": "gpu", "device_kind": "NVIDIA H200", "device_count": 2}
    cpu = {**gpu, "platform": "cpu", "device_kind": "cpu"}
    assert report.caveat(gpu) is None and not any("caveat" in line for line in report.preamble(gpu))
    assert [line for line in report.preamble(cpu) if "caveat" in line] == [f"# caveat: {report.CPU_CAVEAT}"]
    for meta, expected in ((gpu, None), (cpu, report.CPU_CAVEAT)):
        path = report.write_json(str(tmp_path / f"{meta['platform']}.json"), meta, {}, [])
        assert json.loads(open(path).read())["caveat"] == expected


def test_cli_range_auto_and_default_names(tmp_path):
    proc = bench("--ops", "reduce_scatter,all_to_all", "--sizes", "1K:4K", "--algorithm", "auto",
                 "--dtype", "bfloat16", "--mode", "plain", "--out", str(tmp_path), *FAST, devices=2)
    assert proc.returncode == 0, proc.stderr
    (path,) = glob.glob(str(tmp_path / "bench_cpu_*_2dev_*.json"))
    records = json.load(open(path))["records"]
    assert sorted((r["op"], r["size"]) for r in records) == sorted(
        (op, s) for op in ("reduce_scatter", "all_to_all") for s in (1024, 2048, 4096)
    )
    assert all(r["algorithm"] == "auto" and r["chosen"] == "allpairs" and r["check"] == "ok" for r in records)
    assert "command buffers" not in proc.stdout  # only plain was asked for


@pytest.mark.parametrize(
    "args, message",
    [
        (["--sizes", "1X"], "not a size"),
        (["--sizes", "4K:1K"], "backwards"),
        (["--ops", "broadcast"], "unknown op"),
        (["--algorithm", "fastest"], "unknown algorithm"),
        (["--iters", "0"], "at least 1"),
        (["--dtype", "float8"], "dtype"),
        (["--mode", "graph"], "unknown mode"),
        (["--ops", "psum,pmin"], "different reductions"),
        (["--ops", "pmax", "--redop", "sum"], "different reductions"),
        (["--ops", "ppermute"], "unknown op 'ppermute'"),
    ],
)
def test_cli_rejects_bad_arguments(args, message):
    """Rejected before JAX starts, with argparse's status 2."""
    proc = bench(*FAST, "--sizes", "1K", *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr


def test_cli_help_shows_usage():
    proc = bench("--help", devices=None)
    assert proc.returncode == 0
    for flag in ("--ops", "--sizes", "--dtype", "--algorithm", "--out", "--iters", "--warmup", "--chain",
                 "--devices", "--mode", "--launch"):
        assert flag in proc.stdout


def test_cli_too_many_devices():
    proc = bench("--sizes", "1K", "--ops", "all_reduce", *FAST, devices=64,
                 env_extra={"XLA_FLAGS": "--xla_force_host_platform_device_count=2"})
    assert proc.returncode == 2 and "only 2 cpu device" in proc.stderr


def test_launch_two_processes(tmp_path):
    """jax.distributed over two local processes (jax's CPU collectives): lax is timed, ours is reported as not
    runnable (the host reference backend lives in one process)."""
    proc = bench("--launch", "2", "--ops", "all_reduce", "--sizes", "1K", "--mode", "plain", "--out", str(tmp_path),
                 "--name", "launched", *FAST, devices=None)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.load(open(tmp_path / "launched.json"))
    assert doc["meta"]["process_count"] == 2 and doc["meta"]["device_count"] == 2
    assert doc["meta"]["environment"]["NCCL_NVLS_ENABLE"] == "0"
    (record,) = doc["records"]
    assert record["processes"] == 2 and record["lax_us"] is not None and record["lax_dispatch_us"] > 0
    assert record["status"].startswith("unavailable") and "one process" in record["status"]
