"""The choices the selection owner makes beyond the rules (jax_mscclpp/selection.py): the protocol of an algorithm
chosen by size (selection.def's protocol rows, which the kernels' launchers apply too), whether a fused
all-reduce epilogue runs as its kernel or as the composition, and the refusal of an algorithm that needs what the
GPU communicator lacks (codes.def's `needs`: port channels, a SwitchChannel)."""

import importlib
import re
from pathlib import Path

import pytest

from jax_mscclpp import selection, selection_table
from jax_mscclpp._types import Collective

explain = importlib.import_module("jax_mscclpp.explain")  # the module, not the function the package exports

REPO = Path(__file__).resolve().parents[1]


def test_the_protocol_rows():
    """Each size-chosen algorithm's rows end in one that matches every call, and every row's protocols are that
    algorithm's LL and HB variants."""
    rows = selection_table.PROTOCOL_RULES
    variants = {"allpairs": ("allpairs_ll", "allpairs_hb"), "p2p": ("p2p_ll", "p2p_hb")}
    assert {r.algorithm for r in rows} == set(variants)
    for algorithm, (ll, hb) in variants.items():
        mine = [r for r in rows if r.algorithm == algorithm]
        assert all((r.ll, r.hb) == (ll, hb) for r in mine)
        last = mine[-1]
        assert (last.collective, last.placement, last.world) == (None, "any", None), last
    assert {r.placement for r in rows} <= {"own_gpu", "shared_gpu", "any"}


def first_row(algorithm, collective, world, placement):
    """The row that decides, read from the Python view of the table (the matcher's own logic, restated)."""
    for r in selection_table.PROTOCOL_RULES:
        if (r.algorithm == algorithm and r.collective in (None, collective) and r.placement in ("any", placement)
                and r.world in (None, world)):
            return r
    raise AssertionError("no row matches")


CASES = [(a, c, w, s) for a, cs in (("allpairs", (Collective.ALL_GATHER, Collective.REDUCE_SCATTER,
                                                  Collective.ALL_TO_ALL)), ("p2p", (Collective.PERMUTE,)))
         for c in cs for w in (2, 3, 4, 8) for s in (False, True)]


@pytest.mark.parametrize("algorithm,collective,world,shares_gpu", CASES)
def test_protocol_of(algorithm, collective, world, shares_gpu):
    """The matcher's protocol is the first matching row's: LL up to its bound, HB above, for every collective,
    world and placement; one protocol on the host backend, none for an algorithm that is its own."""
    row = first_row(algorithm, collective, world, "shared_gpu" if shares_gpu else "own_gpu")
    call = dict(collective=collective, world=world, shares_gpu=shares_gpu)
    assert selection.protocol_of(algorithm, "gpu", 1, **call) == row.ll
    assert selection.protocol_of(algorithm, "gpu", row.ll_max_block_bytes, **call) == row.ll
    assert selection.protocol_of(algorithm, "gpu", row.ll_max_block_bytes + 1, **call) == row.hb
    assert selection.protocol_of(algorithm, "cpu", 1, **call) is None  # the host backend has one protocol
    assert selection.protocol_of("1pa_ll", "gpu", 1, collective=Collective.ALL_REDUCE, world=world,
                                 shares_gpu=shares_gpu) is None


def test_the_rows_tell_placements_and_worlds_apart():
    """What the one-GPU and the two-GPU records measured: ranks on one GPU switch to HB at smaller blocks than two
    GPUs over NVLink, and at smaller blocks on 8 ranks than on 2."""
    gather = Collective.ALL_GATHER
    assert first_row("allpairs", gather, 2, "shared_gpu").ll_max_block_bytes < \
        first_row("allpairs", gather, 2, "own_gpu").ll_max_block_bytes
    assert first_row("allpairs", Collective.ALL_TO_ALL, 8, "shared_gpu").ll_max_block_bytes < \
        first_row("allpairs", Collective.ALL_TO_ALL, 2, "shared_gpu").ll_max_block_bytes


def test_the_launchers_read_the_protocol_rows():
    """No launcher keeps a size bound of its own: the size-chosen ones ask protocol.h, which expands the rows."""
    for source in ("kernels/collectives/all_pairs_ll.cu", "kernels/collectives/permute.cu"):
        text = (REPO / source).read_text()
        assert "protocol_algorithm(" in text, source
        assert not re.search(r"LLMaxBytes\s*=", text), source
    assert '#include "jax_mscclpp/selection.def"' in (REPO / "kernels/collectives/protocol.h").read_text()


def test_explain_prints_the_protocol():
    call = explain.ExplainedCall("all_gather", ("x",), 4096, "float32", "allpairs", None, "allpairs_ll")
    assert str(call) == "all_gather over ('x',) 4096 B float32: allpairs as allpairs_ll"
    assert explain.ExplainedCall("all_gather", ("x",), 4096, "float32", "allpairs", None).protocol is None


class _Comm:
    def __init__(self, fallback_reason=None):
        self.fallback_reason, self.scratch_bytes = fallback_reason, 1 << 20


def test_fuses():
    made = []

    def communicator(comm=_Comm()):
        made.append(comm)
        return comm

    def takes(comm):
        return True

    comm = selection.fuses(2, None, "bfloat16", communicator, takes)
    assert isinstance(comm, _Comm)
    made.clear()
    # The composition: a forced algorithm, one rank, a dtype without a kernel; no communicator made for them.
    assert selection.fuses(2, "2pa_hb", "float32", communicator, takes) is None
    assert selection.fuses(1, None, "float32", communicator, takes) is None
    assert selection.fuses(2, None, "int32", communicator, takes) is None
    assert made == []
    # ... and no mesh here, a communicator that falls back, a size the kernel does not take.
    assert selection.fuses(2, None, "float32", lambda: None, takes) is None
    assert selection.fuses(2, None, "float32", lambda: _Comm("peer access"), takes) is None
    assert selection.fuses(4, None, "float16", communicator, lambda c: False) is None


class _GpuComm(_Comm):
    def __init__(self, port_channels):
        super().__init__()
        self.port_channels = port_channels


def _decide(algorithm, world, port_channels):
    return selection.decide(Collective.ALL_REDUCE, "gpu", nbytes=4096 * world, world=world, block_count=1024 * world,
                            itemsize=4, algorithm=algorithm, communicator=lambda: _GpuComm(port_channels))


def test_the_needs_of_an_algorithm():
    """One check of codes.def's `needs` (runtime/select/rules.h, missing_need), which the NCCL-API library runs too:
    2PR needs port channels; 2PA-NVLS a SwitchChannel, which a GPU communicator has (emulated) up to 8 ranks."""
    missing = selection._select.missing_need
    assert missing("2pr", 8, False) == "port channels" and missing("2pr", 8, True) is None
    assert missing("2pa_nvls", 8, False) is None and missing("2pa_nvls", 9, True) == "a SwitchChannel"
    assert all(missing(name, 64, False) is None for name in ("1pa_ll", "2pa_hb", "allpairs", "p2p"))


def test_a_forced_algorithm_needing_what_the_communicator_lacks_is_refused():
    assert _decide("2pa_nvls", 8, False).algorithm == "2pa_nvls"
    with pytest.raises(ValueError, match="'2pa_nvls' needs a SwitchChannel, which a GPU communicator of 16 ranks"):
        _decide("2pa_nvls", 16, True)
    assert _decide("2pr", 16, True).algorithm == "2pr"
    with pytest.raises(ValueError, match=r"'2pr' needs port channels: .*port_channels=True"):
        _decide("2pr", 8, False)
