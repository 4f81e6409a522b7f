"""Virtual ranks: N ranks on one GPU, each with its own context, buffers and stream, joined by channels.

Each rank is a native ``HarnessRank`` (native/harness_rank.h): the rank of the JAX path's GPU communicators
(``GpuRank``: registered scratch, semaphores, device epoch, timeout record, and the channel tables the collectives
run on), an input and an output buffer, a stream, and the primitive tests' tables of MemoryChannels
(``channels_per_peer`` per peer, one per thread block, reading from the input), PortChannels (optional, one per
peer over the input, served by the process's proxy thread) and the emulated SwitchChannel over every rank's
scratch (up to 8 ranks). Ranks exchange endpoints as bytes, exactly as separate processes would; in one process
the transport uses the owner's pointers instead of CUDA IPC.

An operation (``HARNESS_OPS`` in the native module; see native/harness.h for what each does) is launched on
every rank's stream before any is synchronized, so ranks that wait for each other run concurrently. Kernels
count what they found wrong in per-rank counters (slot 0: mismatches).

Typical use::

    with VirtualRanks(4, buffer_bytes=1 << 20, scratch_bytes=8 << 20) as vr:
        for r in range(4):
            vr.upload(r, INPUT, data[r])
        vr.run("hb_exchange", bytes=n, slot_stride=slot, blocks=4)
        got = vr.download(1, OUTPUT, n, offset=0 * slot)
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

INPUT, OUTPUT, SCRATCH = 0, 1, 2

# Integer codes by name: the native tables (kernels/include/jax_mscclpp/codes.def). ALGORITHM_CODES has every
# algorithm the kernels run, "allpairs_ll" / "allpairs_hb" (kAllPairs with the protocol forced) included.
from jax_mscclpp._types import CODE_TABLES, DTYPE_CODES  # noqa: E402

REDUCE_CODES = {row["name"]: row["code"] for row in CODE_TABLES["reduce_op"]}
COLLECTIVE_CODES = {row["name"]: row["code"] for row in CODE_TABLES["collective"]}
ALGORITHM_CODES = {row["name"]: row["code"] for row in CODE_TABLES["algorithm"] if row["name"] != "plan"}


class VirtualRanksError(RuntimeError):
    """A rank's kernel failed; the message carries every rank's timeout record."""


def native_cuda():
    """The test module (tests/harness/_jax_mscclpp_testing), or None when it is not built."""
    from . import native_module

    return native_module()


def numpy_dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def connect_all(ranks: Sequence) -> None:
    """Exchanges endpoints between every pair of ``ranks`` (native virtual ranks) and builds them, placed as
    sharing a GPU where two of them are on one device (the kernels' protocol rows read it)."""
    endpoints = [r.endpoint() for r in ranks]
    for r in ranks:
        for p, ep in enumerate(endpoints):
            if p != r.rank:
                r.connect(p, ep)
    shares_gpu = len({r.device for r in ranks}) < len(ranks)
    for r in ranks:
        r.build(shares_gpu)


def make_rank(cls, rank: int, nranks: int, *, timeout_s: float | None = None, **kw):
    """One native virtual rank (``HarnessRank`` or ``ExecutorRank``); ``timeout_s`` None: the process's setting."""
    return cls(rank, nranks, timeout_s=0.0 if timeout_s is None else float(timeout_s), **kw)


def make_params(cuda, op: str, **kw):
    """A native HarnessParams for ``op``; ``dtype`` and ``reduce_op`` may be names."""
    p = cuda.HarnessParams()
    p.op = cuda.HARNESS_OPS[op]
    for key, value in kw.items():
        if key == "dtype" and isinstance(value, str):
            value = DTYPE_CODES[value]
        elif key == "reduce_op" and isinstance(value, str):
            value = REDUCE_CODES[value]
        elif key == "collective" and isinstance(value, str):
            value = COLLECTIVE_CODES[value]
        elif key == "algorithm" and isinstance(value, str):
            value = ALGORITHM_CODES[value]
        if not hasattr(p, key):
            raise TypeError(f"unknown harness parameter {key!r}")
        setattr(p, key, int(value))
    return p


class RankData:
    """Host access to the buffers of ``self.ranks`` (native rank objects) and their closing, also as a context
    manager: what every virtual-ranks runner shares."""

    def upload(self, rank: int, buffer: int, data, offset: int = 0) -> None:
        self.ranks[rank].upload(buffer, offset, np.ascontiguousarray(data).tobytes())

    def download(self, rank: int, buffer: int, nbytes: int, offset: int = 0, dtype="uint8") -> np.ndarray:
        raw = self.ranks[rank].download(buffer, offset, nbytes)
        return np.frombuffer(raw, dtype=numpy_dtype(dtype) if isinstance(dtype, str) else dtype).copy()

    def fill(self, rank: int, buffer: int, byte_value: int) -> None:
        self.ranks[rank].fill(buffer, byte_value)

    def epoch(self, rank: int) -> int:
        return self.ranks[rank].epoch()

    def close(self) -> None:
        """Closes every rank; the runner holds none after."""
        for rk in self.ranks:
            rk.close()
        self.ranks = []

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class VirtualRanks(RankData):
    def __init__(
        self,
        nranks: int,
        *,
        device: int = 0,
        buffer_bytes: int = 1 << 20,
        scratch_bytes: int = 1 << 20,
        channels_per_peer: int = 4,
        timeout_s: float | None = None,
        port_channels: bool = False,
        stream_blocks: int = 4,
        stream_slots: int = 0,
        stream_chunk: int = 0,
        stop_on_failure: bool = False,
        p2p_bytes: int = -1,
        direct_exchange: bool = True,
    ):
        """``port_channels``: PortChannels for the primitive tests (one per peer over the input) and for the
        collectives (``channels_per_peer`` per peer over the scratch, which 2PR needs). ``timeout_s``: None takes
        the process's setting (``JAX_MSCCLPP_TIMEOUT_S``, else 300). ``stream_blocks``: the streaming and in-place
        kernels' most blocks per rank (the tests' small grid by default; ``production_stream_blocks(n)`` of the
        native module is what production gives n ranks sharing the GPU). ``stream_slots``, ``stream_chunk`` > 0: the
        streaming kernels' slots and largest chunk in place of the process's settings. ``stop_on_failure``: a
        failing kernel stops rather than traps (the process's CUDA context stays usable). ``p2p_bytes``: the
        point-to-point engine's slots per rank (-1: a quarter of the scratch, at most 16 MiB; 0: none).
        ``direct_exchange``: the ranks reach each other's buffers: the ragged all-to-all writes straight into the
        peers' outputs, and ``"in_place"`` runs over the buffers the ranks post (False: through the point-to-point
        rings and scratch, as between processes). A collective forced by name runs that algorithm either way;
        ``call_algorithm`` says what the frontends' call entry runs."""
        cuda = native_cuda()
        if cuda is None:
            from . import MISSING

            raise RuntimeError(MISSING)
        self.cuda = cuda
        self.nranks = nranks
        self.buffer_bytes = buffer_bytes
        self.scratch_bytes = scratch_bytes
        self.channels_per_peer = channels_per_peer
        self.ranks = []
        try:
            for r in range(nranks):
                self.ranks.append(make_rank(cuda.HarnessRank, r, nranks, device=device, input_bytes=buffer_bytes,
                                            output_bytes=buffer_bytes, scratch_bytes=scratch_bytes,
                                            channels_per_peer=channels_per_peer, timeout_s=timeout_s,
                                            port_channels=port_channels, stream_blocks=stream_blocks,
                                            stream_slots=stream_slots,
                                            stream_chunk=stream_chunk, stop_on_failure=stop_on_failure,
                                            p2p_bytes=p2p_bytes, direct_exchange=direct_exchange))
            connect_all(self.ranks)
        except BaseException:
            self.close()
            raise

    # -- running ---------------------------------------------------------------------------------------------------

    def launch(self, op: str, ranks: Iterable[int] | None = None, **params) -> list[int]:
        """Launches ``op`` on ``ranks`` (default: all), asynchronously. Returns the ranks launched."""
        ranks = list(range(self.nranks)) if ranks is None else list(ranks)
        p = make_params(self.cuda, op, **params)
        for r in ranks:
            self.ranks[r].launch(p)
        return ranks

    def synchronize(self, ranks: Iterable[int] | None = None) -> None:
        ranks = list(range(self.nranks)) if ranks is None else list(ranks)
        failures = []
        for r in ranks:
            try:
                self.ranks[r].synchronize()
            except RuntimeError as e:  # a trap poisons the shared context: every later rank fails too
                failures.append(str(e))
                break
        if failures:
            records = [m for m in (rk.error_message() for rk in self.ranks) if m]
            text = failures[0]
            for m in records:
                if m not in text:
                    text += "\n" + m
            raise VirtualRanksError(text)

    def run(self, op: str, ranks: Iterable[int] | None = None, **params) -> list[np.ndarray]:
        """Launches on every rank in ``ranks``, synchronizes them, returns each rank's counters."""
        launched = self.launch(op, ranks, **params)
        self.synchronize(launched)
        return [np.asarray(self.ranks[r].counters(), dtype=np.uint64) for r in launched]

    # -- timing ----------------------------------------------------------------------------------------------------

    def timed(self, op: str, ranks: Iterable[int] | None = None, repeats: int = 1, **params) -> float:
        """Milliseconds per launch of ``op``, from events on the first rank's stream around ``repeats`` launches
        on every rank (the first rank must be the last to finish, as in a ping-pong it starts)."""
        ranks = list(range(self.nranks)) if ranks is None else list(ranks)
        p = make_params(self.cuda, op, **params)
        first = self.ranks[ranks[0]]
        first.record_start()
        for _ in range(repeats):
            for r in ranks:
                self.ranks[r].launch(p)
        first.record_stop()
        self.synchronize(ranks)
        return first.elapsed_ms() / repeats

    def collective(self, collective: str, algorithm: str, ranks: Iterable[int] | None = None, **params) -> None:
        """One launch_collective call on every rank (``count`` elements per block, ``dtype``, ``reduce_op``,
        ``src_off`` / ``dst_off`` into the input / output buffers, ``iters`` calls in a row), synchronized."""
        self.run("collective", ranks, collective=collective, algorithm=algorithm, **params)

    def call_algorithm(self, collective: str, algorithm: str, rank: int = 0, **params) -> str:
        """The algorithm the JAX path's call entry (GpuRank::run on XLA's buffers) runs for this collective call on
        ``rank`` (``direct_algorithm``: ``"in_place"`` where the ranks reach each other's buffers and ``algorithm``
        would stream through scratch); ``algorithm`` otherwise."""
        p = make_params(self.cuda, "collective", collective=collective, algorithm=algorithm, **params)
        code = self.ranks[rank].call_algorithm(p)
        return next(name for name, c in ALGORITHM_CODES.items() if c == code)

    def replay_graph(self, op: str, replays: int, **params) -> None:
        """Every rank captures ``op`` with ``params`` (``make_params``; ``iters`` calls in a row where set) into a CUDA
        graph, then replays it ``replays`` times (each time every rank's graph launched before any is waited for),
        synchronized."""
        p = make_params(self.cuda, op, **params)
        for rk in self.ranks:
            rk.capture(p)
        for _ in range(replays):
            for rk in self.ranks:
                rk.replay(1)
        self.synchronize()

    def timed_graph(self, op: str, repeats: int, replays: int = 3, **params) -> float:
        """Milliseconds per call of ``op``: the median of ``graph_replay_times``."""
        return float(np.median(self.graph_replay_times(op, repeats, replays, **params)))

    def graph_replay_times(self, op: str, repeats: int, replays: int = 3, **params) -> list[float]:
        """Milliseconds per call of ``op`` in each timed replay: every rank captures ``repeats`` calls into a CUDA
        graph (``iters``), replays it once to warm up, then ``replays`` times between events on rank 0's stream
        (rank 0 cannot finish before its peers, whose graphs are launched right after its own)."""
        self.replay_graph(op, 1, iters=repeats, **params)
        times = []
        first = self.ranks[0]
        for _ in range(replays):
            first.record_start()
            for rk in self.ranks:
                rk.replay(1)
            first.record_stop()
            self.synchronize()
            times.append(first.elapsed_ms() / repeats)
        return times


def device_run_header(benchmark: str, cuda) -> dict:
    """The head of a benchmark record written on the device: name, UTC date, the tree's commit (the environment's
    COMMIT, since the device's copy of the tree has no .git) and the machine it ran on."""
    import datetime
    import os
    import platform
    import socket

    import numpy

    try:
        import jax

        jax_version = jax.__version__
    except Exception:  # noqa: BLE001 - recorded as unknown
        jax_version = None
    return {
        "benchmark": benchmark,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": os.environ.get("COMMIT") or None,
        "machine": {
            "host": socket.gethostname(),
            "gpu": cuda.device_name(0),
            "gpu_count": cuda.device_count(),
            "cuda_runtime": cuda.runtime_version(),
            "cuda_driver": cuda.driver_version(),
            "python": platform.python_version(),
            "jax": jax_version,
            "numpy": numpy.__version__,
        },
    }
