"""Smoke tests of the examples: each runs as a user would run it, in a subprocess on virtual CPU devices."""

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# Every example script (the modules starting with "_" are what they share).
SCRIPTS = sorted(p.name for p in EXAMPLES.glob("*.py") if not p.name.startswith("_"))


def run_example(script: str, args: list[str], cpu_devices: int) -> str:
    env = dict(os.environ)
    flags = re.sub(r"--xla_force_host_platform_device_count=\S*", "", env.get("XLA_FLAGS", ""))
    env["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={cpu_devices}".strip()
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run([sys.executable, str(EXAMPLES / script), *args], env=env, capture_output=True,
                          text=True, timeout=180)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{script} exited with {proc.returncode}:\n{output}"
    return output


def test_tensor_parallel_mlp():
    out = run_example("tensor_parallel_mlp.py",
                      ["--batch", "4", "--d-model", "64", "--d-ff", "128", "--steps", "3", "--compare"], 8)
    assert "8 cpu devices on mesh axis 'tp'" in out
    for name in ("mscclpp", "lax"):
        assert re.search(rf"^\[{name}\] forward: .* PASS$", out, re.M), out
        assert re.search(rf"^\[{name}\] grad of loss .* PASS$", out, re.M), out
        assert re.search(rf"^timing \[{name}\]: median step over 3 steps: forward [0-9.]+ ms", out, re.M), out
    times = {name: [float(t) for t in re.search(
        rf"^timing \[{name}\]: .* forward ([0-9.]+) ms, forward\+grad ([0-9.]+) ms", out, re.M).groups()]
        for name in ("mscclpp", "lax")}
    speedups = re.search(r"^timing speedup \(lax/ours\): forward ([0-9.]+)x, forward\+grad ([0-9.]+)x "
                         r"\(above 1: mscclpp is faster\)$", out, re.M)
    assert speedups, out
    for printed, ours, lax in zip(speedups.groups(), times["mscclpp"], times["lax"]):
        assert float(printed) == pytest.approx(lax / ours, abs=0.01, rel=0.02), out
    assert out.rstrip().splitlines()[-1] == "PASS", out


def test_transformer_decode(tmp_path):
    report_file = tmp_path / "decode.json"
    out = run_example("transformer_decode.py",
                      ["--preset", "tiny", "--layers", "1", "--steps", "3", "--prompt-len", "2",
                       "--batch", "1,4", "--out", str(report_file)], 4)
    assert "4 cpu devices on 'tp'" in out
    for batch in (1, 4):
        assert re.search(rf"batch {batch}: step time speedup \(lax/ours\) [0-9.]+x; same tokens .* PASS$", out,
                         re.M), out
    assert "PASS: mscclpp and lax produced the same tokens" in out

    report = json.loads(report_file.read_text())
    assert report["passed"] is True
    assert report["devices"] == {**report["devices"], "platform": "cpu", "count": 4, "tp": 4}
    assert {"jax", "jaxlib", "jax_mscclpp"} <= set(report["versions"])
    runs = {(r["batch"], r["collectives"]) for r in report["results"]}
    assert runs == {(b, c) for b in (1, 4) for c in ("mscclpp", "lax")}
    for r in report["results"]:
        assert len(r["step_ms"]) == 3 and r["median_step_ms"] > 0 and r["tokens_per_s"] > 0
    assert [c["same_tokens"] for c in report["checks"]] == [True, True]
    median = {(r["batch"], r["collectives"]): r["median_step_ms"] for r in report["results"]}
    for c in report["checks"]:
        assert c["speedup"] == median[c["batch"], "lax"] / median[c["batch"], "mscclpp"]


def test_custom_algorithm():
    out = run_example("custom_algorithm.py", [], 8)
    assert "verified" in out and "a dropped wait is caught: race" in out, out
    assert "the psum ran the registered plan: True" in out, out
    assert out.rstrip().splitlines()[-1] == "PASS", out


def test_data_parallel_train(tmp_path):
    report_file = tmp_path / "train.json"
    out = run_example("data_parallel_train.py", ["--steps", "2", "--warmup", "1", "--out", str(report_file)], 4)
    assert "PASS: same weights" in out, out
    assert re.search(r"^config .* median ms +speedup \(lax/ours\)$", out, re.M), out
    assert re.search(r"^ +tiny: speedup \(lax/ours\) [0-9.]+x; weights max rel diff", out, re.M), out
    report = json.loads(report_file.read_text())
    assert report["example"] == "data_parallel_train" and report["devices"]["count"] == 4
    (row,) = report["results"]
    assert row["same_weights"] and row["speedup"] == row["lax_ms"] / row["ours_ms"]


def test_data_parallel_train_in_processes(tmp_path):
    """In 2 processes under jax.distributed (one CPU device each: our collectives use lax there, as they say) both
    variants train, each process reports a digest of its replica of the final weights, and the replicas are equal
    bit for bit."""
    report_file = tmp_path / "train.json"
    out = run_example("data_parallel_train.py", ["--processes", "2", "--steps", "1", "--warmup", "0", "--out",
                                                 str(report_file)], 1)
    assert "2 cpu devices on 'dp' (2 process(es))" in out, out
    assert re.search(r"^tiny: final weights sha256 mscclpp [0-9a-f]{16}, lax [0-9a-f]{16}$", out, re.M), out
    assert "the 2 replicas equal" in out.splitlines(), out
    report = json.loads(report_file.read_text())
    assert report["passed"] and report["replicas_equal"] and report["devices"]["processes"] == 2
    (row,) = report["results"]
    assert set(row["weights_sha256"]) == {"mscclpp", "lax"} and row["same_weights"]
    assert "PASS: same weights" in out.splitlines(), out


def test_gspmd_train(tmp_path):
    """Without a GPU the example trains once on CPU devices, XLA's partitioner inserting the all-reduces, and says
    that no NCCL library is involved; its JSON report holds the run."""
    out = run_example("gspmd_train.py", ["--steps", "3", "--width", "32", "--batch", "16", "--out",
                                         str(tmp_path / "gspmd.json")], 8)
    assert "no NCCL library is involved" in out
    inserted = json.loads(re.search(r"XLA inserted (\{.*\})", out).group(1).replace("'", '"'))
    assert inserted["all-reduce"] > 0, out
    report = json.loads((tmp_path / "gspmd.json").read_text())
    (run,) = report["runs"]["cpu"]
    assert run["devices"] == 8 and run["mesh"] == {"dp": 1, "tp": 8} and len(run["losses"]) == 3
    assert run["losses"][-1] < run["losses"][0]
    assert out.rstrip().splitlines()[-1] == "PASS"


def test_ring_matmul(tmp_path):
    """Both variants of the ring on 4 CPU devices equal the unsharded model; the report holds both and the
    speedup of their step times."""
    report_file = tmp_path / "ring.json"
    out = run_example("ring_matmul.py", ["--steps", "2", "--layers", "2", "--rows", "3", "--d-model", "16",
                                         "--dtype", "float32", "--out", str(report_file)], 4)
    assert "4 cpu devices on 'sp'" in out and "12 ring steps of 192 bytes per rank" in out, out
    for name in ("mscclpp", "lax"):
        assert re.search(rf"^\[{name}\] median step +[0-9.]+ ms; largest error .* PASS$", out, re.M), out
    report = json.loads(report_file.read_text())
    assert [r["collectives"] for r in report["results"]] == ["mscclpp", "lax"]
    assert all(r["max_relative_error"] < 1e-5 for r in report["results"])
    lax_ms, ours_ms = (r["median_step_ms"] for r in report["results"][::-1])
    assert report["speedup"] == lax_ms / ours_ms
    assert out.rstrip().splitlines()[-1] == "PASS"


def test_moe_layer(tmp_path):
    """On 4 CPU devices, top-2 with capacity for half the rows: ours matches the dense jnp reference in outputs and
    gradients; lax's cannot run on CPU devices and says so; the report holds the run, its drops and its bytes."""
    report_file = tmp_path / "moe.json"
    out = run_example("moe_layer.py", ["--tokens", "16", "--d-model", "16", "--steps", "2", "--capacity-factor",
                                       "0.5", "--out", str(report_file)], 4)
    assert "4 cpu devices on 'ep'" in out and "capacity 8 rows per expert" in out, out
    assert re.search(r"^\[mscclpp\] vs the dense reference: .* PASS$", out, re.M), out
    assert re.search(r"^\[mscclpp\] median step over 2 steps: forward [0-9.]+ ms, forward\+grad [0-9.]+ ms$", out,
                     re.M), out
    assert "[lax] cannot run here: cpu has no ragged-all-to-all" in out, out
    report = json.loads(report_file.read_text())
    assert report["example"] == "moe_layer" and report["devices"]["count"] == 4 and report["passed"] is True
    ours, lax = report["results"]
    assert ours["collectives"] == "mscclpp" and ours["ran"] and lax == {**lax, "collectives": "lax", "ran": False}
    sent = ours["rows_sent"]  # [i][j]: rows device i sent device j; 8 experts of 8 rows take 64 of 128
    assert sum(map(sum, sent)) == 64 and ours["rows_dropped"] == 64
    to_others = [sum(row) - row[i] for i, row in enumerate(sent)]
    assert ours["bytes_per_device"]["dispatch_bytes_mean"] == pytest.approx(sum(to_others) / 4 * 16 * 4)
    assert ours["bytes_per_device"]["composed_exchange_bytes"] == 3 * 16 * 2 * 16 * 4
    assert out.rstrip().splitlines()[-1] == "PASS"


def test_moe_layer_in_processes(tmp_path):
    """In 2 processes under jax.distributed (one CPU device each), ours matches the dense reference in every process,
    and each process's digest of the gathered outputs and gradients is the same."""
    report_file = tmp_path / "moe.json"
    out = run_example("moe_layer.py", ["--processes", "2", "--tokens", "8", "--d-model", "16", "--steps", "1",
                                       "--out", str(report_file)], 1)
    assert re.search(r"^run: outputs and gradients sha256 mscclpp [0-9a-f]{16}$", out, re.M), out
    assert "the 2 processes' outputs equal" in out.splitlines(), out
    report = json.loads(report_file.read_text())
    assert report["passed"] and report["replicas_equal"] and report["devices"]["processes"] == 2
    ours = report["results"][0]
    assert ours["collectives"] == "mscclpp" and len(ours["outputs_sha256"]) == 64
    assert "PASS" in out.splitlines(), out


def test_transformer_decode_in_processes(tmp_path):
    """In 2 processes under jax.distributed (one CPU device each, 'tp' across them), both variants generate the same
    tokens in every process, each process's logits shards agree, and each process reports its digests."""
    report_file = tmp_path / "decode.json"
    out = run_example("transformer_decode.py", ["--processes", "2", "--preset", "tiny", "--layers", "1", "--steps",
                                                "2", "--prompt-len", "2", "--batch", "2", "--out", str(report_file)], 1)
    assert "2 cpu devices on 'tp' (2 processes)" in out
    assert re.search(r"batch 2: step time speedup \(lax/ours\) [0-9.]+x; same tokens .* PASS$", out, re.M), out
    for name in ("mscclpp", "lax"):
        assert re.search(rf"^batch 2 {name}: tokens and logits shards sha256 by process: [0-9a-f]{{16}}, "
                         rf"[0-9a-f]{{16}}$", out, re.M), out
    assert "the 2 processes' tokens equal" in out.splitlines(), out
    report = json.loads(report_file.read_text())
    assert report["passed"] and report["replicas_equal"] and report["devices"]["processes"] == 2
    assert [len(row["outputs_sha256_by_process"]) for row in report["results"]] == [2, 2]
    # The processes hold different logits shards.
    assert report["results"][0]["outputs_sha256_by_process"][0] != report["results"][0]["outputs_sha256_by_process"][1]


def test_model_bench(tmp_path):
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-m", "jax_mscclpp.tools.bench.model", "--rows", "2", "--d-model", "32",
                           "--d-ff", "64", "--layers", "2", "--iters", "2", "--warmup", "1", "--out", str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (path,) = tmp_path.glob("model-*.json")
    doc = json.loads(path.read_text())
    assert "host reference backend" in doc["caveat"] and doc["caveat"] in proc.stdout
    rows = doc["results"]
    assert [r["variant"] for r in rows] == ["lax", "mscclpp", "mscclpp_fused"]
    assert all(r["us_per_block"] > 0 for r in rows)
    assert "speedup" not in rows[0]
    for r in rows[1:]:
        assert r["speedup"] == rows[0]["us_per_block"] / r["us_per_block"]
    assert re.search(r"^ *rows .* us/block +speedup \(lax/ours\)", proc.stdout, re.M), proc.stdout


def test_chunk_routing():
    """The MSCCLang ring passes Check(), its MSCCL-IR loads back, and both serve the model's psum, matching lax."""
    out = run_example("chunk_routing.py", [], 4)
    assert "Check() passes" in out and "loads back as a plan" in out, out
    assert out.count("the ring ran: True") == 2, out
    assert out.rstrip().splitlines()[-1] == "PASS", out


# Every example at tiny sizes, for a machine with one device (a laptop, a one-GPU box).
ONE_DEVICE = {
    "tensor_parallel_mlp.py": ["--batch", "4", "--d-model", "64", "--d-ff", "128", "--steps", "2", "--compare"],
    "transformer_decode.py": ["--preset", "tiny", "--steps", "2", "--batch", "1"],
    "data_parallel_train.py": ["--steps", "2", "--warmup", "1"],
    "custom_algorithm.py": [],
    "chunk_routing.py": [],
    "gspmd_train.py": ["--steps", "2", "--width", "32", "--batch", "8", "--layers", "1"],
    "ring_matmul.py": ["--steps", "2", "--layers", "1", "--rows", "2", "--d-model", "16"],
    "moe_layer.py": ["--steps", "2", "--tokens", "8", "--d-model", "16"],
    "flax_tensor_parallel.py": ["--batch", "2", "--seq", "8", "--d-model", "32", "--heads", "2", "--d-ff", "64",
                                "--layers", "1", "--steps", "2"],
}


@pytest.mark.parametrize("script", sorted(ONE_DEVICE))
def test_runs_on_one_device(script):
    if script == "flax_tensor_parallel.py" and importlib.util.find_spec("flax") is None:
        pytest.skip("flax is not installed")
    out = run_example(script, ONE_DEVICE[script], 1)
    assert "FAIL" not in out, out
    assert out.rstrip().splitlines()[-1].startswith("PASS"), out


def test_every_example_is_listed():
    assert set(ONE_DEVICE) == set(SCRIPTS)
    assert {"custom_algorithm.py", "data_parallel_train.py", "flax_tensor_parallel.py", "tensor_parallel_mlp.py",
            "transformer_decode.py"} <= set(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_prints_usage_without_running(script):
    """``--help`` prints the options and exits 0 before anything runs (no model built, no check printed)."""
    if script == "flax_tensor_parallel.py" and importlib.util.find_spec("flax") is None:
        pytest.skip("flax is not installed")
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, str(EXAMPLES / script), "--help"], env=env, capture_output=True,
                          text=True, timeout=60)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert proc.stdout.startswith(f"usage: {script} "), output
    assert "--cpu-devices" in proc.stdout and "--seed" in proc.stdout, output
    # What a run prints first or last: the devices it runs on, a verdict, a file written.
    first_or_last = r"^(\d+ cpu devices|preset |flax nnx |lowered |wrote |PASS|FAIL)|(PASS|FAIL)$"
    assert not re.search(first_or_last, output, re.M), output
