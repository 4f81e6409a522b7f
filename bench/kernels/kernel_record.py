"""The kernel record with virtual ranks: ``python -m jax_mscclpp.tools.bench.kernel_record`` plus its ``virtual:N``
settings, N ranks in one process on one GPU through the GPU tests' harness (tests/harness), which the package never
imports.

    python3 bench/kernels/kernel_record.py [--budget 420] [--out DIR] [--virtual-ranks 2,4,8] [--processes 2,4]
                                           [--previous PATH|DIR|none] [--best DIR|none] [--dtype float32]
                                           [--commit SHA] [--dry-run] ...

Every option is the package command line's (``--help``; docs/benchmarking.md, "The kernel record"). On a machine
with a GPU the settings default to virtual:2,4,8 and processes:2,4 (and devices:N with N >= 2 GPUs); without one,
to the package's (devices:2,4,8 on CPU devices). Needs the harness module, built with the package
(``-C cmake.define.JAX_MSCCLPP_TESTING=ON``, the default where a GPU is visible).

A ``virtual:N`` setting is one ``VirtualRanks`` of N ranks (buffers for the largest size, ``SCRATCH`` bytes of
scratch, ``CHANNELS_PER_PEER`` memory channels per peer, port channels for 2PR, and the streaming and in-place
kernels' grid that production gives N ranks sharing the GPU, ``production_stream_blocks(N)``, named in the
setting's notes). Per cell, every rank captures R calls of launch_collective (the permutation: a ring shift)
into a CUDA graph; after one warm-up replay, ``REPLAYS`` replays are timed between CUDA events on rank 0's stream
(rank 0 cannot finish before its peers, whose graphs are launched right after its own), each a sample of
time / R; R makes a replay last about ``REPLAY_MS`` (3 to 200 calls). The memcpy reference is a device-to-device
cudaMemcpyAsync of the same bytes on rank 0's stream in the same set of ranks, between events. All N ranks share
one GPU's SMs and memory, and "peer" traffic is local memory traffic: these times are kernel efficiency and
latency, the guard against kernels getting slower, not multi-GPU speed.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _environment (also when loaded by path)
import _environment  # noqa: E402,F401  (bench/kernels/_environment.py: CUDA's environment, tests.harness)

from jax_mscclpp.tools.bench import kernel_record  # noqa: E402
from jax_mscclpp.tools.bench import kernel_record_base as kr  # noqa: E402
from jax_mscclpp.tools.bench import kernel_record_jax as krj  # noqa: E402

SCRATCH = 64 << 20
CHANNELS_PER_PEER = 8  # the production communicators' (runtime/gpu/rank_context.h, kGpuChannelsPerPeer)
REPLAYS = 5
REPLAY_MS = 10.0
MAX_REPEATS = 200
TIMEOUT_S = 30.0  # a kernel that waits longer traps (and the setting's context is lost)


def destination_words(n: int) -> tuple[int, int]:
    """The harness's destination words of the ring shift (byte r: rank r's destination, 0xFF: none)."""
    table = [0xFF] * 16
    for src, dst in krj.ring_shift(n):
        table[src] = dst
    return (sum(d << (8 * i) for i, d in enumerate(table[:8])), sum(d << (8 * i) for i, d in enumerate(table[8:])))


def block_count(op: str, size: int, n: int, dtype: str) -> int:
    """launch_collective's ``count`` (elements per block) for the nccl-tests ``size`` of ``op`` over n ranks."""
    return krj.layout(op, size, n, dtype).block_elems


class VirtualRanksSource(kr.Source):
    """``virtual:N``: N virtual ranks on GPU 0 (see the module docstring)."""

    kind = "virtual"

    def __init__(self):
        from tests.harness import native_module

        self.cuda = native_module()
        self.context_lost: str | None = None

    def unavailable(self, setting):
        if self.cuda is None:
            from tests.harness import MISSING

            return MISSING
        if self.cuda.device_count() < 1:
            return "no GPU here"
        if setting.ranks < 2:
            return "a collective of one rank runs no kernel of interest"
        return None

    def _codes(self):
        from tests.harness.virtual_ranks import ALGORITHM_CODES, COLLECTIVE_CODES, DTYPE_CODES

        return ALGORITHM_CODES, COLLECTIVE_CODES, DTYPE_CODES

    def algorithms(self, op, setting):
        """Every algorithm launch_collective runs for ``op`` (the protocol-forced ones included), that can run on
        ``setting.ranks`` ranks."""
        algorithms, collectives, dtypes = self._codes()
        out = []
        for name, code in algorithms.items():
            if not self.cuda.collective_supported(collectives[op], code, dtypes["float32"], 0):
                continue
            if op == "permute":
                if setting.ranks > 16:  # the harness's destination table
                    continue
            elif self.cuda.collective_launch_count(collectives[op], code, 1, dtypes["float32"], setting.ranks,
                                                   SCRATCH) == 0:
                continue
            out.append(name)
        return out

    def describe(self):
        if self.cuda is None or self.cuda.device_count() < 1:
            return {}
        return {"gpu_model": self.cuda.device_name(0), "gpu_count": self.cuda.device_count(),
                "cuda_runtime": self.cuda.runtime_version(), "cuda_driver": self.cuda.driver_version()}

    @staticmethod
    def call_s(cell) -> float:
        """A guess at one call's time: latency plus every rank's bytes at an effective rate by protocol."""
        alg, n = cell.algorithm, cell.setting.ranks
        factor = 8.0 if alg == "2pr" else 6.0 if "ll" in alg else 2.0
        latency = 900e-6 if alg == "2pr" else 15e-6
        return latency + factor * n * cell.size / 4e11

    def cell_estimate_s(self, cell):
        t = self.call_s(cell)
        repeats = min(MAX_REPEATS, max(3, REPLAY_MS * 1e-3 / t))
        return 0.03 + t + repeats * t * (1 + REPLAYS) + repeats * cell.setting.ranks * 5e-6

    def setup_estimate_s(self, setting):
        return 2.0 + 0.5 * setting.ranks

    def measure(self, setting, cells, deadline, estimates):
        from tests.harness.virtual_ranks import INPUT, VirtualRanks, VirtualRanksError, numpy_dtype

        _, collectives, dtypes = self._codes()
        n, dtype = setting.ranks, cells[0].dtype
        itemsize = numpy_dtype(dtype).itemsize
        buffer = max(c.size for c in cells) + 4096
        rows, notes = [], []
        if self.context_lost:
            return [kr.new_row(c, f"error: the CUDA context was lost before ({self.context_lost})") for c in cells], \
                {"status": "error: the CUDA context was lost", "notes": []}
        grid = self.cuda.production_stream_blocks(n)
        notes.append(f"grid: {grid} blocks per rank for the streaming kernels (production's for {n} ranks on one GPU)")
        vr = VirtualRanks(n, buffer_bytes=buffer, scratch_bytes=SCRATCH, channels_per_peer=CHANNELS_PER_PEER,
                          port_channels=True, timeout_s=TIMEOUT_S, stream_blocks=grid)
        try:
            for r in range(n):
                vr.upload(r, INPUT, krj.random_block(buffer // itemsize, dtype, 0, r))
            memcpy = {}
            for size in sorted({c.size for c in cells}):
                iters = int(min(200, max(5, 2e-3 / (size / 2e12 + 3e-6))))
                memcpy[size] = vr.ranks[0].time_memcpy(size, iters) * 1e3
            lo, hi = destination_words(n)
            for cell in cells:
                if self.context_lost:
                    rows.append(kr.new_row(cell, f"error: the CUDA context was lost ({self.context_lost})"))
                    continue
                if time.time() + estimates.get(cell.key, 0.0) > deadline:
                    rows.append(kr.new_row(cell, "skipped: deadline"))
                    continue
                t = time.time()
                count = block_count(cell.op, cell.size, n, dtype)
                if cell.op == "permute":
                    op, params, launches = "permute", dict(algorithm=cell.algorithm, dtype=dtype, count=count,
                                                           destinations_lo=lo, destinations_hi=hi), None
                else:
                    op = "collective"
                    params = dict(collective=cell.op, algorithm=cell.algorithm, dtype=dtype, reduce_op="sum",
                                  count=count)
                    launches = int(self.cuda.collective_launch_count(
                        collectives[cell.op], self._codes()[0][cell.algorithm], count, dtypes[dtype], n, SCRATCH))
                try:
                    # Warm-up, and how many calls fill a replay, through a graph too: launched directly, one host
                    # thread enqueues every launch of a call on rank 0's stream before rank 1's, and a call of more
                    # launches than a stream's queue holds (1PA-LL at 8 ranks, 256 MiB: 1,024) blocks that thread
                    # while rank 0's first kernel waits for peers never launched.
                    first_ms = vr.timed_graph(op, repeats=1, replays=1, **params)
                    repeats = int(min(MAX_REPEATS, max(3, REPLAY_MS / max(first_ms, 1e-3))))
                    samples = [ms * 1e3 for ms in vr.graph_replay_times(op, repeats, REPLAYS, **params)]
                    rows.append(kr.new_row(cell, time_source="cuda_events", repeats=repeats, launches=launches,
                                           memcpy_us=memcpy[cell.size], ranks_per_gpu=n, cost_s=time.time() - t,
                                           **kr.samples_fields(samples)))
                except (VirtualRanksError, RuntimeError) as e:  # a trap: this process's CUDA context is gone
                    self.context_lost = f"{cell.label}: {kr.first_line(e)}"
                    rows.append(kr.new_row(cell, f"error: {kr.first_line(e)}", cost_s=time.time() - t))
                    notes.append(f"the CUDA context was lost at {cell.label}; later virtual cells not run")
                except Exception as e:  # noqa: BLE001 - this cell fails, the others run
                    rows.append(kr.new_row(cell, f"error: {kr.first_line(e)}", cost_s=time.time() - t))
        finally:
            try:
                vr.close()
            except Exception as e:  # noqa: BLE001 - a lost context cannot free its memory
                notes.append(f"closing the ranks failed: {kr.first_line(e)}")
        return rows, {"notes": notes, "status": "error: the CUDA context was lost" if self.context_lost else "ok"}


def main(argv=None) -> int:
    return kernel_record.main(argv, sources={"virtual": VirtualRanksSource()},
                              prog="python3 bench/kernels/kernel_record.py")


if __name__ == "__main__":
    sys.exit(main())
