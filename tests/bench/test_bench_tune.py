"""The selection file: written by ``python -m jax_mscclpp.tools.tune``, read by ``selection.choose`` before its
defaults."""

import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

from jax_mscclpp import selection, tuning_file
from jax_mscclpp._types import Collective

AR = Collective.ALL_REDUCE


def _file(path, rules):
    tuning_file.write(str(path), {"topology": "test", "rules": rules})
    return str(path)


def _rule(max_bytes, algorithm, collective="all_reduce", platform="cpu"):
    return {"collective": collective, "platform": platform, "max_bytes": max_bytes, "algorithm": algorithm}


@pytest.fixture
def no_tuning(monkeypatch):
    monkeypatch.setenv(tuning_file.ENV_FILE, "off")


def _other_than(algorithm):
    """An all_reduce algorithm the CPU backend runs that is not ``algorithm``."""
    return next(a for a in ("1pa_ll", "2pa_ll", "2pa_hb") if a != algorithm)


def test_a_written_file_changes_the_choice(tmp_path, monkeypatch, no_tuning):
    small, large = selection.choose(AR, "cpu", 1024, None), selection.choose(AR, "cpu", 2 << 20, None)
    gather = selection.choose(Collective.ALL_GATHER, "cpu", 1024, None)
    tuned = _other_than(small)
    path = _file(tmp_path / "sel.json", [_rule(4096, tuned), _rule(1 << 20, "lax")])
    monkeypatch.setenv(tuning_file.ENV_FILE, path)
    assert selection.choose(AR, "cpu", 1024, None) == tuned
    assert selection.choose(AR, "cpu", 4096, None) == tuned  # bounds are inclusive
    assert selection.choose(AR, "cpu", 8192, None) == "lax"
    assert selection.choose(AR, "cpu", 2 << 20, None) == large  # past the file's rules: the defaults
    assert selection.choose(Collective.ALL_GATHER, "cpu", 1024, None) == gather  # no rule for it in the file
    # A request or JAX_MSCCLPP_ALGORITHM still overrides the file.
    assert selection.choose(AR, "cpu", 1024, small) == small
    monkeypatch.setenv("JAX_MSCCLPP_ALGORITHM", _other_than(tuned))
    assert selection.choose(AR, "cpu", 1024, selection.requested_algorithm(AR, "cpu", None)) == _other_than(tuned)


def test_the_table_shows_tuned_rules_first(tmp_path, monkeypatch):
    path = _file(tmp_path / "sel.json", [_rule(4096, "2pa_ll")])
    monkeypatch.setenv(tuning_file.ENV_FILE, path)
    table = selection.table()
    assert table[0] == {"collective": "all_reduce", "platform": "cpu", "world": None, "max_bytes": 4096,
                        "algorithm": "2pa_ll", "source": path}
    assert all(row["source"] == "default" for row in table[1:])
    assert len(table) == 1 + len(selection.DEFAULT_TABLE)


def test_a_rewritten_file_is_reread(tmp_path, monkeypatch):
    path = tmp_path / "sel.json"
    monkeypatch.setenv(tuning_file.ENV_FILE, _file(path, [_rule(4096, "2pa_ll")]))
    assert selection.choose(AR, "cpu", 1024, None) == "2pa_ll"
    _file(path, [_rule(4096, "2pa_hb"), _rule(8192, "1pa_ll")])
    assert selection.choose(AR, "cpu", 1024, None) == "2pa_hb"
    assert selection.choose(AR, "cpu", 8192, None) == "1pa_ll"


def test_bad_files_named_by_the_environment_are_errors(tmp_path, monkeypatch):
    monkeypatch.setenv(tuning_file.ENV_FILE, "off")
    default = selection.choose(AR, "cpu", 1024, None)
    missing = str(tmp_path / "missing.json")
    monkeypatch.setenv(tuning_file.ENV_FILE, missing)
    with pytest.raises(ValueError, match="JAX_MSCCLPP_TUNING_FILE=.*is not understood: the file does not exist"):
        selection.choose(AR, "cpu", 1024, None)
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    monkeypatch.setenv(tuning_file.ENV_FILE, str(broken))
    with pytest.raises(ValueError, match="is not understood: cannot read the selection file"):
        selection.choose(AR, "cpu", 1024, None)
    # the per-topology default file is no environment value: unreadable, it is ignored with a warning
    monkeypatch.delenv(tuning_file.ENV_FILE)
    with pytest.warns(RuntimeWarning, match="cannot read"):
        assert tuning_file.load_rules(str(broken)) == ()
    # A rule for an algorithm this build does not run there is dropped; the rest stand.
    tuned = _other_than(default)
    path = _file(tmp_path / "partly.json", [_rule(4096, "2pa_nvls"), _rule(8192, tuned)])
    monkeypatch.setenv(tuning_file.ENV_FILE, path)
    with pytest.warns(RuntimeWarning, match="2pa_nvls"):
        assert selection.choose(AR, "cpu", 1024, None) == tuned


def test_off_means_no_file(monkeypatch, tmp_path):
    default = None
    for value in ("off", "none", "0", ""):
        monkeypatch.setenv(tuning_file.ENV_FILE, value)
        assert tuning_file.active_path("cpu") is None
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            choice = selection.choose(AR, "cpu", 1024, None)
        assert default is None or choice == default
        default = choice


def test_default_path_is_per_topology(monkeypatch, tmp_path):
    monkeypatch.setenv(tuning_file.ENV_FILE, "off")
    default = selection.choose(AR, "cpu", 1024, None)
    monkeypatch.delenv(tuning_file.ENV_FILE)
    monkeypatch.setenv(tuning_file.ENV_CACHE_DIR, str(tmp_path))
    import jax

    n = len(jax.devices("cpu"))
    assert tuning_file.topology("cpu") == f"cpu-cpu-{n}dev"
    assert tuning_file.default_path("cpu") == os.path.join(str(tmp_path), "tuning", f"cpu-cpu-{n}dev.json")
    assert tuning_file.active_path("cpu") is None  # no file there yet
    _file(tuning_file.default_path("cpu"), [_rule(1 << 30, _other_than(default))])
    assert tuning_file.active_path("cpu") == tuning_file.default_path("cpu")
    assert selection.choose(AR, "cpu", 1024, None) == _other_than(default)


def test_rules_from_winners_merge_runs():
    rules = tuning_file.rules_from_winners("all_reduce", "cpu", [
        (1024, "1pa_ll", 0.5, "2pa_ll"), (2048, "1pa_ll", 0.2, "lax"), (4096, "2pa_hb", 0.1, "2pa_ll"),
        (8192, "2pa_hb", None, None),
    ])
    assert [(r["min_bytes"], r["max_bytes"], r["algorithm"], r["margin"], r["runner_up"]) for r in rules] == [
        (1024, 2048, "1pa_ll", 0.2, "lax"), (4096, 8192, "2pa_hb", 0.1, "2pa_ll"),
    ]


def test_tune_writes_a_file_the_runtime_follows(tmp_path, monkeypatch):
    out = tmp_path / "tuned.json"
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", tuning_file.ENV_FILE)}
    env.update(JAX_PLATFORMS="cpu", JAX_MSCCLPP_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run(
        [sys.executable, "-m", "jax_mscclpp.tools.tune", "--ops", "all_reduce,all_gather", "--sizes", "1K,4K",
         "--iters", "2", "--warmup", "0", "--devices", "4", "--output", str(out)],
        capture_output=True, text=True, timeout=120, env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"wrote {out}" in proc.stdout and "margin" in proc.stdout
    assert not (tmp_path / "cache").exists()  # --output: nothing in the default place
    doc = json.loads(out.read_text())
    assert doc["format"] == tuning_file.FORMAT and doc["platform"] == "cpu" and doc["world_size"] == 4
    assert doc["machine"]["device_count"] == 4
    by_op = {}
    for rule in doc["rules"]:
        by_op.setdefault(rule["collective"], []).append(rule)
        known = selection.PLATFORM_ALGORITHMS["cpu"][Collective[rule["collective"].upper()]]
        assert rule["algorithm"] in (*known, "lax")
        assert rule["margin"] is None or rule["margin"] >= 0
    assert set(by_op) == {"all_reduce", "all_gather"}
    assert by_op["all_reduce"][-1]["max_bytes"] == 4096 and by_op["all_gather"][-1]["max_bytes"] == 4096 // 4
    for m in doc["measurements"]:
        assert m["winner"] == min(m["times_us"], key=m["times_us"].get)
        if m["collective"] == "all_reduce":
            assert {"1pa_ll", "2pa_ll", "2pa_hb"} <= set(m["times_us"])

    # What the runtime picks now is what the file says.
    monkeypatch.setenv(tuning_file.ENV_FILE, str(out))
    for m in doc["measurements"]:
        collective = Collective[m["collective"].upper()]
        assert selection.choose(collective, "cpu", m["bytes"], None) == m["winner"]


def _record_row(setting, op, algorithm, size, time_us, status="ok", dtype="float32"):
    kind, n = setting.split(":")
    return {"setting": setting, "kind": kind, "ranks": int(n), "processes": int(n) if kind == "processes" else 1,
            "op": op, "algorithm": algorithm, "size": size, "dtype": dtype, "status": status, "time_us": time_us,
            "time_source": "host"}


def test_a_file_from_a_kernel_record(tmp_path, monkeypatch, no_tuning):
    """--from-record: per size the fastest algorithm the selection can name, of the one JAX setting, in the file of
    the topology it ran on, which the runtime then follows; rows of other settings, failed rows and names the
    selection cannot take play no part."""
    rng = np.random.default_rng(3)
    sizes = [1 << k for k in range(10, 17)]  # 1 KiB .. 64 KiB
    algorithms = ("1pa_ll", "2pa_ll", "2pa_hb")
    fastest = {size: algorithms[0] if size <= 4096 else algorithms[2] for size in sizes}
    rows = []
    for size in sizes:
        for algorithm in algorithms:
            base = float(rng.uniform(5.0, 50.0))
            rows.append(_record_row("devices:4", "all_reduce", algorithm, size,
                                    base if algorithm == fastest[size] else base * 3 + 60.0))
        rows.append(_record_row("devices:4", "all_reduce", "1pa_hb", size, 0.5, status="failed: check"))
        rows.append(_record_row("virtual:4", "all_reduce", "2pa_ll", size, 0.1))
        rows.append(_record_row("devices:4", "all_gather", "allpairs", size, float(rng.uniform(5.0, 50.0))))
        rows.append(_record_row("devices:4", "all_gather", "allpairs_ll", size, 0.1))  # not a name to select
    record = {"commit": "abc1234", "date": "2026-12-04", "rows": rows,
              "machine": {"platform": "cpu", "device_kind": "cpu", "gpu_count": 0}}
    path, out = tmp_path / "record.json", tmp_path / "tuned.json"
    path.write_text(json.dumps(record))
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", tuning_file.ENV_FILE)}
    env.update(JAX_PLATFORMS="cpu", JAX_MSCCLPP_CACHE_DIR=str(tmp_path / "cache"))
    tune = [sys.executable, "-m", "jax_mscclpp.tools.tune", "--from-record", str(path)]
    proc = subprocess.run([*tune, "--output", str(out)], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert doc["topology"] == tuning_file.topology_name("cpu", "cpu", 4, 1) and doc["world_size"] == 4
    assert doc["source"]["setting"] == "devices:4" and doc["source"]["commit"] == "abc1234"
    assert [(r["collective"], r["min_bytes"], r["max_bytes"], r["algorithm"]) for r in doc["rules"]] == [
        ("all_reduce", 1024, 4096, "1pa_ll"), ("all_reduce", 8192, 65536, "2pa_hb"),
        ("all_gather", 256, 16384, "allpairs")]  # all_gather: the input, a quarter of the record's size
    assert all(r["margin"] > 0.5 for r in doc["rules"][:2])

    monkeypatch.setenv(tuning_file.ENV_FILE, str(out))
    for size in sizes:
        assert selection.choose(Collective.ALL_REDUCE, "cpu", size, None) == fastest[size]

    # Without --output the file is the topology's default one; a virtual setting is refused, as is a missing one.
    proc = subprocess.run(tune, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "cache" / "tuning" / f"{doc['topology']}.json").exists()
    for setting, words in (("virtual:4", "not a topology a JAX program runs on"), ("devices:8", "no setting")):
        proc = subprocess.run([*tune, "--setting", setting], capture_output=True, text=True, timeout=120, env=env)
        assert proc.returncode == 2 and words in proc.stderr, proc.stderr
