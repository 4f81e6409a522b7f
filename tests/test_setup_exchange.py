"""A GPU communicator's setup across processes (jax_mscclpp/setup_exchange.py): it succeeds on every process or
fails on every one, each failure naming the rank or process where it began, at once rather than at the timeout.

Processes are threads here, over an in-memory key-value store that behaves as JAX's (a get waits for its key until
a timeout, a set replaces); each runs the setup's steps as the communicator does (make its ranks, publish their
frames, fetch every peer's, connect, the ready round), failing at the step a case names. One case runs two real
processes of a jax.distributed job over JAX's own store (tests/_setup_exchange_worker.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from jax_mscclpp.setup_exchange import SetupExchange

TIMEOUT_S = 20.0  # the setup's timeout in these cases: a failure must be known long before it


class Store:
    """A key-value store as JAX's coordination service gives one: ``get`` waits for a key at most its timeout."""

    def __init__(self):
        self.values: dict[str, bytes] = {}
        self.changed = threading.Condition()

    def set(self, key: str, value: bytes) -> None:
        with self.changed:
            self.values[key] = value
            self.changed.notify_all()

    def get(self, key: str, timeout_s: float) -> bytes:
        with self.changed:
            if not self.changed.wait_for(lambda: key in self.values, timeout_s):
                raise RuntimeError(f"DEADLINE_EXCEEDED: {key}")
            return self.values[key]


def one_process(store, process, ranks_of_process, fail_at=None, timeout_s=TIMEOUT_S):
    """The communicator's setup steps in process ``process`` (its ranks: ``ranks_of_process[process]``; rank r at
    partition r), raising at ``fail_at`` ("create": before publishing; "connect": after every frame was read):
    returns every rank's frame, or the exception and how long the setup took."""
    process_of_partition = {r: p for p, ranks in enumerate(ranks_of_process) for r in ranks}
    exchange = SetupExchange("jax_mscclpp/0/test", "setting up collectives over ('x',)",
                             {r: r for r in process_of_partition}, process_of_partition, process, timeout_s,
                             store.set, store.get)
    started = time.monotonic()
    try:
        if fail_at == "create":
            raise MemoryError("out of memory making the scratch")
        for r in ranks_of_process[process]:
            exchange.publish(r, f"frame of rank {r}".encode())
        frames = {r: exchange.fetch(r) for r in sorted(process_of_partition)}
        if fail_at == "connect":
            raise RuntimeError("cannot map peer memory")
        exchange.ready()
        return frames, time.monotonic() - started
    except BaseException as error:
        exchange.fail(f"{type(error).__name__}: {error}")
        return error, time.monotonic() - started


def run_processes(ranks_of_process, fail_at=None, absent=(), timeout_s=TIMEOUT_S):
    """Every process's result as one_process gives it; ``fail_at`` maps a process to its failing step; processes in
    ``absent`` never take part."""
    store = Store()
    results = {}

    def body(p):
        results[p] = one_process(store, p, ranks_of_process, (fail_at or {}).get(p), timeout_s)

    threads = [threading.Thread(target=body, args=(p,)) for p in range(len(ranks_of_process)) if p not in absent]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout_s * 3)
    assert not any(t.is_alive() for t in threads), "a setup hung"
    return results


@pytest.mark.parametrize("ranks_of_process", [[[0], [1]], [[0, 1], [2, 3], [4]]])
def test_every_process_reads_every_frame(ranks_of_process):
    results = run_processes(ranks_of_process)
    every = sorted(r for ranks in ranks_of_process for r in ranks)
    for frames, _ in results.values():
        assert frames == {r: f"frame of rank {r}".encode() for r in every}


@pytest.mark.parametrize("step", ["create", "connect"])
@pytest.mark.parametrize("failing", [0, 2])
def test_a_failure_on_one_process_fails_every_process_at_once_naming_it(step, failing):
    """Before it published (the others wait for its frame) or after every frame was read (the others would go on
    to their first call): every other process fails, naming the process and the reason, well within the timeout."""
    ranks_of_process = [[0, 1], [2], [3]]
    results = run_processes(ranks_of_process, fail_at={failing: step})
    reason = "out of memory making the scratch" if step == "create" else "cannot map peer memory"
    for p, (error, seconds) in results.items():
        assert isinstance(error, BaseException), f"process {p} kept a communicator its peers do not have"
        assert seconds < TIMEOUT_S / 4, f"process {p} learned of the failure only after {seconds:.1f} s"
        if p != failing:
            assert f"process {failing}" in str(error) and reason in str(error), str(error)
            assert "setting up collectives over ('x',)" in str(error)
    if step == "create":  # a process waiting for the failed one's frame names its rank
        waiting = next(p for p in results if p != failing)
        assert f"rank {ranks_of_process[failing][0]} (process {failing}) failed" in str(results[waiting][0])


def test_a_process_that_never_comes_is_named_at_the_timeout():
    results = run_processes([[0], [1], [2]], absent=(1,), timeout_s=0.5)
    for p in (0, 2):
        error, seconds = results[p]
        assert isinstance(error, TimeoutError), repr(error)
        assert "rank 1 (process 1) did not answer within 0.5 s" in str(error)
        assert seconds < 5


def test_the_failure_word_is_never_a_frame():
    """A frame fetched is the rank's bytes as published, whatever they hold: zero bytes first included."""
    store = Store()
    frame = b"\0\0\0\x04host" + bytes(range(256))
    sender = SetupExchange("p", "setup", {0: 0, 1: 1}, {0: 0, 1: 1}, 0, 1.0, store.set, store.get)
    receiver = SetupExchange("p", "setup", {0: 0, 1: 1}, {0: 0, 1: 1}, 1, 1.0, store.set, store.get)
    sender.publish(0, frame)
    assert receiver.fetch(0) == frame


def test_over_jax_key_value_store_between_two_processes():
    """Two processes of a jax.distributed job (CPU): process 1 fails before publishing, process 0 is told at once
    through JAX's own store; then a second generation succeeds on both."""
    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    root = Path(__file__).resolve().parents[1]
    procs = [subprocess.Popen([sys.executable, "-m", "tests._setup_exchange_worker", str(i), str(port)], cwd=root,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in (0, 1)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    told, failed = results
    assert "process 1" in told["first"] and "out of memory making the scratch" in told["first"], told
    assert told["first_s"] < 10, told
    assert failed["first"].startswith("MemoryError"), failed
    for result in results:
        assert result["second"] == {"0": "frame of rank 0", "1": "frame of rank 1"}, result
