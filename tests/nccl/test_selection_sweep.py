"""The JAX path and the NCCL-API library choose through one rule matcher (runtime/select): over a sweep of
(collective, bytes per rank, ranks, topology, tuning file), the Python selection (jax_mscclpp.selection, which asks
the package's module) and the library's (the GPU tests' harness module: the rules the library holds for the
topology, read by its own code from where it finds the file, and its select_algorithm) give the same algorithm,
where lax / NVIDIA's NCCL can run and where it cannot. A file may name algorithms the library does not run (port
or switch channels, the JAX path's compositions): wherever the JAX path picks one the library runs, both agree, and
the library chooses everywhere as the JAX path does over the file without the rules it does not run."""

import json
import warnings

import jax
import pytest

from jax_mscclpp import selection, tuning_file
from jax_mscclpp._codes import CODE_TABLES, Collective

CODE = {row["name"]: row["code"] for row in CODE_TABLES["algorithm"]}
CODE["lax"] = -1
SIZES = sorted({0, 1, 1000, 4096, 4097, 16384, 16385, 32768, 32769, 65536, 65537, 1 << 20, (1 << 20) + 1,
                2 << 20, (2 << 20) + 1, 4 << 20, (4 << 20) + 1, 128 << 20, (128 << 20) + 1, 256 << 20, 1 << 30})
WORLDS = (2, 3, 4, 8)
TOPOLOGIES = [("NVIDIA H200", 2, 1), ("NVIDIA H100 80GB HBM3", 8, 2), ("A100-SXM4-40GB", 4, 4)]
# What the library does not run of what the JAX path runs on GPUs: the algorithms that need port or switch
# channels, and the compositions.
NOT_IN_THE_LIBRARY = ("2pr", "2pa_nvls", "2ph")


def _rule(collective, max_bytes, algorithm, platform="gpu"):
    return {"collective": collective, "platform": platform, "min_bytes": 0, "max_bytes": max_bytes,
            "algorithm": algorithm, "margin": 0.1, "runner_up": "lax"}


FILES = {
    "no file": None,
    "ours for small sizes": [
        _rule("all_reduce", 8192, "2pa_ll"), _rule("all_reduce", 65536, "1pa_hb"),
        _rule("all_gather", 1 << 20, "allpairs"), _rule("permute", 4 << 20, "p2p"),
        _rule("all_to_all", 16384, "allpairs"), _rule("reduce_scatter", None, "allpairs"),
    ],
    "lax bands": [
        _rule("all_reduce", 4096, "lax"), _rule("all_reduce", 2 << 20, "2pa_hb"),
        _rule("all_reduce", 128 << 20, "lax"), _rule("all_gather", None, "lax"), _rule("permute", 1000, "lax"),
        _rule("all_reduce", None, "1pa_ll", platform="cpu"),
    ],
    "rules the library does not run": [
        _rule("all_reduce", 4096, "2pr"), _rule("all_reduce", 16384, "allpairs"), _rule("all_reduce", 65536, "2ph"),
        _rule("all_reduce", 1 << 20, "2pa_nvls"), _rule("all_reduce", 2 << 20, "1pa_ll"),
        _rule("all_gather", 65536, "2pr"), _rule("all_gather", 1 << 20, "lax"),
        _rule("all_to_all", None, "allpairs", platform="cpu"), _rule("all_to_all", 1 << 20, "allpairs"),
    ],
}


@pytest.fixture(autouse=True)
def _jax_started():
    jax.devices("cpu")  # the JAX path reads a topology's default file once JAX has started


def _write(path, rules):
    path.parent.mkdir(parents=True, exist_ok=True)
    tuning_file.write(str(path), {"topology": "sweep", "rules": rules})


def _python_choice(collective, nbytes, world, lax_runs, shares_gpu):
    """The JAX path's algorithm for a GPU call, as ``selection.decide`` makes it where no plan or request says (lax
    cannot run only between processes that share a GPU; the library can also hold no NVIDIA communicator for ranks
    of GPUs of their own: the matcher's answer there)."""
    if not lax_runs and shares_gpu:
        return selection._ours_where_lax_cannot_run(collective, "gpu", nbytes, world)
    if lax_runs:
        return selection.choose(collective, "gpu", nbytes, None, world, shares_gpu)
    return selection._matched(collective, "gpu", nbytes, world, lax_runs=False)


def _calls():
    return [(c, n, w, r, s) for c in Collective for n in SIZES for w in WORLDS for r in (True, False)
            for s in (True, False)]


def _python_choices():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # rules the JAX path does not run either ("allpairs")
        return {call: _python_choice(*call) for call in _calls()}


def _library_choices(harness, rules):
    return {call: harness.nccl_select_algorithm(rules, int(call[0]), *call[1:]) for call in _calls()}


@pytest.mark.parametrize("device_kind,devices,processes", TOPOLOGIES)
@pytest.mark.parametrize("where", ["default file", "named file"])
@pytest.mark.parametrize("name", sorted(FILES))
def test_both_paths_choose_alike(harness, monkeypatch, tmp_path, device_kind, devices, processes, where, name):
    topology = harness.nccl_topology_name(device_kind, devices, processes)
    assert topology == tuning_file.topology_name("gpu", device_kind, devices, processes)
    monkeypatch.setitem(tuning_file._topologies, "gpu", topology)  # the JAX path's devices span this topology
    monkeypatch.setenv(tuning_file.ENV_CACHE_DIR, str(tmp_path / "cache"))
    monkeypatch.delenv(tuning_file.ENV_FILE, raising=False)
    rules = FILES[name]
    path = tmp_path / "cache" / "tuning" / f"{topology}.json" if where == "default file" else tmp_path / "named.json"
    if rules is not None:
        _write(path, rules)
        if where == "named file":
            monkeypatch.setenv(tuning_file.ENV_FILE, str(path))
    assert (tuning_file.active_path("gpu") is None) == (rules is None)

    held = harness.nccl_tuned_rules(topology)  # what the library reads for the topology, by its own code
    library = _library_choices(harness, held)
    python = _python_choices()
    for call, chosen in python.items():
        if chosen not in NOT_IN_THE_LIBRARY:
            assert library[call] == CODE[chosen], (call, chosen)

    # Over the file without the rules it does not run, the JAX path chooses as the library does everywhere.
    runnable = tmp_path / "runnable.json"
    _write(runnable, [r for r in rules or () if r["algorithm"] not in NOT_IN_THE_LIBRARY])
    monkeypatch.setenv(tuning_file.ENV_FILE, str(runnable))
    assert {call: CODE[chosen] for call, chosen in _python_choices().items()} == library


@pytest.mark.parametrize("device_kind,devices,processes", TOPOLOGIES[:1])
@pytest.mark.parametrize("off", ["off", "NONE", " 0 "])
def test_off_means_the_built_in_table_on_both_paths(harness, monkeypatch, tmp_path, device_kind, devices,
                                                    processes, off):
    topology = harness.nccl_topology_name(device_kind, devices, processes)
    monkeypatch.setitem(tuning_file._topologies, "gpu", topology)
    monkeypatch.setenv(tuning_file.ENV_CACHE_DIR, str(tmp_path))
    _write(tmp_path / "tuning" / f"{topology}.json", FILES["ours for small sizes"])  # there, but switched off
    monkeypatch.setenv(tuning_file.ENV_FILE, off)
    assert harness.nccl_tuned_rules(topology) == [] and tuning_file.active_path("gpu") is None
    assert {call: CODE[chosen] for call, chosen in _python_choices().items()} == _library_choices(harness, [])


def test_the_sweep_tells_the_files_apart(harness, monkeypatch, tmp_path):
    """Each file of the sweep changes some choice of both paths (a sweep that matched nothing would prove
    nothing)."""
    monkeypatch.setenv(tuning_file.ENV_FILE, "off")
    built_in = _library_choices(harness, [])
    for name, rules in FILES.items():
        if rules is None:
            continue
        path = tmp_path / f"{name}.json"
        _write(path, rules)
        held, _ = harness.nccl_parse_tuning_file(path.read_text())
        assert _library_choices(harness, held) != built_in, name
        monkeypatch.setenv(tuning_file.ENV_FILE, str(path))
        assert {call: CODE.get(chosen) for call, chosen in _python_choices().items()} != built_in, name
        monkeypatch.setenv(tuning_file.ENV_FILE, "off")
