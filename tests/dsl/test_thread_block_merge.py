"""Merging a rank's thread blocks that only order each other (jax_mscclpp/dsl/thread_block_merge.py): MSCCLang's
all-pairs all-reduce, a thread block per peer and one that reduces as MSCCL-IR schedules it, becomes the thread
block our DSL's two-phase all-reduce runs; instances stay apart; a plan with nothing to merge is returned as it is;
where a merged plan does not verify the next, more cautious order is tried, and at last the plan itself."""

import numpy as np
import pytest

from jax_mscclpp.dsl import library, run_plan, verify
from jax_mscclpp.dsl import thread_block_merge
from jax_mscclpp.dsl.thread_block_merge import merge_thread_blocks
from tests.dsl import msccl_programs


def ops_of(plan, rank=0, tb=0):
    return [op["op"] for op in plan["ranks"][rank]["threadblocks"][tb]["ops"]]


def self_channels(plan):
    return [c for r, rank in enumerate(plan["ranks"]) for c in rank["channels"] if c.get("peer") == r]


@pytest.mark.parametrize("n", [2, 4, 8])
def test_all_pairs_all_reduce_merges_into_what_our_dsl_runs(n):
    for protocol, ours in (("LL", "allreduce_2pa_ll"), ("Simple", "allreduce_2pa_hb")):
        per_peer = msccl_programs.allreduce_allpairs(n, protocol).to_program().lower()
        merged, dsl = merge_thread_blocks(per_peer), library.PROGRAMS[ours](n).lower()
        assert all(len(rank["threadblocks"]) == n for rank in per_peer["ranks"]) and self_channels(per_peer)
        assert all(len(rank["threadblocks"]) == 1 for rank in merged["ranks"]) and not self_channels(merged)
        for rank in range(n):
            assert len(merged["ranks"][rank]["channels"]) == len(dsl["ranks"][rank]["channels"])
            if protocol == "LL":  # puts, one reduction of every peer's packets sending the result, reads
                assert ops_of(merged, rank) == ops_of(dsl, rank)
            else:  # the same operations; each copy out right after its wait
                assert sorted(ops_of(merged, rank)) == sorted(ops_of(dsl, rank))
        assert verify(merged) is merged


def test_the_merged_plan_computes_what_the_thread_block_per_peer_plan_computes(rng):
    for protocol in ("LL", "Simple"):
        per_peer = msccl_programs.allreduce_allpairs(4, protocol).to_program().lower()
        merged = merge_thread_blocks(per_peer)
        for op, dtype in (("sum", np.float64), ("max", np.int32)):
            inputs = [(rng.standard_normal(4 * 33) * 1000).astype(dtype) for _ in range(4)]
            for ours, theirs in zip(run_plan(merged, inputs, op), run_plan(per_peer, inputs, op)):
                np.testing.assert_allclose(ours, theirs, rtol=1e-12)


def test_instances_keep_their_own_thread_blocks():
    plan = msccl_programs.allreduce_allpairs(4, "LL", instances=3).lower()
    assert all(len(rank["threadblocks"]) == 3 for rank in plan["ranks"])
    assert ops_of(plan, tb=2) == ops_of(plan, tb=0)


def test_a_plan_with_nothing_to_merge_is_returned_as_it_is():
    for plan in (library.allreduce_2pa_ll(4).lower(), msccl_programs.allreduce_ring(4).lower()):
        assert merge_thread_blocks(plan) is plan


def test_an_order_that_does_not_verify_gives_way_to_a_more_cautious_one(monkeypatch):
    """The first order whose plan verifies is kept (sends past waits, then past data only, then where the run
    put them); where none does, the plan itself."""
    per_peer = msccl_programs.allreduce_allpairs(4, "Simple").to_program().lower()
    boldest = merge_thread_blocks(per_peer)
    real_verify = thread_block_merge.verify_plan
    for refusals, expected in ((1, "sends behind every wait"), (3, "the plan itself")):
        tried = []

        def verify_plan(plan, refusals=refusals, tried=tried):
            tried.append(plan)
            if len(tried) <= refusals:
                raise thread_block_merge.VerificationError("race", "refused by the test")
            return real_verify(plan)

        monkeypatch.setattr(thread_block_merge, "verify_plan", verify_plan)
        merged = merge_thread_blocks(per_peer)
        if expected == "the plan itself":
            assert merged is per_peer and len(tried) == 3
        else:
            assert len(tried) == 2 and len(merged["ranks"][0]["threadblocks"]) == 1
            assert merged != boldest and real_verify(merged) is merged
            # the results' sends stay behind the waits the run put before them: only the first joins the reduction
            # (reduce_put), where all three do when they may pass waits
            assert ops_of(merged).count("put_with_signal") == ops_of(boldest).count("put_with_signal") + 2
