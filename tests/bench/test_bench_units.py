"""The benchmark's arithmetic and plumbing, without devices: sizes, nccl-tests' formulas, layouts, stats,
algorithm lists, modes, the launcher's environment."""

import math

import pytest

from jax_mscclpp import selection
from jax_mscclpp._types import Collective
from jax_mscclpp.tools.bench import launcher, metrics, modes, programs, sweep, timing
from jax_mscclpp.tools.bench.units import format_size, parse_size, parse_sizes


@pytest.mark.parametrize(
    "text, expected",
    [("1K", 1024), ("64k", 65536), ("1KiB", 1024), ("1KB", 1024), ("1M", 1 << 20), ("1G", 1 << 30),
     ("4096", 4096), ("512B", 512), ("1.5M", 3 << 19), (" 2 K ", 2048)],
)
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "K", "1X", "-1K", "0", "1.3", "1e3"])
def test_parse_size_rejects(text):
    with pytest.raises(ValueError):
        parse_size(text)


def test_parse_sizes_lists_and_ranges():
    assert parse_sizes("1K,64K,1M") == [1024, 65536, 1 << 20]
    assert parse_sizes("1K:1G") == [1 << k for k in range(10, 31)]
    assert len(parse_sizes("1K:1G")) == 21
    assert parse_sizes("1K:16K:4") == [1024, 4096, 16384]
    assert parse_sizes("4K,1K:4K,1K") == [1024, 2048, 4096]  # sorted, distinct
    assert parse_sizes("1K:3K") == [1024, 2048]
    for bad in ("4K:1K", "1K:2K:1", "1K:2K:3:4", ",", "1K,,bogus"):
        with pytest.raises(ValueError):
            parse_sizes(bad)


def test_format_size_round_trips():
    for n in (1, 1000, 1024, 1536, 65536, 1 << 20, 3 << 29, 1 << 30):
        assert parse_size(format_size(n)) == n
    assert format_size(1024) == "1K" and format_size(1 << 30) == "1G" and format_size(1536) == "1.5K"


def test_bus_factors_are_nccl_tests():
    assert metrics.bus_factor("all_reduce", 8) == pytest.approx(2 * 7 / 8)
    for op in ("all_gather", "reduce_scatter", "all_to_all"):
        assert metrics.bus_factor(op, 8) == pytest.approx(7 / 8)
    assert metrics.bus_factor("all_reduce", 1) == 0.0
    with pytest.raises(ValueError):
        metrics.bus_factor("broadcast", 8)


def test_bandwidths():
    # 1 GiB in 10 ms: algbw = 107.37 GB/s; all_reduce on 8 ranks: busbw = algbw * 1.75.
    size, us = 1 << 30, 10_000.0
    algbw = metrics.algbw_gbps(size, us)
    assert algbw == pytest.approx(size / 1e-2 / 1e9)
    assert metrics.busbw_gbps("all_reduce", 8, size, us) == pytest.approx(algbw * 1.75)
    assert metrics.busbw_gbps("all_gather", 4, size, us) == pytest.approx(algbw * 0.75)
    assert metrics.algbw_gbps(size, 0.0) is None and metrics.algbw_gbps(size, -1.0) is None
    assert metrics.algbw_gbps(size, None) is None and metrics.algbw_gbps(size, math.nan) is None
    assert metrics.speedup(5.0, 10.0) == 2.0 and metrics.speedup(None, 1.0) is None


def test_stats_and_per_collective():
    s = metrics.Stats.of([3.0, 1.0, 2.0, 10.0])
    assert (s.median, s.min, s.max, s.count) == (2.5, 1.0, 10.0, 4)
    assert metrics.Stats.of([7.0]).median == 7.0
    with pytest.raises(ValueError):
        metrics.Stats.of([])
    # 64 chained calls took 100 + 64*5 us, the trivial program 100 us: 5 us per call.
    est = timing.per_collective([420.0, 420.0, 484.0], [90.0, 100.0, 110.0], 64)
    assert est.median == pytest.approx(5.0) and est.max == pytest.approx(6.0)


def test_interleaved_rotates_and_counts():
    calls = []
    progs = {name: (lambda name=name: calls.append(name), ()) for name in "abc"}
    samples = timing.interleaved(progs, iters=3, warmup=1)
    assert {k: len(v) for k, v in samples.items()} == {"a": 3, "b": 3, "c": 3}
    assert calls == list("abc") + list("abc") + list("bca") + list("cab")


@pytest.mark.parametrize(
    "op, size, world, itemsize, expected",
    [
        ("all_reduce", 1024, 8, 4, (1024, 256, 256)),
        ("all_reduce", 1026, 8, 4, (1024, 256, 256)),
        ("all_gather", 1024, 8, 4, (1024, 32, 256)),
        ("reduce_scatter", 1024, 8, 2, (1024, 512, 64)),
        ("all_to_all", 1000, 8, 4, (992, 248, 248)),
        ("all_gather", 16, 8, 4, (32, 1, 8)),  # never below one element per block
    ],
)
def test_layout(op, size, world, itemsize, expected):
    dtype = {4: "float32", 2: "bfloat16"}[itemsize]
    lay = programs.layout(op, size, world, dtype)
    assert (lay.size, lay.in_elems, lay.out_elems) == expected
    assert lay.selection_bytes == lay.in_elems * itemsize


def test_expand_algorithms():
    notices = []
    cpu_all_reduce = [a for a in selection.PLATFORM_ALGORITHMS["cpu"][Collective.ALL_REDUCE]
                      if a not in sweep.MULTI_AXIS_ALGORITHMS]
    assert {"1pa_ll", "2pa_ll", "2pa_hb"} <= set(cpu_all_reduce)
    assert sweep.expand_algorithms(["all"], "all_reduce", "cpu", notices) == cpu_all_reduce + ["auto"]
    assert sweep.expand_algorithms(["all"], "all_gather", "cpu") == ["allpairs", "auto"]
    # Names of other ops are dropped silently, names this platform does not run with a notice.
    assert sweep.expand_algorithms(["1pa_ll", "allpairs", "lax"], "all_gather", "cpu") == ["allpairs"]
    assert sweep.expand_algorithms(["2pr", "auto"], "all_reduce", "cpu", notices) == ["auto"]
    assert any("2pr" in n for n in notices)
    assert sweep.expand_algorithms(["all"], "all_reduce", "cuda") == ["auto"]


def test_settings_validate():
    with pytest.raises(ValueError):
        sweep.Settings(ops=("broadcast",), sizes=(1024,))
    with pytest.raises(ValueError):
        sweep.Settings(sizes=(1024,), algorithms=("bogus",))
    with pytest.raises(ValueError):
        sweep.Settings(sizes=(1024,), modes=("graph",))
    with pytest.raises(ValueError):
        sweep.Settings(sizes=(1024,), iters=0)


def test_chain_shrinks_for_large_messages():
    assert sweep.effective_chain(64, 1 << 20) == 64
    assert sweep.effective_chain(64, 1 << 30) == 4
    assert sweep.effective_chain(64, 8 << 30) == 2
    assert sweep.effective_chain(1, 8 << 30) == 1


def test_modes():
    assert modes.compiler_options("plain", "cpu") is None
    with pytest.raises(modes.ModeNotApplicable):
        modes.compiler_options("cmdbuf", "cpu")
    assert modes.compiler_options("plain", "gpu") == {"xla_gpu_enable_command_buffer": ""}
    assert "CUSTOM_CALL" in modes.compiler_options("cmdbuf", "gpu")["xla_gpu_enable_command_buffer"]


def test_unavailable_reasons():
    assert sweep.ours_unavailable_reason("cpu", 1) is None
    assert "one process" in sweep.ours_unavailable_reason("cpu", 2)
    assert sweep.ours_unavailable_reason("gpu", 2) is None  # GPUs: one process or one per GPU
    assert "no jax_mscclpp backend" in sweep.ours_unavailable_reason("rocm", 1)


def test_launcher_environment_keeps_nvls_off():
    env = launcher.child_env(1, 4, "localhost:1234", {"JAX_MSCCLPP_NVLS": "1", "NCCL_NVLS_ENABLE": "1", "PATH": "/bin"})
    assert env["NCCL_NVLS_ENABLE"] == "0" and "JAX_MSCCLPP_NVLS" not in env
    assert env[launcher.ENV_PROCESS_ID] == "1" and env[launcher.ENV_NUM_PROCESSES] == "4"
    assert env[launcher.ENV_COORDINATOR] == "localhost:1234" and env["PATH"] == "/bin"
    assert "--xla_force_host_platform_device_count=1" in env["XLA_FLAGS"]
    kept = launcher.child_env(0, 2, "h:1", {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"})
    assert kept["XLA_FLAGS"] == "--xla_force_host_platform_device_count=2"
    assert launcher.strip_launch(["--launch", "2", "--ops", "x", "--launch=3", "--out", "d"]) == ["--ops", "x", "--out", "d"]
