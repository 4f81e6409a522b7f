"""Communicator churn, CI-sized: create / use / destroy cycles over random meshes, axes, rank counts and scratch
sizes leave no communicator, thread or heap growth behind once JAX's caches are cleared."""

from jax_mscclpp.soak import churn


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
