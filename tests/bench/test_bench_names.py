"""The names the benchmark takes and how it calls ours: the drop-ins' names (psum, psum_scatter, ...) stand for
the benched ops on the command line as in the pytest fixtures, from one table; one dispatch table
(public_calls.py) calls ours for rewrite, the benchmark and the soak, and an op it does not have is an error,
never another collective. The plot draws ``--algorithm auto`` as one line, labelled at each point with the
algorithm it chose."""

import dataclasses
import glob
import json

import pytest

from jax_mscclpp import public_calls
from jax_mscclpp._types import Collective
from jax_mscclpp.collective_specs import OPERATION_NAMES
from jax_mscclpp.testing import fixtures
from jax_mscclpp.tools.bench import metrics, programs, report
from jax_mscclpp.tools.bench.sweep import Record
from jax_mscclpp.tools.soak import configs
from jax_mscclpp.tools.soak import programs as soak_programs
from tests.bench.bench_command import FAST, bench


def test_the_drop_ins_names_are_the_fixtures_names():
    assert programs.OP_NAMES is OPERATION_NAMES is fixtures.OP_ALIASES
    assert programs.resolve_ops(["psum", "psum_scatter", "all_gather", "all_to_all"]) == (
        ("all_reduce", "reduce_scatter", "all_gather", "all_to_all"), "sum")
    assert programs.resolve_ops(["pmax", "all_gather"]) == (("all_reduce", "all_gather"), "max")
    assert programs.resolve_ops(["all_reduce", "psum"], "sum") == (("all_reduce",), "sum")
    assert programs.resolve_ops(["all_reduce"], "min") == (("all_reduce",), "min")
    with pytest.raises(ValueError, match="unknown op 'broadcast'; known: all_reduce, "):
        programs.resolve_ops(["broadcast"])
    with pytest.raises(ValueError, match="different reductions"):
        programs.resolve_ops(["psum", "pmax"])
    with pytest.raises(ValueError, match=r"different reductions asked for: --redop \(max\), psum \(sum\)"):
        programs.resolve_ops(["psum"], "max")


def test_cli_takes_the_drop_ins_names(tmp_path):
    proc = bench("--ops", "psum,psum_scatter,all_gather,all_to_all", "--sizes", "1K", "--algorithm", "auto",
                 "--dtype", "float32", "--mode", "plain", "--out", str(tmp_path), *FAST, devices=2)
    assert proc.returncode == 0, proc.stderr
    (path,) = glob.glob(str(tmp_path / "bench_cpu_*.json"))
    doc = json.load(open(path))
    assert doc["settings"]["ops"] == ["all_reduce", "reduce_scatter", "all_gather", "all_to_all"]
    assert sorted(r["op"] for r in doc["records"]) == ["all_gather", "all_reduce", "all_to_all", "reduce_scatter"]
    assert all(r["check"] == "ok" for r in doc["records"])

    proc = bench("--ops", "pmax", "--sizes", "1K", "--algorithm", "auto", "--dtype", "int32", "--mode", "plain",
                 "--out", str(tmp_path / "max"), *FAST, devices=2)
    assert proc.returncode == 0, proc.stderr
    (path,) = glob.glob(str(tmp_path / "max" / "bench_cpu_*.json"))
    doc = json.load(open(path))
    assert doc["settings"]["redop"] == "max" and [r["redop"] for r in doc["records"]] == ["max"]


def test_an_op_without_a_dispatch_is_an_error():
    assert set(public_calls._PUBLIC_CALLS) == set(Collective)  # every collective of codes.def has its entry
    for unknown in ("all_reduce", 7):
        with pytest.raises(ValueError, match=f"{unknown!r} is not a collective with a public function; known: "
                                             "all_reduce, all_gather, reduce_scatter, all_to_all, permute"):
            public_calls.ours_collective(unknown, "x")
    with pytest.raises(ValueError, match=r"permute needs perm, its \(source, destination\) pairs"):
        public_calls.ours_collective(Collective.PERMUTE, "x")
    for build in (lambda: programs.ours_collective("broadcast", None), lambda: programs.lax_collective("broadcast"),
                  lambda: programs.layout("broadcast", 1024, 2, "float32")):
        with pytest.raises(ValueError, match="unknown op 'broadcast'"):
            build()
    config = configs.Config(op="all_to_all", dtype="float32", algorithm="auto", mesh_shape=(2,), mesh_axes=("x",),
                            axes=("x",), local_shape=(2,))
    for ours in (True, False):
        assert callable(soak_programs.collective(config, ours))
        with pytest.raises(ValueError, match="unknown op 'broadcast'; the soak draws: all_reduce"):
            soak_programs.collective(dataclasses.replace(config, op="broadcast"), ours)


def record(size, chosen, ours_us, algorithm="auto", lax_us=10.0):
    """An all_reduce record of 8 ranks; ``ours_us`` below zero is below noise."""
    return Record(op="all_reduce", size=size, count=size // 4, dtype="float32", algorithm=algorithm, chosen=chosen,
                  mode="plain", world=8, processes=1, redop="sum", chain=8, iters=3, warmup=1, check="ok",
                  ours_us=ours_us, ours_min_us=ours_us - 1, ours_max_us=abs(ours_us) + 1, lax_us=lax_us,
                  lax_min_us=lax_us - 1, lax_max_us=lax_us + 1,
                  ours_busbw=metrics.busbw_gbps("all_reduce", 8, size, ours_us),
                  lax_busbw=metrics.busbw_gbps("all_reduce", 8, size, lax_us),
                  speedup=metrics.speedup(ours_us, lax_us), ours_dispatch_us=50.0, lax_dispatch_us=60.0)


def test_the_plot_draws_auto_as_one_line_labelled_with_its_choices():
    records = [record(1024, "1pa_ll", 4.0), record(4096, "2pa_ll", -2.0), record(1 << 20, "2pa_hb", 30.0),
               record(1 << 22, "lax", 90.0, lax_us=90.0), record(1024, "1pa_ll", 5.0, algorithm="1pa_ll")]
    series = report.plot_series(records, "us")
    assert sorted(series) == ["1pa_ll", "auto", "lax"]
    assert series["auto"] == {1024: (4.0, "1pa_ll"), 4096: (None, "2pa_ll"), 1 << 20: (30.0, "2pa_hb"),
                              1 << 22: (90.0, "lax")}
    assert series["1pa_ll"] == {1024: (5.0, None)}  # an algorithm asked for by name: no labels
    assert series["lax"][1024] == (10.0, None)
    bandwidth = report.plot_series(records, "busbw", sizes=[1 << 20, 1 << 22])
    assert set(bandwidth["auto"]) == {1 << 20, 1 << 22} and "1pa_ll" not in bandwidth
    assert bandwidth["auto"][1 << 20] == (records[2].ours_busbw, "2pa_hb")
    # Modes (and dtypes) apart, each still one line.
    cmdbuf = [dataclasses.replace(r, mode="cmdbuf") for r in records[:2]]
    assert sorted(report.plot_series(records[:2] + cmdbuf, "us")) == [
        "auto (cmdbuf)", "auto (plain)", "lax (cmdbuf)", "lax (plain)"]
