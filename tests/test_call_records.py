"""The words a GPU launch posts for its call (kernels/include/jax_mscclpp/call_inbox.cuh) and how error records that
carry them read (runtime/gpu/runtime_config.cc). Records are made here, so this needs the CUDA build's test module
(tests/harness), not a GPU; tests/gpu/test_call_check.py makes the kernels write them."""

import pytest

from jax_mscclpp._types import CODE_TABLES, DTYPE_CODES
from tests.harness import native_module

harness = native_module()
pytestmark = pytest.mark.skipif(harness is None, reason="needs the CUDA build's test module (tests/harness)")

COLLECTIVE = {row["name"]: row["code"] for row in CODE_TABLES["collective"]}
OP = {row["name"]: row["code"] for row in CODE_TABLES["reduce_op"]}
ALGORITHM = {row["name"]: row["code"] for row in CODE_TABLES["algorithm"]}
SAME_CALLS = "every rank of a group must make the same collective calls in the same order"


def words(collective="all_reduce", op="sum", algorithm="1pa_ll", dtype="float32", count=1000, variant=0):
    return harness.call_words(COLLECTIVE[collective], OP[op], ALGORITHM[algorithm], DTYPE_CODES[dtype], count,
                              variant)


def record(kind, mine, theirs, mine_epoch=7, theirs_epoch=7, plans=None, rank=0, peer=1, interrupted=None):
    codes = harness.wait_op_codes()
    return harness.describe_record(codes[kind], rank, peer, mine_epoch, theirs_epoch, mine, mine_epoch, theirs,
                                   theirs_epoch, plans or {}, codes[interrupted] if interrupted else 0)


def test_words_tell_calls_apart_and_ignore_what_a_collective_does_not_use():
    base = words()
    assert words() == base
    for other in (words(op="max"), words(dtype="int32"), words(count=1001), words(algorithm="2pa_ll"),
                  words(collective="all_gather"), words(variant=harness.plan_fingerprint("allreduce_2pr"))):
        assert other != base
    # all_gather and all_to_all reduce nothing: their op is not part of the call
    assert words("all_gather", op="max") == words("all_gather", op="sum")
    assert words("all_to_all", op="min") == words("all_to_all", op="sum")
    assert words("reduce_scatter", op="max") != words("reduce_scatter", op="sum")


def test_plan_fingerprints_are_stable_and_tagged():
    a, b = harness.plan_fingerprint("allreduce_2pr"), harness.plan_fingerprint("allreduce_2pa_ll")
    assert a == harness.plan_fingerprint("allreduce_2pr") and a != b
    assert a & 0x80000000 and not a & 0x40000000  # kCallPlan, never mistaken for an epilogue
    e = harness.epilogue_variant(1, 4096)
    assert e & 0x40000000 and not e & 0x80000000 and e & 0xFFFFFF == 4096


def test_a_mismatch_names_both_calls():
    msg = record("call_mismatch", words(op="sum"), words(op="max"))
    assert msg == ("jax_mscclpp: mismatched collective calls: rank 0 called all_reduce(sum) of 1000 float32 per "
                   "block, algorithm 1pa_ll (launch epoch 7) but peer 1 called all_reduce(max) of 1000 float32 per "
                   f"block, algorithm 1pa_ll; {SAME_CALLS}")


def test_a_peer_in_a_later_launch_is_named_so():
    msg = record("call_mismatch", words(), words(count=500), theirs_epoch=9)
    assert "peer 1 called all_reduce(sum) of 500 float32 per block, algorithm 1pa_ll (already at launch epoch 9)" in msg


def test_plans_are_named_where_bound_and_by_fingerprint_elsewhere():
    f = harness.plan_fingerprint("allreduce_2pr")
    mine = words(algorithm="plan", variant=f)
    theirs = words(algorithm="1pa_ll")
    named = record("call_mismatch", mine, theirs, plans={f: "allreduce_2pr"})
    assert "rank 0 called all_reduce(sum) of 1000 float32 per block, plan 'allreduce_2pr'" in named, named
    anonymous = record("call_mismatch", mine, theirs)
    assert f"plan '#{f:08x}'" in anonymous, anonymous


def test_a_fused_epilogue_is_part_of_the_call():
    fused = words(dtype="bfloat16", count=32768, variant=harness.epilogue_variant(1, 4096))
    msg = record("call_mismatch", fused, words(dtype="bfloat16", count=32768))
    assert "algorithm 1pa_ll with the fused epilogue residual_rmsnorm (rows of 4096) (launch epoch 7)" in msg, msg


def test_a_timeout_says_which_calls_the_ranks_were_in():
    differ = record("packet_read", words(algorithm="2pr"), words(algorithm="2pa_hb"))
    assert differ.startswith("jax_mscclpp: rank 0 timed out after 5.000 s"), differ
    assert ("; rank 0 was in all_reduce(sum) of 1000 float32 per block, algorithm 2pr (launch epoch 7), peer 1's "
            "latest call is all_reduce(sum) of 1000 float32 per block, algorithm 2pa_hb (launch epoch 7): "
            f"mismatched collective calls; {SAME_CALLS}") in differ, differ
    # the same call, the peer behind: a lost or late peer, not a mismatch
    behind = record("packet_read", words(), words(), theirs_epoch=6)
    assert "peer 1's latest call is all_reduce(sum) of 1000 float32 per block, algorithm 1pa_ll (launch epoch 6)" \
        in behind and "mismatched" not in behind, behind
    silent = record("packet_read", words(), (0, 0, 0), theirs_epoch=0)
    assert silent.endswith("; rank 0 was in all_reduce(sum) of 1000 float32 per block, algorithm 1pa_ll (launch "
                           "epoch 7), peer 1 has posted no call"), silent
    # a kernel that posts no call (the primitives' tests): the record as it always read
    bare = record("packet_read", (0, 0, 0), (0, 0, 0), mine_epoch=0, theirs_epoch=0)
    assert bare.endswith("[block 0, thread 0]"), bare


def test_a_wait_stopped_by_a_peer_that_failed_the_communicator_says_so():
    """The wait of a rank whose peer found mismatched calls stops at once (the failed word) and names that peer,
    the wait it was in and both calls."""
    msg = record("peer_failed", words(count=2000), words(count=1000), rank=1, peer=0, interrupted="packet_read")
    assert msg.startswith("jax_mscclpp: rank 1 stopped after 5.000 s in LL packet read (waiting for 7, last saw 7) "
                          "because rank 0 failed the communicator on mismatched collective calls"), msg
    assert ("rank 1 was in all_reduce(sum) of 2000 float32 per block, algorithm 1pa_ll (launch epoch 7), rank 0's "
            "latest call is all_reduce(sum) of 1000 float32 per block, algorithm 1pa_ll (launch epoch 7)") in msg, msg
    assert msg.endswith(SAME_CALLS), msg
