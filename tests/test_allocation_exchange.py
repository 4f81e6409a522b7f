"""The allocation exchange of ranks in several processes (runtime/gpu/allocation_exchange.h), through the GPU tests'
harness module (the CUDA build; no GPU needed): ranks, here threads standing for processes (each told its peers'
process identities), map each other's outboxes and agree call by call whether a call runs in place. Without a GPU no
buffer is reachable, so every call agrees on scratch on every rank; the words alternate by parity and stay in step
over many calls whatever the ranks' pace; a rank that does not reach a call fails the others' agreement within the
timeout, naming it and the call; a communicator whose ranks share a process never agrees."""

import random
import time

from tests.rank_threads import run_rank_threads


def connected(harness, nranks, processes=None):
    """`nranks` exchanges, each told every peer's outbox and process (default: a process of its own each); a peer
    given the rank's own process is told this process's identity, as a rank of this process would be."""
    processes = processes or [100000 + r for r in range(nranks)]
    ranks = [harness.AllocationExchange(r, nranks) for r in range(nranks)]
    for r, x in enumerate(ranks):
        for q, peer in enumerate(ranks):
            if q != r:
                same = processes[q] == processes[r]
                x.add_peer(q, peer.name, harness.this_process_identity() if same else processes[q])
    return ranks


def run_calls(ranks, calls, timeout_s, seed=0):
    """Each rank in a thread agrees on calls[rank] calls of null buffers, at a random pace: {rank: [agreed, ...] or
    the exception it raised}."""

    def rank_main(r):
        pace = random.Random(seed * 100 + r)
        agreed = []
        for _ in range(calls[r]):
            if pace.random() < 0.1:
                time.sleep(pace.random() * 0.003)
            agreed.append(ranks[r].agree(0, 0, 0, 0, timeout_s)[0])
        return agreed

    return run_rank_threads(rank_main, range(len(ranks)))


def test_every_call_agrees_on_scratch_in_step(harness):
    ranks = connected(harness, 3)
    assert all(x.covers_every_peer() for x in ranks)
    results = run_calls(ranks, [300, 300, 300], timeout_s=30)
    assert results == {r: [False] * 300 for r in range(3)}


def test_a_rank_that_does_not_reach_a_call_is_named(harness):
    ranks = connected(harness, 3)
    started = time.monotonic()
    results = run_calls(ranks, [5, 5, 4], timeout_s=1.0, seed=1)
    assert results[2] == [False] * 4
    for r in (0, 1):
        assert isinstance(results[r], RuntimeError), results[r]
        assert "rank 2 did not reach call 5" in str(results[r]), str(results[r])
    assert time.monotonic() - started < 20


def test_ranks_that_share_a_process_never_agree(harness):
    lone = harness.AllocationExchange(0, 2)
    assert not lone.covers_every_peer()  # no peer yet
    ranks = connected(harness, 2, processes=[7, 7])
    assert not any(x.covers_every_peer() for x in ranks)
    ranks = connected(harness, 3)
    assert all(x.covers_every_peer() for x in ranks)
