"""The NCCL-API library's rendezvous (nccl/runtime/bootstrap.h) and unique id, through the GPU tests' harness
module (the CUDA build; no GPU needed): ranks meet at a root and all-gather rounds of bytes in rank order; a rank
that never comes fails every other rank's round within the timeout, with an error naming the round and the rank;
a client of another nonce is refused; our id round-trips and the real library's is never taken for ours."""

import threading

import pytest



def run_ranks(harness, root, nranks, rounds, ranks=None, nranks_claimed=None):
    """Each rank of `ranks` (default: all) in its own thread: connect, then `rounds` all-gathers of its own frames.
    {rank: [frames of each round] or the exception it raised}."""
    results = {}

    def rank_main(r):
        try:
            client = harness.BootstrapClient(root, r, nranks_claimed or nranks)
            results[r] = [client.all_gather(f"rank {r} round {k}".encode() * (r + 1)) for k in range(rounds)]
        except Exception as error:  # noqa: BLE001 - what the rank raised is the result
            results[r] = error

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in (ranks if ranks is not None else range(nranks))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return results


def test_rounds_of_all_gather_in_rank_order(harness):
    root = harness.bootstrap_root()
    results = run_ranks(harness, root, 4, 3)
    for r in range(4):
        assert results[r] == [[f"rank {q} round {k}".encode() * (q + 1) for q in range(4)] for k in range(3)]


@pytest.fixture
def two_second_timeout(harness):
    before = harness.timeout_seconds()
    harness.set_timeout_seconds(2.0)
    yield
    harness.set_timeout_seconds(before)


def test_a_missing_rank_fails_the_others_within_the_timeout(harness, two_second_timeout):
    root = harness.bootstrap_root()
    results = run_ranks(harness, root, 3, 1, ranks=[0, 1])
    for r in (0, 1):
        assert isinstance(results[r], RuntimeError), results[r]
        message = str(results[r])
        assert "a test round" in message and f"rank {r} of 3" in message and "did not hear from every rank" in message


def test_our_unique_id(harness):
    root = harness.bootstrap_root()
    encoded, same_root, foreign_taken = harness.unique_id_round_trip(root)
    assert len(encoded) == 128 and encoded[:8] == b"JMSCUQID"
    assert same_root and not foreign_taken
    assert harness.bootstrap_root()[2] != root[2], "two roots share a nonce"
