"""Ranks as threads of the test process, for the tests that drive the runtime's rendezvous and exchanges through
the harness module: each rank's body runs in a thread of its own; what it returns, or the exception it raises, is
its result."""

import threading


def run_rank_threads(body, ranks, join_s: float = 120) -> dict:
    """{rank: body(rank) or the exception it raised} for every rank of ``ranks``, all started before any is joined;
    a rank still running after ``join_s`` seconds has no entry."""
    results = {}

    def rank_main(r):
        try:
            results[r] = body(r)
        except Exception as error:  # noqa: BLE001 - what the rank raised is the result
            results[r] = error

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in ranks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=join_s)
    return results
