"""The soak (random collectives against lax), CI-sized, and its parts: the comparison catches a wrong answer, a
mismatch is reported with the command that reproduces it, and that command runs the same call again."""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding

from jax_mscclpp.tools.soak import cli, configs, data, programs, runner
from tests.helpers import P

ROOT = Path(__file__).resolve().parents[1]


def test_a_short_soak(cpu_devices):
    soak = runner.Soak(list(cpu_devices[:8]), runner.Settings(calls=40, programs=10, max_bytes=256 << 10, seed=11),
                       log=lambda line: None)
    summary = soak.run()
    assert summary["calls"] == 40 and summary["programs_compiled"] <= 10
    assert summary["mismatches"] == 0 and summary["errors"] == 0, summary["mismatch_records"] + summary["error_records"]
    ran = summary["tallies"]["op/ran"]
    assert any(not key.endswith("/lax") for key in ran), ran  # ours ran, not only lax
    assert sum(t["calls"] for t in summary["tallies"]["op"].values()) == 40
    assert not any(name.startswith(runner.PLAN_PREFIX) for name in _registered_names())  # cleaned up


def _registered_names():
    from jax_mscclpp import plans
    from jax_mscclpp._types import Collective

    return [p.name for c in Collective for p in plans.registered_for(c, None)]


def _sharded(mesh, values, dtype):
    return jax.device_put(np.asarray(values, dtype), NamedSharding(mesh, P("x")))


def test_the_comparison(mesh8):
    config = configs.Config(op="all_reduce", dtype="int32", algorithm="auto", mesh_shape=(8,), mesh_axes=("x",),
                            axes=("x",), local_shape=(2,))
    ref = _sharded(mesh8, np.arange(16), np.int32)
    assert data.compare(config, _sharded(mesh8, np.arange(16), np.int32), ref).ok
    off_by_one = np.arange(16)
    off_by_one[9] += 1
    assert not data.compare(config, _sharded(mesh8, off_by_one, np.int32), ref).ok

    floats = dataclasses.replace(config, dtype="float32")
    ref = _sharded(mesh8, np.linspace(-4, 4, 16), np.float32)
    assert data.compare(floats, _sharded(mesh8, np.linspace(-4, 4, 16) + 1e-6, np.float32), ref).ok  # rounding
    assert not data.compare(floats, _sharded(mesh8, np.linspace(-4, 4, 16) + 1e-3, np.float32), ref).ok
    assert not data.compare(dataclasses.replace(floats, redop="max"),  # max is exact
                            _sharded(mesh8, np.linspace(-4, 4, 16) + 1e-6, np.float32), ref).ok
    nan_here, nan_there = np.linspace(-4, 4, 16), np.linspace(-4, 4, 16)
    nan_here[3], nan_there[4] = np.nan, np.nan
    assert data.compare(floats, _sharded(mesh8, nan_here, np.float32), _sharded(mesh8, nan_here, np.float32)).ok
    assert not data.compare(floats, _sharded(mesh8, nan_here, np.float32), _sharded(mesh8, nan_there, np.float32)).ok


def test_data_is_reproducible_and_fresh(mesh8):
    config = configs.Config(op="all_gather", dtype="bfloat16", algorithm="auto", mesh_shape=(8,), mesh_axes=("x",),
                            axes=("x",), local_shape=(3, 5))
    mesh = programs.make_mesh(list(np.asarray(mesh8.devices).flat), config)
    a, b, c = (np.asarray(data.make_input(config, mesh, 0, call).astype(np.float32)) for call in (7, 7, 8))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c) and np.all(np.abs(a[np.isfinite(a)]) <= 3)


def test_a_mismatch_is_reported_with_its_reproduction(cpu_devices, monkeypatch, capsys):
    wrong = programs.collective

    def off_by_one(config, ours):
        fn = wrong(config, ours)
        return (lambda v: fn(v) + 1) if ours else fn

    monkeypatch.setattr(programs, "collective", off_by_one)
    lines = []
    soak = runner.Soak(list(cpu_devices[:8]), runner.Settings(calls=12, programs=6, max_bytes=4096, seed=2,
                                                              dtypes=("int32",)), log=lines.append)
    summary = soak.run()
    assert summary["mismatches"] == summary["calls"] == 12 and summary["errors"] == 0
    record = summary["mismatch_records"][0]
    assert "python -m jax_mscclpp.tools.soak --devices 8 --config '" in record["reproduce"]
    assert sum(line.startswith("MISMATCH ") and "reproduce: python -m jax_mscclpp.tools.soak" in line
               for line in lines) == 12
    # The reproduction runs the same config on the same data (and, with the fault gone, agrees with lax).
    monkeypatch.setattr(programs, "collective", wrong)
    config = json.dumps(record["config"])
    assert cli.main(["--devices", "8", "--config", config, "--data", "%d:%d" % tuple(record["data"]), "--quiet"]) == 0
    assert "soak: 1 calls" in capsys.readouterr().out


def test_config_json_round_trip():
    config = configs.Config(op="all_to_all", dtype="uint16", algorithm="allpairs", mesh_shape=(2, 4),
                            mesh_axes=("a", "b"), axes=("b", "a"), local_shape=(16, 3), dim=-2, concat=1, tiled=True,
                            chain=3, mesh_seed=5)
    assert configs.Config.from_json(config.to_json()) == config


def test_the_command_line_on_launched_cpu_processes(tmp_path):
    """Two processes of one CPU device each: the host backend cannot span them, so ours falls back to lax (with a
    warning, where it used to wait for peers that never came) and the soak's plumbing runs end to end."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", NCCL_NVLS_ENABLE="0")
    env.pop("XLA_FLAGS", None)
    out = tmp_path / "soak.json"
    proc = subprocess.run([sys.executable, "-m", "jax_mscclpp.tools.soak", "--launch", "2", "--calls", "6",
                           "--programs", "3", "--max-bytes", "4K", "--out", str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "runs within one process" in proc.stderr
    result = json.loads(out.read_text())
    assert result["results"]["calls"] == 6 and result["results"]["processes"] == 2
    assert result["machine"]["process_count"] == 2


def test_the_cpu_reference_finds_each_shard_by_place(cpu_devices, monkeypatch):
    """--reference cpu: lax runs on a twin mesh of this process's CPU devices (here in another device order than
    ours), over data rebuilt by mesh position; each of our shards is compared with the reference's at the same
    place. Agreement passes, an off-by-one is caught, and the reproduction names the reference."""
    devices = list(cpu_devices[:8])[::-1]
    settings = runner.Settings(calls=16, programs=6, max_bytes=4096, seed=5, dtypes=("int32", "float32"),
                               reference="cpu")
    summary = runner.Soak(devices, settings, log=lambda line: None).run()
    assert summary["calls"] == 16 and summary["mismatches"] == 0 and summary["errors"] == 0, summary
    wrong = programs.collective
    monkeypatch.setattr(programs, "collective",
                        lambda config, ours: (lambda v: wrong(config, ours)(v) + 1) if ours else wrong(config, ours))
    summary = runner.Soak(devices, dataclasses.replace(settings, calls=4, dtypes=("int32",)),
                          log=lambda line: None).run()
    assert summary["mismatches"] == 4
    assert " --reference cpu --config '" in summary["mismatch_records"][0]["reproduce"]


def test_drawn_plans_fit_the_scratch_a_call_may_use(cpu_devices):
    """Every config the drawer gives a registered plan lowers (the host backend runs a call in half its scratch;
    the drawer once checked the whole and drew plans that the lowering then refused)."""
    soak = runner.Soak(list(cpu_devices[:8]), runner.Settings(programs=40, seed=0), log=lambda line: None)
    names = runner.register_plans("cpu")
    try:
        pool = soak.pool(names)
        drawn = [c for c in pool if c.algorithm.startswith(runner.PLAN_PREFIX)]
        assert drawn
        for config in drawn:
            programs.compile_config(config, soak.mesh(config))
    finally:
        runner.unregister_plans(names)
