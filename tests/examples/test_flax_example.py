"""Smoke test of examples/flax_tensor_parallel.py (skipped without flax): an unedited flax model moved onto our
collectives by jm.rewrite, on virtual CPU devices."""

import json
import re

import pytest

from tests.examples.test_examples import run_example

pytest.importorskip("flax")


def test_flax_tensor_parallel(tmp_path):
    report_file = tmp_path / "flax.json"
    out = run_example("flax_tensor_parallel.py",
                      ["--batch", "2", "--seq", "8", "--d-model", "32", "--heads", "4", "--d-ff", "64",
                       "--layers", "1", "--steps", "2", "--out", str(report_file)], 4)
    assert "4 cpu devices on 'tp'" in out
    for label in ("forward output", "loss", "gradients"):
        assert re.search(rf"^{label}: .* PASS$", out, re.M), out
    # One block: two psums forward; backward adds the two psums JAX inserts for the layer-norm outputs.
    assert re.search(r"^forward program: 2 jax_mscclpp custom calls, lax collectives left: none .* PASS$", out, re.M)
    assert re.search(r"^train step program: 4 jax_mscclpp custom calls, lax collectives left: none .* PASS$", out,
                     re.M)
    assert re.search(r"^step +lax ms +mscclpp ms +speedup \(lax/ours\)$", out, re.M), out
    assert re.search(r"^train step +[0-9.]+ +[0-9.]+ +[0-9.]+x$", out, re.M), out
    assert out.rstrip().splitlines()[-2:] == ["PASS", f"wrote {report_file}"], out

    report = json.loads(report_file.read_text())
    assert report["passed"] is True and all(c["passed"] for c in report["checks"])
    assert report["devices"] == {**report["devices"], "platform": "cpu", "count": 4, "tp": 4}
    assert {"jax", "flax", "jax_mscclpp"} <= set(report["versions"])
    assert report["programs"]["train step/lax"]["lax_collectives"] == ["all-reduce"]
    assert report["programs"]["train step/mscclpp"] == {"jax_mscclpp_custom_calls": 4, "lax_collectives": []}
    assert set(report["timings"]) == {"forward", "train step"}
    for t in report["timings"].values():
        assert t["lax_median_ms"] > 0 and t["mscclpp_median_ms"] > 0
        assert t["speedup"] == t["lax_median_ms"] / t["mscclpp_median_ms"]


def test_flax_log_says_each_decision_once():
    out = run_example("flax_tensor_parallel.py",
                      ["--batch", "2", "--seq", "8", "--d-model", "32", "--heads", "4", "--d-ff", "64",
                       "--layers", "1", "--steps", "1", "--log"], 4)
    log = [line for line in out.splitlines() if line.startswith("jax_mscclpp.rewrite: ")]
    assert len(log) == len(set(log)) and len(log) <= 6, "\n".join(log)
    psums = "replaced lax psum over ('tp',) on float32[2,8,32]{V:tp} (2048 bytes per rank) with jax_mscclpp.psum"
    # One block: two psums forward; the training step adds the two of the backward pass.
    assert f"jax_mscclpp.rewrite: rewrite(forward): {psums} (2 times)" in log, "\n".join(log)
    assert f"jax_mscclpp.rewrite: rewrite(train_step): {psums} (4 times)" in log, "\n".join(log)
    assert not any("kept" in line for line in log), "\n".join(log)
