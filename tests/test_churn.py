"""Communicator churn, CI-sized: create / use / destroy cycles over random meshes, axes, rank counts and scratch
sizes leave no communicator, thread or heap growth behind once JAX's caches are cleared."""

from jax_mscclpp.tools.soak import churn


def test_churn(cpu_devices):
    lines = []
    result = churn.run(list(cpu_devices[:8]), cycles=24, sample_every=12, warmup=2, log=lines.append)
    assert result["failures"] == [] and result["leaks"] == [], result
    assert len(result["ranks_seen"]) >= 4, result["ranks_seen"]  # several rank counts, 1 to 8
    base, end = result["baseline"], result["after_clear_caches"]
    assert end["live_communicators"] == base["live_communicators"]
    assert end["native_host_communicators"] == base["native_host_communicators"]
    assert end["threads"] <= base["threads"]
    if base["heap_mb"] is not None:
        assert end["heap_mb"] <= base["heap_mb"] + result["heap_slack_mb"]


def _sample(threads, heap_mb, gpu_free_mb):
    return {"threads": threads, "heap_mb": heap_mb, "live_communicators": 0, "native_host_communicators": 0,
            "proxy_threads": 0, "ipc_mappings": 0, "gpu_free_mb": {"0": gpu_free_mb}}


def test_leaks_beyond_the_control_only():
    """Growth the lax-only control shows too is JAX's (on two H200s, 2026-11-29: 1,024 MB of device memory, 4
    threads and 81 MB of heap after 500 cycles, with or without our communicators); growth beyond it is a leak."""
    control = {"baseline": _sample(153, 7294.9, 34359.1), "after_clear_caches": _sample(157, 7375.6, 33335.1)}
    base = _sample(153, 7304.4, 34359.1)
    like_control = _sample(157, 7386.3, 33335.1)
    assert churn.leaks(base, like_control, 500, control) == []
    assert len(churn.leaks(base, like_control, 500)) == 3  # threads, heap and device memory, without the control
    leaking = churn.leaks(base, _sample(158, 7420.0, 33135.1), 500, control)
    assert [line.split(":")[0] for line in leaking] == ["threads", "heap in use", "GPU 0 free memory"], leaking
