"""One rank of bench/device/nccl_clients.py's torch client: torch.distributed's NCCL process group with every rank
on cuda:0, through jax_mscclpp's libnccl.so.2 (the runner puts it in LD_PRELOAD), where NVIDIA's NCCL refuses two
ranks on one GPU. Runs its cases in order; each checks every rank's result against the value computed here from
every rank's seeded inputs (integer-valued, so that sums and products are exact in every dtype), and prints one line:

    CASE {"case": NAME, "rank": R, "passed": P, "failed": F, "skipped": false, "timed_out": false, "seconds": S,
          "detail": TEXT, "forwarded": N, "calls": {FUNCTION: {ALGORITHM: COUNT}}}

passed / failed count the case's checks on this rank (one per size); forwarded and calls are what our library
counted during the case in this process (jax_mscclpp_nccl_call_counts(), algorithm "nccl" = handed to NVIDIA's
NCCL; null when our library is not loaded). A case that outlasts --case-timeout prints its line with "timed_out":
true and ends the process (os._exit), so a hang becomes a record; the runner starts the ranks again after it. The
ranks meet at the process group's TCP store after every case, so that none starts the next case while a peer is
still in the last one.

    RANK=r WORLD_SIZE=n LOCAL_RANK=r MASTER_ADDR=127.0.0.1 MASTER_PORT=p python3 _torch_nccl_worker.py [--cases A,B]
    python3 _torch_nccl_worker.py --list --world N [--quick]

The case list (``case_names``) needs no torch, so the runner and the CPU tests read it without a GPU.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import threading
import time
import zlib

DTYPES = ("float32", "float16", "bfloat16", "int32", "int64", "uint8", "int8", "float64")
QUICK_DTYPES = ("float32", "bfloat16", "int32")
FLOAT_DTYPES = ("float32", "float16", "bfloat16", "float64")
SIZES = (1, 3, 1023, 65541)
QUICK_SIZES = (3, 65541)
REDUCE_OPS = ("SUM", "PRODUCT", "MIN", "MAX", "AVG", "PREMUL_SUM")
PREMUL_FACTOR = 0.5
# Allowed difference per dtype, relative to max(1, |expected|): the inputs are small integers, so only AVG's
# division (and PREMUL_SUM's exact halving) leaves the integers; integers compare exactly.
TOLERANCE = {"float32": 1e-6, "float16": 1e-3, "bfloat16": 8e-3, "float64": 1e-12}

# Families taking one dtype each, in the order they run (the risky ones, which may leave a group open or end the
# process's use of the GPU, come last in case_names).
PER_DTYPE = ("broadcast", "reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
             "all_to_all", "all_to_all_single equal", "all_to_all_single unequal", "gather", "scatter")
P2P = ("send_recv pairs", "isend_irecv ring", "batch_isend_irecv ring", "batch_isend_irecv both directions")


def case_names(world: int, quick: bool = False) -> list[str]:
    """Every case for `world` ranks, in the order they run: "FAMILY [OP] DTYPE" or a name of its own."""
    dtypes = QUICK_DTYPES if quick else DTYPES
    # PREMUL_SUM of bfloat16: torch hands ncclRedOpCreatePreMulSum a float factor with ncclBfloat16, whose first two
    # bytes NCCL's contract (and NVIDIA's library) read as the bfloat16 factor: not a defined product to check.
    names = [f"all_reduce {op} {dtype}" for op in REDUCE_OPS for dtype in dtypes
             if op != "PREMUL_SUM" or (dtype in FLOAT_DTYPES and dtype != "bfloat16")]
    names += [f"{family} {dtype}" for family in PER_DTYPE for dtype in dtypes]
    names += [f"reduce_scatter_tensor MAX {dtype}" for dtype in QUICK_DTYPES]
    names.append("barrier")
    names += [f"{family} {dtype}" for family in P2P for dtype in (("float32",) if quick else ("float32", "bfloat16",
                                                                                              "uint8"))]
    names += ["async all_reduce float32", "async all_gather_into_tensor float32"]
    if world >= 2:
        names.append("new_group all_reduce float32")
    names.append("split_group all_reduce float32")
    names += ["coalescing all_reduce float32", "coalescing all_gather_into_tensor float32",
              "coalescing reduce_scatter_tensor float32"]
    names += [f"cuda_graph all_reduce {dtype}" for dtype in (("float32",) if quick else ("float32", "bfloat16"))]
    names += ["send to self float32", "time_estimator all_reduce float32"]
    return names


def parse_counts(text: str) -> dict[str, dict[str, int]]:
    """jax_mscclpp_nccl_call_counts()'s "function algorithm count" lines as {function: {algorithm: count}}."""
    counts: dict[str, dict[str, int]] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[2].isdigit():
            counts.setdefault(fields[0], {})[fields[1]] = int(fields[2])
    return counts


def counts_delta(after: dict, before: dict) -> dict[str, dict[str, int]]:
    delta: dict[str, dict[str, int]] = {}
    for function, per in after.items():
        for algorithm, count in per.items():
            grown = count - before.get(function, {}).get(algorithm, 0)
            if grown:
                delta.setdefault(function, {})[algorithm] = grown
    return delta


def our_call_counts() -> dict[str, dict[str, int]] | None:
    """Our library's counts in this process, or None when it is not loaded (never loads it)."""
    path = os.environ.get("NCCL_CLIENTS_LIBRARY")
    if not path:
        return None
    try:
        function = ctypes.CDLL(path, mode=os.RTLD_NOLOAD).jax_mscclpp_nccl_call_counts
    except (OSError, AttributeError):  # not loaded, or not ours
        return None
    function.restype = ctypes.c_char_p
    return parse_counts((function() or b"").decode())


class Watchdog(threading.Thread):
    """Ends the process with a timed-out line when the armed case outlasts its deadline."""

    def __init__(self, rank: int):
        super().__init__(daemon=True)
        self.rank = rank
        self.lock = threading.Lock()
        self.case: str | None = None
        self.deadline = 0.0
        self.started = 0.0

    def arm(self, case: str, seconds: float) -> None:
        with self.lock:
            self.case, self.started, self.deadline = case, time.monotonic(), time.monotonic() + seconds

    def disarm(self) -> None:
        with self.lock:
            self.case = None

    def run(self) -> None:
        while True:
            time.sleep(0.2)
            with self.lock:
                if self.case is None or time.monotonic() < self.deadline:
                    continue
                emit({"case": self.case, "rank": self.rank, "passed": 0, "failed": 0, "skipped": False,
                      "timed_out": True, "seconds": round(time.monotonic() - self.started, 2),
                      "detail": f"timed out after {self.deadline - self.started:.0f} s", "forwarded": None,
                      "calls": None})
                os._exit(124)


def emit(record: dict) -> None:
    sys.stdout.write("CASE " + json.dumps(record) + "\n")
    sys.stdout.flush()


class Refused(Exception):
    """torch itself refuses the call (before any NCCL call): the case is skipped, not failed."""


class Cases:
    """The case families, over torch.distributed's default group on cuda:0."""

    def __init__(self, torch, dist, rank: int, world: int, quick: bool):
        self.torch, self.dist, self.rank, self.world = torch, dist, rank, world
        self.device = torch.device("cuda:0")
        self.sizes = QUICK_SIZES if quick else SIZES

    # --- data and checks
    def dtype(self, name: str):
        return getattr(self.torch, name)

    def data(self, seed: int, rank: int, count: int, dtype: str, kind: str = "sum"):
        """Rank `rank`'s input (CPU): small integers, {-2, -1, 1, 2} for products (positive for uint8)."""
        torch = self.torch
        generator = torch.Generator().manual_seed(seed * 7919 + rank)
        unsigned = dtype == "uint8"
        if kind == "product":
            values = torch.tensor([1, 2] if unsigned else [-2, -1, 1, 2], dtype=torch.int64)
            picked = values[torch.randint(0, len(values), (count,), generator=generator)]
        else:
            picked = torch.randint(0 if unsigned else -8, 16 if unsigned else 9, (count,), generator=generator)
        return picked.to(self.dtype(dtype))

    def check(self, label: str, got, want, dtype: str) -> tuple[str, bool, str]:
        """got (any device, dtype) against want (float64, CPU)."""
        torch = self.torch
        got64 = got.detach().to("cpu").to(torch.float64).reshape(-1)
        want64 = want.to(torch.float64).reshape(-1)
        if got64.shape != want64.shape:
            return label, False, f"{label}: shape {tuple(got64.shape)}, expected {tuple(want64.shape)}"
        if got64.numel() == 0:
            return label, True, ""
        tolerance = TOLERANCE.get(dtype, 0.0) * max(1.0, float(want64.abs().max()))
        wrong = (got64 - want64).abs() > tolerance
        if torch.isnan(got64).any():
            wrong |= torch.isnan(got64)
        if not bool(wrong.any()):
            return label, True, ""
        first = int(wrong.nonzero()[0])
        return label, False, (f"{label}: {int(wrong.sum())} of {got64.numel()} wrong, first at {first}: got "
                              f"{float(got64[first])}, expected {float(want64[first])}")

    def seed(self, name: str, count: int) -> int:
        return zlib.crc32(f"{name}/{count}".encode()) & 0x7FFFFFF

    def everyone(self, seed, count, dtype, kind="sum"):
        return [self.data(seed, r, count, dtype, kind) for r in range(self.world)]

    def synchronize(self):
        self.torch.cuda.synchronize(self.device)

    # --- reductions
    def reduce_op(self, op: str):
        dist = self.dist
        if op == "PREMUL_SUM":
            make = getattr(dist, "_make_nccl_premul_sum", None)
            if make is None:
                from torch._C._distributed_c10d import _make_nccl_premul_sum as make
            return make(PREMUL_FACTOR)
        return getattr(dist.ReduceOp, op)

    def reduced(self, inputs, op: str, dtype: str):
        """The reduction over `inputs` (CPU tensors) in float64, as NCCL defines op."""
        torch = self.torch
        stacked = torch.stack([x.to(torch.float64) for x in inputs])
        if op in ("SUM", "AVG"):
            total = stacked.sum(0)
            if op == "SUM":
                return total
            if dtype in FLOAT_DTYPES:
                return total / len(inputs)
            return torch.div(total, len(inputs), rounding_mode="trunc")  # integer division truncates
        if op == "PREMUL_SUM":
            return (stacked * PREMUL_FACTOR).sum(0)
        if op == "PRODUCT":
            return stacked.prod(0)
        return stacked.min(0).values if op == "MIN" else stacked.max(0).values

    def all_reduce(self, name, op, dtype):
        checks = []
        for count in self.sizes:
            seed = self.seed(name, count)
            inputs = self.everyone(seed, count, dtype, "product" if op == "PRODUCT" else "sum")
            tensor = inputs[self.rank].to(self.device)
            self.dist.all_reduce(tensor, op=self.reduce_op(op))
            checks.append(self.check(f"n={count}", tensor, self.reduced(inputs, op, dtype), dtype))
        return checks

    def broadcast(self, name, dtype):
        checks, src = [], self.world - 1
        for count in self.sizes:
            inputs = self.everyone(self.seed(name, count), count, dtype)
            tensor = inputs[self.rank].to(self.device)
            self.dist.broadcast(tensor, src=src)
            checks.append(self.check(f"n={count} src={src}", tensor, inputs[src], dtype))
        return checks

    def reduce(self, name, dtype):
        checks, dst = [], 1 % self.world
        for count in self.sizes:
            inputs = self.everyone(self.seed(name, count), count, dtype)
            tensor = inputs[self.rank].to(self.device)
            self.dist.reduce(tensor, dst=dst, op=self.dist.ReduceOp.SUM)
            self.synchronize()
            if self.rank == dst:
                checks.append(self.check(f"n={count} dst={dst}", tensor, self.reduced(inputs, "SUM", dtype), dtype))
        return checks

    def all_gather(self, name, dtype):
        checks = []
        for count in self.sizes:
            inputs = self.everyone(self.seed(name, count), count, dtype)
            outputs = [self.torch.empty(count, dtype=self.dtype(dtype), device=self.device) for _ in inputs]
            self.dist.all_gather(outputs, inputs[self.rank].to(self.device))
            checks.append(self.check(f"n={count}", self.torch.cat(outputs), self.torch.cat(inputs), dtype))
        return checks

    def all_gather_into_tensor(self, name, dtype):
        checks = []
        for count in self.sizes:
            inputs = self.everyone(self.seed(name, count), count, dtype)
            output = self.torch.empty(self.world * count, dtype=self.dtype(dtype), device=self.device)
            self.dist.all_gather_into_tensor(output, inputs[self.rank].to(self.device))
            checks.append(self.check(f"n={count}", output, self.torch.cat(inputs), dtype))
        return checks

    def reduce_scatter(self, name, dtype, op="SUM", into_tensor=False):
        checks = []
        for count in self.sizes:
            inputs = self.everyone(self.seed(name, count), self.world * count, dtype)
            mine = inputs[self.rank].to(self.device)
            output = self.torch.empty(count, dtype=self.dtype(dtype), device=self.device)
            if into_tensor:
                self.dist.reduce_scatter_tensor(output, mine, op=self.reduce_op(op))
            else:
                self.dist.reduce_scatter(output, list(mine.chunk(self.world)), op=self.reduce_op(op))
            block = [x[self.rank * count:(self.rank + 1) * count] for x in inputs]
            checks.append(self.check(f"n={count}", output, self.reduced(block, op, dtype), dtype))
        return checks

    def all_to_all(self, name, dtype, single=False):
        checks = []
        for count in self.sizes:
            inputs = self.everyone(self.seed(name, count), self.world * count, dtype)
            mine = inputs[self.rank].to(self.device)
            want = self.torch.cat([x[self.rank * count:(self.rank + 1) * count] for x in inputs])
            if single:
                output = self.torch.empty_like(mine)
                self.dist.all_to_all_single(output, mine)
            else:
                outputs = [self.torch.empty(count, dtype=mine.dtype, device=self.device) for _ in range(self.world)]
                self.dist.all_to_all(outputs, list(mine.chunk(self.world)))
                output = self.torch.cat(outputs)
            checks.append(self.check(f"n={count}", output, want, dtype))
        return checks

    @staticmethod
    def split(src: int, dst: int, unit: int) -> int:
        """Elements `src` sends `dst` in the unequal all_to_all_single: 1 to 3 units, differing per pair."""
        return ((src * 2 + dst) % 3 + 1) * unit

    def all_to_all_unequal(self, name, dtype):
        checks, world = [], self.world
        for unit in (1, 1023):
            sent = [[self.split(s, d, unit) for d in range(world)] for s in range(world)]
            inputs = [self.data(self.seed(name, unit), s, sum(sent[s]), dtype) for s in range(world)]
            want = []
            for s in range(world):
                start = sum(sent[s][:self.rank])
                want.append(inputs[s][start:start + sent[s][self.rank]])
            want = self.torch.cat(want)
            output = self.torch.empty(want.numel(), dtype=self.dtype(dtype), device=self.device)
            self.dist.all_to_all_single(output, inputs[self.rank].to(self.device),
                                        output_split_sizes=[sent[s][self.rank] for s in range(world)],
                                        input_split_sizes=sent[self.rank])
            checks.append(self.check(f"unit={unit}", output, want, dtype))
        return checks

    def gather(self, name, dtype):
        checks, dst = [], 0
        for count in self.sizes:
            inputs = self.everyone(self.seed(name, count), count, dtype)
            outputs = ([self.torch.empty(count, dtype=self.dtype(dtype), device=self.device) for _ in inputs]
                       if self.rank == dst else None)
            self.dist.gather(inputs[self.rank].to(self.device), outputs, dst=dst)
            self.synchronize()
            if self.rank == dst:
                checks.append(self.check(f"n={count} dst={dst}", self.torch.cat(outputs), self.torch.cat(inputs),
                                         dtype))
        return checks

    def scatter(self, name, dtype):
        checks, src = [], 0
        for count in self.sizes:
            source = self.data(self.seed(name, count), src, self.world * count, dtype)
            output = self.torch.empty(count, dtype=self.dtype(dtype), device=self.device)
            pieces = list(source.to(self.device).chunk(self.world)) if self.rank == src else None
            self.dist.scatter(output, pieces, src=src)
            checks.append(self.check(f"n={count} src={src}", output,
                                     source[self.rank * count:(self.rank + 1) * count], dtype))
        return checks

    def barrier(self, name):
        self.dist.barrier()
        self.synchronize()
        return [("barrier", True, "")]

    # --- point to point
    def p2p(self, name, family, dtype):
        dist, torch, rank, world = self.dist, self.torch, self.rank, self.world
        checks, nxt, prev = [], (self.rank + 1) % world, (self.rank - 1) % world
        for count in self.sizes:
            seed = self.seed(name, count)
            inputs = self.everyone(seed, count, dtype)
            backward = [self.data(seed + 1, r, count, dtype) for r in range(world)]
            mine = inputs[rank].to(self.device)
            received = torch.empty_like(mine)
            if family == "send_recv pairs":
                partner = rank ^ 1
                if partner >= world:
                    continue
                if rank % 2 == 0:
                    dist.send(mine, partner)
                    dist.recv(received, partner)
                else:
                    dist.recv(received, partner)
                    dist.send(mine, partner)
                checks.append(self.check(f"n={count} from {partner}", received, inputs[partner], dtype))
            elif family == "isend_irecv ring":
                # Separate calls, not a group: even ranks send first and odd ones receive first, so that no send
                # waits behind its own rank's send on one communicator (2 ranks: next and prev are one peer).
                if rank % 2 == 0:
                    works = [dist.isend(mine, nxt), dist.irecv(received, prev)]
                else:
                    works = [dist.irecv(received, prev), dist.isend(mine, nxt)]
                for work in works:
                    work.wait()
                checks.append(self.check(f"n={count} from {prev}", received, inputs[prev], dtype))
            elif family == "batch_isend_irecv ring":
                for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, mine, nxt),
                                                    dist.P2POp(dist.irecv, received, prev)]):
                    work.wait()
                checks.append(self.check(f"n={count} from {prev}", received, inputs[prev], dtype))
            else:  # both directions: the forward message to next, the backward one to prev
                from_next = torch.empty_like(mine)
                ops = [dist.P2POp(dist.isend, mine, nxt), dist.P2POp(dist.isend, backward[rank].to(self.device), prev),
                       dist.P2POp(dist.irecv, received, prev), dist.P2POp(dist.irecv, from_next, nxt)]
                for work in dist.batch_isend_irecv(ops):
                    work.wait()
                checks.append(self.check(f"n={count} forward from {prev}", received, inputs[prev], dtype))
                checks.append(self.check(f"n={count} backward from {nxt}", from_next, backward[nxt], dtype))
        self.synchronize()
        return checks

    def send_to_self(self, name, dtype):
        """A rank's send to itself with its receive, in one batch (a lone blocking send to self could only hang)."""
        dist, torch = self.dist, self.torch
        mine = self.data(self.seed(name, 1023), self.rank, 1023, dtype).to(self.device)
        received = torch.empty_like(mine)
        try:
            works = dist.batch_isend_irecv([dist.P2POp(dist.isend, mine, self.rank),
                                            dist.P2POp(dist.irecv, received, self.rank)])
        except ValueError as refusal:
            raise Refused(f"torch refuses batch_isend_irecv to self: {refusal}")
        for work in works:
            work.wait()
        return [self.check("batch_isend_irecv self n=1023", received, mine.to("cpu"), dtype)]

    # --- groups, asynchronous work, coalescing, graphs, the estimator
    def subgroup_all_reduce(self, name, members, group):
        checks = []
        for count in self.sizes:
            inputs = self.everyone(self.seed(name, count), count, "float32")
            if self.rank in members:
                tensor = inputs[self.rank].to(self.device)
                self.dist.all_reduce(tensor, group=group)
                checks.append(self.check(f"n={count} over {members}", tensor,
                                         self.reduced([inputs[m] for m in members], "SUM", "float32"), "float32"))
        self.synchronize()
        return checks

    def new_group(self, name):
        members = [0, 1]
        group = self.dist.new_group(ranks=members)
        return self.subgroup_all_reduce(name, members, group)

    def split_group(self, name):
        colors = [[r for r in range(self.world) if r % 2 == c] for c in range(min(2, self.world))]
        group = self.dist.split_group(split_ranks=colors)
        return self.subgroup_all_reduce(name, colors[self.rank % 2], group)

    def asynchronous(self, name, family):
        dist, torch = self.dist, self.torch
        checks, pending = [], []
        for count in self.sizes:
            inputs = self.everyone(self.seed(name, count), count, "float32")
            if family == "all_reduce":
                tensor = inputs[self.rank].to(self.device)
                pending.append((count, dist.all_reduce(tensor, async_op=True), tensor,
                                self.reduced(inputs, "SUM", "float32")))
            else:
                output = torch.empty(self.world * count, device=self.device)
                pending.append((count, dist.all_gather_into_tensor(output, inputs[self.rank].to(self.device),
                                                                   async_op=True), output, torch.cat(inputs)))
        for count, work, got, want in pending:  # every call is outstanding before the first wait
            work.wait()
            checks.append(self.check(f"n={count}", got, want, "float32"))
        return checks

    def coalescing(self, name, family):
        from torch.distributed.distributed_c10d import _coalescing_manager
        dist, torch = self.dist, self.torch
        cases = []
        for count in self.sizes:
            factor = self.world if family == "all_gather_into_tensor" else 1
            inputs = self.everyone(self.seed(name, count), count * (self.world if family == "reduce_scatter_tensor"
                                                                    else 1), "float32")
            cases.append((count, inputs, inputs[self.rank].to(self.device),
                          torch.empty(count * factor, device=self.device)))
        with _coalescing_manager(device=self.device, async_ops=True) as manager:
            for count, inputs, mine, output in cases:
                if family == "all_reduce":
                    dist.all_reduce(mine)
                elif family == "all_gather_into_tensor":
                    dist.all_gather_into_tensor(output, mine)
                else:
                    dist.reduce_scatter_tensor(output, mine)
        manager.wait()
        checks = []
        for count, inputs, mine, output in cases:
            if family == "all_reduce":
                checks.append(self.check(f"n={count}", mine, self.reduced(inputs, "SUM", "float32"), "float32"))
            elif family == "all_gather_into_tensor":
                checks.append(self.check(f"n={count}", output, torch.cat(inputs), "float32"))
            else:
                block = [x[self.rank * count:(self.rank + 1) * count] for x in inputs]
                checks.append(self.check(f"n={count}", output, self.reduced(block, "SUM", "float32"), "float32"))
        return checks

    def cuda_graph(self, name, dtype):
        """An all_reduce captured once (after a copy of the static input) and replayed 3 times on new inputs."""
        dist, torch = self.dist, self.torch
        checks = []
        for count in (1023, 65541):
            static_input = self.data(self.seed(name, count), self.rank, count, dtype).to(self.device)
            buffer = torch.empty_like(static_input)
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                for _ in range(2):  # warm-up outside the capture, as torch's graph docs ask
                    buffer.copy_(static_input)
                    dist.all_reduce(buffer)
            torch.cuda.current_stream(self.device).wait_stream(side)
            self.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                buffer.copy_(static_input)
                dist.all_reduce(buffer)
            for replay in range(3):
                inputs = self.everyone(self.seed(name, count) + 1 + replay, count, dtype)
                static_input.copy_(inputs[self.rank].to(self.device))
                graph.replay()
                self.synchronize()
                checks.append(self.check(f"n={count} replay {replay}", buffer, self.reduced(inputs, "SUM", dtype),
                                         dtype))
        return checks

    def time_estimator(self, name):
        """torch's collective time estimator (ProcessGroupNCCL's _start/_end_time_estimate: ncclGroupStart, the
        calls, ncclGroupSimulateEnd): an estimate comes back and nothing runs."""
        from torch.distributed import distributed_c10d
        estimator = getattr(distributed_c10d, "_time_estimator", None)
        if estimator is None:
            raise Refused("torch.distributed.distributed_c10d._time_estimator is absent in this torch")
        tensor = self.data(self.seed(name, 65541), self.rank, 65541, "float32").to(self.device)
        before = tensor.clone()
        try:
            with estimator(device=self.device) as manager:
                self.dist.all_reduce(tensor)
        except NotImplementedError as refusal:
            raise Refused(f"torch: {refusal}")
        self.synchronize()
        estimate = getattr(manager, "estimated_time", None)
        ok = isinstance(estimate, (int, float)) and estimate >= 0
        return [("an estimate came back", ok, "" if ok else f"estimated_time = {estimate!r}"),
                self.check("nothing ran", tensor, before.to("cpu"), "float32"),
                ("estimate", True, f"estimated_time = {estimate!r}")]

    def run(self, name: str):
        words = name.split()
        dtype = words[-1]
        if words[0] == "all_reduce":
            return self.all_reduce(name, words[1], dtype)
        family = " ".join(words[:-1])
        simple = {"broadcast": self.broadcast, "reduce": self.reduce, "all_gather": self.all_gather,
                  "all_gather_into_tensor": self.all_gather_into_tensor, "gather": self.gather,
                  "scatter": self.scatter}
        if family in simple:
            return simple[family](name, dtype)
        if family == "reduce_scatter":
            return self.reduce_scatter(name, dtype)
        if family == "reduce_scatter_tensor":
            return self.reduce_scatter(name, dtype, into_tensor=True)
        if family == "reduce_scatter_tensor MAX":
            return self.reduce_scatter(name, dtype, op="MAX", into_tensor=True)
        if family == "all_to_all":
            return self.all_to_all(name, dtype)
        if family == "all_to_all_single equal":
            return self.all_to_all(name, dtype, single=True)
        if family == "all_to_all_single unequal":
            return self.all_to_all_unequal(name, dtype)
        if name == "barrier":
            return self.barrier(name)
        if family in P2P:
            return self.p2p(name, family, dtype)
        if family == "send to self":
            return self.send_to_self(name, dtype)
        if family.startswith("async "):
            return self.asynchronous(name, words[1])
        if family == "new_group all_reduce":
            return self.new_group(name)
        if family == "split_group all_reduce":
            return self.split_group(name)
        if family.startswith("coalescing "):
            return self.coalescing(name, words[1])
        if family == "cuda_graph all_reduce":
            return self.cuda_graph(name, dtype)
        if family == "time_estimator all_reduce":
            return self.time_estimator(name)
        raise KeyError(f"no case {name!r}")


def meet(store, key: str, world: int) -> None:
    """Every rank reaches `key` before any goes on (the store's counter; the watchdog bounds the wait)."""
    store.add(key, 1)
    while store.add(key, 0) < world:
        time.sleep(0.002)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="print the case names for --world and end")
    parser.add_argument("--world", type=int, default=int(os.environ.get("WORLD_SIZE", "2")))
    parser.add_argument("--quick", action="store_true", help="fewer dtypes and sizes")
    parser.add_argument("--cases", default="", help="comma-separated case names (default: every case)")
    parser.add_argument("--case-timeout", type=float, default=40.0)
    args = parser.parse_args()
    if args.list:
        print("\n".join(case_names(args.world, args.quick)))
        return 0
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    names = [n for n in args.cases.split(",") if n] or case_names(world, args.quick)

    watchdog = Watchdog(rank)
    watchdog.start()
    watchdog.arm("init_process_group", max(60.0, args.case_timeout))
    import datetime

    import torch
    import torch.distributed as dist

    torch.cuda.set_device(0)
    dist.init_process_group("nccl", device_id=torch.device("cuda:0"),
                            timeout=datetime.timedelta(seconds=max(60.0, args.case_timeout + 20)))
    store = dist.distributed_c10d._get_default_store()
    meet(store, "nccl_clients/ready", world)
    watchdog.disarm()
    print(f"READY rank {rank} of {world}: torch {torch.__version__}, NCCL {torch.cuda.nccl.version()}", flush=True)
    cases = Cases(torch, dist, rank, world, args.quick)
    for index, name in enumerate(names):
        watchdog.arm(name, args.case_timeout)
        before = our_call_counts()
        started = time.monotonic()
        record = {"case": name, "rank": rank, "passed": 0, "failed": 0, "skipped": False, "timed_out": False}
        try:
            checks = cases.run(name)
            cases.synchronize()
            record["passed"] = sum(1 for _, ok, _ in checks if ok)
            record["failed"] = sum(1 for _, ok, _ in checks if not ok)
            record["detail"] = "; ".join(text for _, _, text in checks if text)[:1500]
        except Refused as refusal:
            record["skipped"], record["detail"] = True, f"skipped: {refusal}"
        except Exception as error:  # noqa: BLE001 -- any failure of the call is the case's result
            record["failed"] = 1
            record["detail"] = f"{type(error).__name__}: {' '.join(str(error).split())}"[:1500]
        record["seconds"] = round(time.monotonic() - started, 3)
        after = our_call_counts()
        if after is None:
            record["forwarded"], record["calls"] = None, None
        else:
            record["calls"] = counts_delta(after, before or {})
            record["forwarded"] = sum(per.get("nccl", 0) for per in record["calls"].values())
        emit(record)
        meet(store, f"nccl_clients/case/{index}", world)
        watchdog.disarm()
    watchdog.arm("destroy_process_group", 30)
    dist.destroy_process_group()
    watchdog.disarm()
    return 0


if __name__ == "__main__":
    sys.exit(main())
