"""Memory traffic of the NCCL library's all-reduce, all-gather and reduce-scatter, their buffers in windows
(ncclCommWindowRegister: run in place, no scratch) and not (the selection's algorithm, through scratch), beside the
JAX path's kernel of the same call, on ranks of one process sharing one GPU; one JSON per run.

    python3 bench/kernels/nccl_traffic_record.py [--ranks 2,4,8] [--sizes 64K,16M,256M] [--collectives ...]
                                                 [--ncu] [--commit SHA] [--out DIR]

A cell is (collective, N ranks, S bytes): S is a rank's larger buffer (all-reduce: its input and its output;
all-gather: its output, the input S / N; reduce-scatter: its input, the output S / N), float32 sums. Paths:

- ``registered``: N ranks of our libnccl.so.2 in this process (tests/gpu/_nccl_ranks.py: one group of inits, a stream
  per rank, a call of every rank in one group), every rank's input and output in one window of it;
- ``unregistered``: the same ranks and calls on buffers of no window;
- ``jax``: the kernel the JAX path launches for the call: the algorithm the unregistered call ran, as the JAX
  path's call entry runs it (``direct_algorithm``: in place on the buffers the ranks post, between ranks of one
  process, where that algorithm streams through scratch), on N virtual ranks of tests/harness with the grid
  production gives N ranks sharing a GPU.

Per path: ``algorithm`` (what ran: ``in_place`` or the selection's), ``us`` (device time per call, CUDA events around
R calls issued back to back, R filling about 10 ms: the NCCL paths include the host's enqueueing of N calls a call),
the results checked once against a rank-order fold in float32 (every algorithm folds in rank order, so they match
bit for bit), and, with ``--ncu``, ``dram_bytes`` (dram__bytes_read.sum + dram__bytes_write.sum of one call of
every rank: _traffic.py) and ``traffic_ratio`` against ``minimum_bytes``: every input byte read once and every output
byte written once, over all ranks (2 N S for all-reduce, (N + 1) S for the others), the least traffic the collective
has, which the in-place kernel aims at. Per cell, ``memcpy_us`` is a device copy of S bytes. Every rank shares one
GPU's memory, so traffic is counted over all ranks and small cells stay in the L2 cache: these are one GPU's
figures of bytes moved, not multi-GPU speed.
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _environment, _traffic (also when loaded by path)
import _environment  # noqa: E402,F401  (bench/kernels/_environment.py: CUDA's environment, tests.harness)
os.environ.setdefault("JAX_MSCCLPP_TIMEOUT_S", "30")

from _traffic import profile_ranges, profiler, record_parser, run_record  # noqa: E402

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")
PATHS = ("registered", "unregistered", "jax")
SCRATCH = 64 << 20
REPLAY_MS = 10.0


def buffer_sizes(collective: str, size: int, n: int) -> tuple[int, int, int]:
    """(input bytes, output bytes, NCCL's count of float32 elements) of one rank in a cell."""
    if collective == "all_reduce":
        return size, size, size // 4
    if collective == "all_gather":
        return size // n, size, size // n // 4
    return size, size // n, size // n // 4


def minimum_bytes(collective: str, size: int, n: int) -> int:
    """Every input byte read once, every output byte written once, over all ranks."""
    in_bytes, out_bytes, _ = buffer_sizes(collective, size, n)
    return n * (in_bytes + out_bytes)


class NcclCell:
    """One cell's buffers on the NCCL ranks: every rank's input and output in one allocation (a window of it when
    registered), the inputs random."""

    def __init__(self, ranks, collective: str, size: int, registered: bool, seed: int):
        cp, n = ranks.cp, ranks.n
        self.ranks, self.collective = ranks, collective
        self.in_bytes, self.out_bytes, self.count = buffer_sizes(collective, size, n)
        self.memory = [cp.empty(self.in_bytes + self.out_bytes, dtype=cp.uint8) for _ in range(n)]
        rng = cp.random.default_rng(seed)
        for m in self.memory:  # never zero: +-[0.5, 1.5)
            values = m[:self.in_bytes].view(cp.float32)
            values[...] = (rng.random(values.size, dtype=cp.float32) + 0.5) * cp.where(
                rng.random(values.size, dtype=cp.float32) < 0.5, -1, 1).astype(cp.float32)
        cp.cuda.Device().synchronize()  # the ranks' streams do not wait for cupy's
        self.sends = [m.data.ptr for m in self.memory]
        self.recvs = [m.data.ptr + self.in_bytes for m in self.memory]
        self.windows = ranks.register_windows(self.sends, self.in_bytes + self.out_bytes) if registered else None

    def launch(self) -> None:
        self.ranks.collective(self.collective, self.sends, self.recvs, self.count, "float32", "sum")

    def mismatches(self) -> int:
        """Output elements of every rank that differ from the rank-order fold in float32 (or the gathered blocks)."""
        cp, n = self.ranks.cp, self.ranks.n
        inputs = [m[:self.in_bytes].view(cp.float32) for m in self.memory]
        outputs = [m[self.in_bytes:].view(cp.float32) for m in self.memory]
        bad = 0
        if self.collective == "all_gather":
            want = cp.concatenate(inputs)
            return sum(int(cp.count_nonzero(o != want)) for o in outputs)
        total = inputs[0].copy()
        for x in inputs[1:]:
            total += x
        for r, o in enumerate(outputs):
            want = total if self.collective == "all_reduce" else total[r * self.count:(r + 1) * self.count]
            bad += int(cp.count_nonzero(o != want))
        return bad

    def close(self) -> None:
        if self.windows is not None:
            self.ranks.deregister_windows(self.windows)


def time_nccl(cell: NcclCell) -> float:
    """Microseconds per call: events on every rank's stream around R calls, the slowest rank's."""
    ranks = cell.ranks
    cp = ranks.cp
    cell.launch()
    ranks.synchronize()
    start = time.perf_counter()
    cell.launch()
    ranks.synchronize()
    repeats = int(min(500, max(3, REPLAY_MS / 1e3 / max(time.perf_counter() - start, 1e-6))))
    begin = cp.cuda.Event()
    begin.record(ranks.streams[0])
    for s in ranks.streams[1:]:
        s.wait_event(begin)
    for _ in range(repeats):
        cell.launch()
    ends = []
    for s in ranks.streams:
        e = cp.cuda.Event()
        e.record(s)
        ends.append(e)
    ranks.synchronize()
    return max(cp.cuda.get_elapsed_time(begin, e) for e in ends) * 1e3 / repeats


def jax_params(collective: str, size: int, n: int, algorithm: str) -> dict:
    _, _, count = buffer_sizes(collective, size, n)
    return dict(collective=collective, algorithm=algorithm, dtype="float32", reduce_op="sum", count=count)


def time_jax(vr, params: dict) -> float:
    import numpy as np

    first = vr.timed_graph("collective", repeats=1, replays=1, **params)
    repeats = int(min(200, max(3, REPLAY_MS / max(first, 1e-3))))
    return float(np.median(vr.graph_replay_times("collective", repeats, 3, **params))) * 1e3


def ran_algorithm(ranks, collective: str, before: dict) -> str:
    """The column of jax_mscclpp_nccl_call_counts() a cell's call added to (every rank's call counted there)."""
    from tests.gpu._nccl_ranks import FUNCTIONS

    after = ranks.calls().get(FUNCTIONS[collective], {})
    grown = [c for c, v in after.items() if v > before.get(c, 0)]
    return grown[0] if len(grown) == 1 else "+".join(sorted(grown))


def run_cells(args, profile_only: bool) -> list[dict]:
    import cupy as cp

    from jax_mscclpp import nccl_backend
    from tests.gpu._nccl_ranks import FUNCTIONS, NcclRanks
    from tests.harness.virtual_ranks import VirtualRanks

    rows = []
    algorithms: dict = {}  # (ranks, collective, size) -> what the unregistered call ran: the JAX path's kernel
    for n in args.ranks:
        ranks = NcclRanks(nccl_backend.library_path(), n)
        try:
            for collective in args.collectives:
                for size in args.sizes:
                    row = {"collective": collective, "ranks": n, "size": size, "dtype": "float32",
                           "minimum_bytes": minimum_bytes(collective, size, n)}
                    for path in ("registered", "unregistered"):
                        cell = NcclCell(ranks, collective, size, path == "registered", seed=n * 7 + size % 1009)
                        try:
                            before = dict(ranks.calls().get(FUNCTIONS[collective], {}))
                            cell.launch()
                            ranks.synchronize()
                            algorithm = ran_algorithm(ranks, collective, before)
                            if path == "unregistered":
                                algorithms[(n, collective, size)] = algorithm
                            if profile_only:
                                profiler(True)
                                cell.launch()
                                ranks.synchronize()
                                profiler(False)
                                continue
                            row[path] = {"algorithm": algorithm, "mismatches": cell.mismatches(),
                                         "us": round(time_nccl(cell), 2)}
                        finally:
                            cell.close()
                    if not profile_only:
                        copy_from = cp.empty(size, dtype=cp.uint8)
                        copy_to = cp.empty_like(copy_from)
                        begin, end = cp.cuda.Event(), cp.cuda.Event()
                        begin.record()
                        for _ in range(20):
                            cp.cuda.runtime.memcpyAsync(copy_to.data.ptr, copy_from.data.ptr, size,
                                                        cp.cuda.runtime.memcpyDeviceToDevice, 0)
                        end.record()
                        end.synchronize()
                        row["memcpy_us"] = round(cp.cuda.get_elapsed_time(begin, end) * 1e3 / 20, 2)
                        rows.append(row)
                        print(json.dumps(row), flush=True)
                    cp.get_default_memory_pool().free_all_blocks()
        finally:
            ranks.close()
    # The JAX path's kernels after every NCCL cell: the library's ranks and the harness's never live at once.
    for n in args.ranks:
        largest = max(args.sizes)
        from tests.harness import native_module

        with VirtualRanks(n, buffer_bytes=largest + 4096, scratch_bytes=SCRATCH, channels_per_peer=8,
                          timeout_s=30.0, stream_blocks=native_module().production_stream_blocks(n)) as vr:
            for collective in args.collectives:
                for size in args.sizes:
                    params = jax_params(collective, size, n, algorithms[(n, collective, size)])
                    params["algorithm"] = vr.call_algorithm(**params)
                    vr.launch("collective", **params)
                    vr.synchronize()
                    if profile_only:
                        profiler(True)
                        vr.launch("collective", **params)
                        vr.synchronize()
                        profiler(False)
                        continue
                    row = next(r for r in rows if (r["collective"], r["ranks"], r["size"]) == (collective, n, size))
                    row["jax"] = {"algorithm": params["algorithm"], "us": round(time_jax(vr, params), 2)}
                    print(json.dumps(row), flush=True)
    return rows


def profile(args, rows: list[dict]) -> tuple[str | None, str | None]:
    """One range per path of every cell, in run_cells' order: the NCCL paths per (ranks, collective, size), then
    the JAX path's in the same order."""
    command = [sys.executable, os.path.abspath(__file__), "--profile-only", "--ranks", ",".join(map(str, args.ranks)),
               "--sizes", ",".join(map(str, args.sizes)), "--collectives", ",".join(args.collectives)]
    order = [(n, c, s, p) for n in args.ranks for c in args.collectives for s in args.sizes
             for p in ("registered", "unregistered")]
    order += [(n, c, s, "jax") for n in args.ranks for c in args.collectives for s in args.sizes]
    mode, values, note = profile_ranges(command, len(order), args.ncu_timeout)
    if mode is None:
        return None, note
    by_cell = {(r["ranks"], r["collective"], r["size"]): r for r in rows}
    for (n, c, s, path), value in zip(order, values):
        row = by_cell[(n, c, s)]
        row[path]["dram_bytes"] = value
        row[path]["traffic_ratio"] = round(value / row["minimum_bytes"], 3)
    return mode, None


def main(argv=None) -> int:
    parser = record_parser(__doc__.split("\n\n")[0], "nccl-traffic", ncu_timeout=300.0)
    parser.add_argument("--collectives", default=",".join(COLLECTIVES), type=lambda s: s.split(","))
    args = parser.parse_args(argv)
    if set(args.collectives) - set(COLLECTIVES):
        parser.error(f"--collectives: of {', '.join(COLLECTIVES)}")
    if any(s % (4 * max(args.ranks)) for s in args.sizes):
        parser.error("--sizes: multiples of 4 x the largest rank count (float32 blocks)")
    return run_record(args, run_cells, profile, "nccl-traffic",
                      record="NCCL library's calls in windows and not, and the JAX path's kernel, on ranks of one GPU")


if __name__ == "__main__":
    sys.exit(main())
