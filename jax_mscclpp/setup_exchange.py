"""The meeting place of a GPU communicator's setup across processes: JAX's key-value store (the coordination
service of ``jax.distributed``), as runtime/gpu/rank_setup.h's ``Exchange`` (docs/architecture.md, "One setup").

Under one prefix, which every process derives alike from the communicator (its devices, axes and generation):

- ``{prefix}/{partition}``: the frame of the rank at that partition of the mesh (``publish`` / ``fetch``).
- ``{prefix}/ready/{process}``: that process's word once its ranks are connected (``ready``).

A setup either succeeds on every process or fails on every one, each failure naming the process where it began,
without waiting out the timeout:

- A process whose setup fails (``fail``) writes the failure word, ``FAILED`` and the reason, in place of its ranks'
  frames and of its ready word. A process waiting for one of those frames fails at once, naming the rank, its
  process and the reason; so does one waiting in the ready round.
- The ready round: after its ranks are connected, each process says so and waits for the word of every other
  process of the communicator. A failure after the frames were read (mapping a peer's memory, building channels)
  thus still reaches every process before any of them keeps a communicator whose peers have none. A process that
  never answers is named when the timeout (JAX_MSCCLPP_TIMEOUT_S) runs out.
"""

from __future__ import annotations

from typing import Callable, Mapping

# The prefix of a failure word; a frame (runtime/gpu/rank_setup.h) begins with a GPU identity, never with this text.
FAILED = b"\0jax_mscclpp setup failed\0"
READY = b"ready"


class SetupExchange:
    """One communicator's setup over a key-value store. ``kv_set(key, value)`` publishes (replacing what an earlier
    word left there); ``kv_get(key, timeout_s)`` waits for a key at most ``timeout_s`` and raises when it does not
    come."""

    def __init__(self, prefix: str, what: str, partition_of_rank: Mapping[int, int],
                 process_of_partition: Mapping[int, int], process: int, timeout_s: float,
                 kv_set: Callable[[str, bytes], None], kv_get: Callable[[str, float], bytes]):
        self.prefix = prefix
        self.what = what  # how errors name the setup, e.g. "setting up collectives over ('x',)"
        self.partition_of_rank = dict(partition_of_rank)
        self.process_of_partition = dict(process_of_partition)
        self.process = process
        self.timeout_s = timeout_s
        self._kv_set, self._kv_get = kv_set, kv_get
        self._frames: dict[int, bytes] = {}  # this process's ranks' frames, read without the store

    def _frame_key(self, partition: int) -> str:
        return f"{self.prefix}/{partition}"

    def _ready_key(self, process: int) -> str:
        return f"{self.prefix}/ready/{process}"

    def _failure(self, who: str, word: bytes) -> RuntimeError:
        reason = word[len(FAILED):].decode(errors="replace")
        return RuntimeError(f"jax_mscclpp: {self.what}: {who} failed: {reason}")

    def _get(self, key: str, who: str) -> bytes:
        try:
            return self._kv_get(key, self.timeout_s)
        except Exception as error:
            raise TimeoutError(f"jax_mscclpp: {self.what}: {who} did not answer within {self.timeout_s:g} s "
                               "(JAX_MSCCLPP_TIMEOUT_S)") from error

    def publish(self, rank: int, frame: bytes) -> None:
        """Rank ``rank``'s frame (a rank of this process), for every process."""
        self._frames[rank] = bytes(frame)
        self._kv_set(self._frame_key(self.partition_of_rank[rank]), bytes(frame))

    def fetch(self, rank: int) -> bytes:
        """Rank ``rank``'s frame; raises naming the rank and its process where that process failed, or did not
        publish within the timeout."""
        if rank in self._frames:
            return self._frames[rank]
        partition = self.partition_of_rank[rank]
        who = f"rank {rank} (process {self.process_of_partition[partition]})"
        frame = self._get(self._frame_key(partition), who)
        if frame.startswith(FAILED):
            raise self._failure(who, frame)
        return frame

    def ready(self) -> None:
        """The ready round: says this process's ranks are connected, then waits for every other process's word;
        raises naming the first process (in process order) that failed or did not answer."""
        self._kv_set(self._ready_key(self.process), READY)
        for process in sorted(set(self.process_of_partition.values()) - {self.process}):
            word = self._get(self._ready_key(process), f"process {process}")
            if word.startswith(FAILED):
                raise self._failure(f"process {process}", word)

    def fail(self, reason: str) -> None:
        """This process's setup failed: the failure word in place of its ranks' frames and of its ready word, so that
        every other process fails too, at once. Never raises (it runs while a failure is being raised)."""
        word = FAILED + reason.encode(errors="replace")
        mine = [p for p, process in self.process_of_partition.items() if process == self.process]
        for key in [self._frame_key(p) for p in mine] + [self._ready_key(self.process)]:
            try:
                self._kv_set(key, word)
            except Exception:  # the store is gone too: the others time out, naming this process
                pass
