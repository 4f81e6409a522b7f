"""jax_mscclpp.tools.bench.profile on a hand-made perfetto trace: GPU busy/idle, collective classes, overlap, host
events."""

import gzip
import json

import pytest

from jax_mscclpp.tools.bench import profile


def _trace(tmp_path):
    meta = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/device:GPU:0"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 7, "args": {"name": "Stream #7(compute)"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 8, "args": {"name": "Stream #8(collective)"}},
        {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "/host:CPU"}},
    ]
    kernels = [  # (stream, name, start, duration), two steps
        (7, "gemm_fusion_dot_1", 0, 10), (8, "void jax_mscclpp::all_reduce_1pa_ll_kernel", 8, 4),
        (7, "psum_invariant_fusion_1", 20, 5),
        (7, "gemm_fusion_dot_1", 40, 10), (8, "void jax_mscclpp::all_reduce_1pa_ll_kernel", 50, 2),
        (7, "psum_invariant_fusion_1", 60, 5),
    ]
    host = [("command_buffer::execute", 0, 3)] * 6 + [("Thunks::Initialize", 0, 50)] * 2 + [("$step.py:1 one", 0, 90)] * 2
    events = meta + [{"ph": "X", "pid": 1, "tid": s, "name": n, "ts": t, "dur": d} for s, n, t, d in kernels]
    events += [{"ph": "X", "pid": 2, "tid": 1, "name": n, "ts": t, "dur": d} for n, t, d in host]
    path = tmp_path / "t.trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)
    return str(path)


def test_summarize(tmp_path):
    s = profile.summarize(_trace(tmp_path), steps=2)
    assert s["span_us"] == pytest.approx(65 / 2)
    assert s["gpu_busy_us"] == pytest.approx((12 + 5 + 12 + 5) / 2)  # the union over both streams
    assert s["gpu_idle_us"] == pytest.approx((65 - 34) / 2)
    assert s["ours_us"] == pytest.approx(3) and s["lax_collective_us"] == pytest.approx(5)
    assert s["collective_beside_compute_us"] == pytest.approx(2 / 2)  # 8..10 of the first step
    assert s["kernels_per_step"] == 3
    by_name = {k["name"]: k for k in s["kernels"]}
    assert by_name["psum_invariant_fusion_1"]["class"] == "lax_collective"
    assert by_name["void jax_mscclpp::all_reduce_1pa_ll_kernel"]["median_us"] == pytest.approx(3)
    # The runtime's host events, most frequent first, Python frames left out.
    assert [(h["name"], h["calls_per_step"]) for h in s["host_calls"]] == [
        ("command_buffer::execute", 3), ("Thunks::Initialize", 1)]
    assert s["host"][0]["name"] == "$step.py:1 one"  # by total time
    assert "3 kernels" in profile.format_summary("x", s)
