"""The NCCL-API library's selection against the JAX path's, through the GPU tests' harness module (the CUDA build;
no GPU needed): the one built-in table (selection.def), matched by runtime/select for nccl/runtime/selection.cc and
for jax_mscclpp.selection, gives the same algorithm for every GPU call; a tuning file as
python -m jax_mscclpp.tools.tune writes it is found where the JAX path finds it and read by the library
(runtime/select/tuning_file.h) into the rules the JAX path reads, and both then choose alike; files that are not
of the format are refused."""

import json

import pytest

from jax_mscclpp import selection, tuning_file
from jax_mscclpp._codes import CODE_TABLES, Collective

CODE = {row["name"]: row["code"] for row in CODE_TABLES["algorithm"]}
CODE["lax"] = -1
SIZES = sorted({0, 1, 4095, 4096, 16384, 16385, 32768, 32769, 1 << 20, (1 << 20) + 1, 4 << 20, (4 << 20) + 1,
                128 << 20, (128 << 20) + 1, 256 << 20, (256 << 20) + 1, 1 << 30})
TUNED = {
    "format": tuning_file.FORMAT,
    "topology": "gpu-nvidia-h200-2dev",
    "rules": [
        {"collective": "all_reduce", "platform": "gpu", "min_bytes": 0, "max_bytes": 4096, "algorithm": "2pa_ll",
         "margin": 1.08, "runner_up": "1pa_ll"},
        {"collective": "all_reduce", "platform": "cpu", "max_bytes": None, "algorithm": "1pa_ll"},
        {"collective": "all_reduce", "platform": "gpu", "max_bytes": 65536, "algorithm": "allpairs"},
        {"collective": "all_reduce", "platform": "gpu", "max_bytes": 2097152, "algorithm": "lax", "runner_up": None},
        {"collective": "all_gather", "platform": "gpu", "max_bytes": None, "algorithm": "lax"},
        {"collective": "all_to_all", "platform": "gpu", "max_bytes": 1 << 20, "algorithm": "allpairs"},
        {"collective": "all_reduce", "platform": "gpu", "max_bytes": 1 << 30, "algorithm": "2pr"},
    ],
}


def python_choice(collective, nbytes, world, lax_runs, shares_gpu):
    """The JAX path's algorithm code for a GPU call (-1: lax), where lax can run or cannot, between ranks that share
    a GPU or not."""
    if not lax_runs and shares_gpu:
        chosen = selection._ours_where_lax_cannot_run(collective, "gpu", nbytes, world)
    elif lax_runs:
        chosen = selection.choose(collective, "gpu", nbytes, None, world, shares_gpu)
    else:
        chosen = selection._matched(collective, "gpu", nbytes, world, lax_runs=False)
    return CODE[chosen]


def grid():
    for collective in Collective:
        for world in (2, 4, 8):
            for nbytes in SIZES:
                for can_run in (True, False):
                    for shares_gpu in (True, False):
                        yield collective, nbytes, world, can_run, shares_gpu


def test_the_built_in_table_chooses_alike(harness, monkeypatch):
    monkeypatch.setenv(tuning_file.ENV_FILE, "off")
    for call in grid():
        assert harness.nccl_select_algorithm([], int(call[0]), *call[1:]) == python_choice(*call), call


def test_a_tuning_file_reads_and_chooses_alike(harness, monkeypatch, tmp_path):
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps(TUNED, indent=1))
    rules, skipped = harness.nccl_parse_tuning_file(path.read_text())
    # The GPU rules in file order; those the library does not run are skipped with their names: "allpairs" does not
    # reduce, "2pr" needs port channels (which the library's communicators do not have).
    assert rules == [(int(Collective.ALL_REDUCE), 4096, CODE["2pa_ll"]),
                     (int(Collective.ALL_REDUCE), 2097152, -1),
                     (int(Collective.ALL_GATHER), -1, -1),
                     (int(Collective.ALL_TO_ALL), 1 << 20, CODE["allpairs"])]
    assert skipped == ["all_reduce -> allpairs", "all_reduce -> 2pr"]
    # The JAX path reads the same rules: it skips "allpairs" for all_reduce too, and runs 2pr where a communicator
    # has port channels. Without that rule both choose alike for every GPU call.
    runnable = tmp_path / "runnable.json"
    runnable.write_text(json.dumps({**TUNED, "rules": [r for r in TUNED["rules"] if r["algorithm"] != "2pr"]}))
    monkeypatch.setenv(tuning_file.ENV_FILE, str(runnable))
    with pytest.warns(RuntimeWarning, match="ignoring rule all_reduce -> 'allpairs'"):
        python_rules = tuning_file.rules_for("gpu")
    assert [(int(r.collective), -1 if r.max_bytes is None else r.max_bytes, CODE[r.algorithm])
            for r in python_rules] == rules
    for call in grid():
        assert harness.nccl_select_algorithm(rules, int(call[0]), *call[1:]) == python_choice(*call), call


@pytest.mark.parametrize("text,error", [
    ("", "not JSON at byte 0"),
    ('{"format": "jax_mscclpp.tuning/1", "rules": [', "not JSON"),
    ('{"format": "something/else", "rules": []}', "not a jax_mscclpp.tuning/1 file"),
    ('[1, 2]', "not a jax_mscclpp.tuning/1 file"),
    ('{"format": "jax_mscclpp.tuning/1", "rules": {}}', '"rules" is not a list'),
    ('{"format": "jax_mscclpp.tuning/1", "rules": [{"collective": "broadcast", "platform": "gpu", '
     '"algorithm": "lax"}]}', 'an unknown collective "broadcast"'),
    ('{"format": "jax_mscclpp.tuning/1", "rules": [{"collective": "all_reduce", "platform": "gpu", '
     '"algorithm": "lax", "max_bytes": -4}]}', "a max_bytes that is not a byte count"),
    ('{"format": "jax_mscclpp.tuning/1", "rules": [{"platform": "gpu"}]}', "without its collective"),
    ('{"format": "jax_mscclpp.tuning/1"} trailing', "text after the document"),
])
def test_files_not_of_the_format_are_refused(harness, text, error):
    with pytest.raises(ValueError, match=error):
        harness.nccl_parse_tuning_file(text)


def test_json_the_format_allows(harness):
    text = ('{"format":"jax_mscclpp.tuning/1","note":"caf\\u00e9 \\"tuned\\"","nested":{"a":[true,false,null,-1.5e3]},'
            '"rules":[{"collective":"all_gather","platform":"gpu","max_bytes":1e6,"algorithm":"allpairs"}]}')
    rules, skipped = harness.nccl_parse_tuning_file(text)
    assert rules == [(int(Collective.ALL_GATHER), 1000000, CODE["allpairs"])] and skipped == []


@pytest.mark.parametrize("kind", ["NVIDIA H200", "NVIDIA H100 80GB HBM3", "  odd__Kind!! 2 ", "", "A100-SXM4-40GB"])
@pytest.mark.parametrize("devices,processes", [(1, 1), (2, 1), (8, 2), (4, 4)])
def test_the_library_names_a_topology_as_the_jax_path(harness, kind, devices, processes):
    assert harness.nccl_topology_name(kind, devices, processes) == \
        tuning_file.topology_name("gpu", kind, devices, processes)


def test_the_library_finds_the_file_where_the_jax_path_does(harness, monkeypatch, tmp_path):
    topology = "gpu-nvidia-h200-2dev"
    for name in (tuning_file.ENV_FILE, tuning_file.ENV_CACHE_DIR, "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    expected = str(tmp_path / "home" / ".cache" / "jax_mscclpp" / "tuning" / f"{topology}.json")
    assert harness.nccl_tuning_file_path(topology) == tuning_file.default_file_of(topology) == expected
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert harness.nccl_tuning_file_path(topology) == tuning_file.default_file_of(topology)
    monkeypatch.setenv(tuning_file.ENV_CACHE_DIR, str(tmp_path / "cache"))
    assert harness.nccl_tuning_file_path(topology) == tuning_file.default_file_of(topology) == \
        str(tmp_path / "cache" / "tuning" / f"{topology}.json")
    monkeypatch.setenv(tuning_file.ENV_FILE, "")  # empty: as unset
    assert harness.nccl_tuning_file_path(topology) == tuning_file.default_file_of(topology)
    monkeypatch.setenv(tuning_file.ENV_FILE, str(tmp_path / "named.json"))
    assert harness.nccl_tuning_file_path(topology) == str(tmp_path / "named.json")
    for off in ("off", "None", "0", "FALSE"):
        monkeypatch.setenv(tuning_file.ENV_FILE, off)
        assert harness.nccl_tuning_file_path(topology) == ""
        assert tuning_file.active_path("gpu") is None


def test_the_library_reads_its_topologys_default_file(harness, monkeypatch, tmp_path):
    monkeypatch.delenv(tuning_file.ENV_FILE, raising=False)
    monkeypatch.setenv(tuning_file.ENV_CACHE_DIR, str(tmp_path))
    topology = harness.nccl_topology_name("NVIDIA H200", 2, 1)
    path = tmp_path / "tuning" / f"{topology}.json"
    path.parent.mkdir()
    path.write_text(json.dumps({**TUNED, "rules": [r for r in TUNED["rules"] if r["algorithm"] != "2pr"]}))
    expected, _ = harness.nccl_parse_tuning_file(path.read_text())
    assert expected and harness.nccl_tuned_rules(topology) == expected
    # Another topology's file does not exist: the built-in table alone, silently.
    assert harness.nccl_tuned_rules(harness.nccl_topology_name("NVIDIA H200", 4, 1)) == []
