"""The NCCL-API library's rendezvous (nccl/runtime/bootstrap.h) and unique id, through the GPU tests' harness
module (the CUDA build; no GPU needed): ranks meet at a root and all-gather rounds of bytes in rank order; a rank
that never comes fails every other rank's round within the timeout, with an error naming the round and the rank; a
rank that reports a failure fails every other rank's round at once, naming it and its reason; a client of another
nonce is refused, and connections that never say who they are (or say it wrongly) neither hold up nor take the
place of the ranks; our id round-trips and the real library's is never taken for ours."""

import socket
import struct
import time

import pytest

from tests.rank_threads import run_rank_threads


def run_ranks(harness, root, nranks, rounds, ranks=None, nranks_claimed=None):
    """Each rank of `ranks` (default: all) in its own thread: connect, then `rounds` all-gathers of its own frames.
    {rank: [frames of each round] or the exception it raised}."""

    def rank_main(r):
        client = harness.BootstrapClient(root, r, nranks_claimed or nranks)
        return [client.all_gather(f"rank {r} round {k}".encode() * (r + 1)) for k in range(rounds)]

    return run_rank_threads(rank_main, ranks if ranks is not None else range(nranks))


def test_rounds_of_all_gather_in_rank_order(harness):
    root = harness.bootstrap_root()
    results = run_ranks(harness, root, 4, 3)
    for r in range(4):
        assert results[r] == [[f"rank {q} round {k}".encode() * (q + 1) for q in range(4)] for k in range(3)]


@pytest.fixture
def set_timeout(harness):
    """set_timeout(seconds): the process's timeout for this test, restored after it."""
    before = harness.timeout_seconds()
    yield harness.set_timeout_seconds
    harness.set_timeout_seconds(before)


def test_a_missing_rank_fails_the_others_within_the_timeout(harness, set_timeout):
    set_timeout(2.0)
    root = harness.bootstrap_root()
    results = run_ranks(harness, root, 3, 1, ranks=[0, 1])
    for r in (0, 1):
        assert isinstance(results[r], RuntimeError), results[r]
        message = str(results[r])
        assert "a test round" in message and f"rank {r} of 3" in message and "did not hear from every rank" in message


@pytest.mark.parametrize("failing", [0, 1, 2])
def test_a_rank_that_fails_fails_every_other_rank_naming_it(harness, set_timeout, failing):
    """A rank's failure takes the place of its frame: every other rank's round, whether it came before the failure
    or after, raises at once (far within the timeout) with the failed rank and its reason, not a timeout."""
    set_timeout(30.0)
    root = harness.bootstrap_root()

    def rank_main(r):
        client = harness.BootstrapClient(root, r, 3)
        client.all_gather(b"first")
        if r == failing:
            client.report_failure("out of device memory (a test's)")
            return client  # kept open: the failure must reach the others before this rank leaves
        if r == 2:
            time.sleep(0.5)  # enters the round after the failure
        return client.all_gather(b"second")

    start = time.monotonic()
    results = run_rank_threads(rank_main, range(3), join_s=60)
    elapsed = time.monotonic() - start
    for r in set(range(3)) - {failing}:
        assert isinstance(results[r], RuntimeError), results[r]
        assert str(results[r]) == f"a test round: rank {failing} of 3 failed: out of device memory (a test's)"
    assert elapsed < 10, f"the others heard of the failure after {elapsed:.1f} s (timeout 30 s)"
    with pytest.raises(RuntimeError, match=f"rank {failing} of 3 failed earlier"):
        results[failing].all_gather(b"after")


def connect_to(root) -> socket.socket:
    """A plain TCP connection to the root (its address and port come in network byte order)."""
    ipv4, port, _ = root
    address = socket.inet_ntoa(struct.pack("=I", ipv4))
    return socket.create_connection((address, struct.unpack(">H", struct.pack("=H", port))[0]), timeout=10)


def test_silent_and_foreign_connections_do_not_hold_up_the_ranks(harness, set_timeout):
    set_timeout(5.0)
    root = harness.bootstrap_root()
    silent = connect_to(root)  # connects first and never sends a byte
    half = connect_to(root)
    half.sendall(b"JMNB")  # the start of a hello, never finished
    foreign = connect_to(root)
    foreign.sendall(bytes(range(24)))  # a whole hello-sized message of another protocol
    start = time.monotonic()
    results = run_ranks(harness, root, 3, 2)
    elapsed = time.monotonic() - start
    for r in range(3):
        assert results[r] == [[f"rank {q} round {k}".encode() * (q + 1) for q in range(3)] for k in range(2)]
    assert elapsed < 2.5, f"the ranks waited {elapsed:.1f} s behind connections that never said who they are"
    for connection in (silent, half, foreign):
        connection.close()


def test_our_unique_id(harness):
    root = harness.bootstrap_root()
    encoded, same_root, foreign_taken = harness.unique_id_round_trip(root)
    assert len(encoded) == 128 and encoded[:8] == b"JMSCUQID"
    assert same_root and not foreign_taken
    assert harness.bootstrap_root()[2] != root[2], "two roots share a nonce"
