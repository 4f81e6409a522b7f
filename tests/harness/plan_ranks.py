"""Virtual ranks for execution plans: one plan run by the GPU executor on N ranks of one GPU.

Each rank is a native ``ExecutorRank`` (native/executor_rank.h): the rank of the JAX path's GPU communicators
(``GpuRank``: registered scratch, semaphores, device epoch, timeout record, and the channel tables of its
CollectiveContext: memory channels, port channels over the scratch when the plan has any, the emulated
SwitchChannel up to 8 ranks), an input and an output buffer, a stream, and the plan bound to that rank as the JAX
path binds one (kernels/executor/executor.h). Ranks exchange endpoints as bytes,
as separate processes would. A call is launched on every rank's stream before any is synchronized, so ranks
that wait for each other run concurrently. The same ranks also run the hand-written collectives
(``launch_collective``), which is how bench/kernels/executor.py compares the two.

Typical use::

    plan = jax_mscclpp.dsl.library.PROGRAMS["allreduce_2pa_ll"](4).lower()
    with PlanRanks(plan, max_block_count=1 << 16) as pr:
        outputs = pr.run([x0, x1, x2, x3], op="sum")
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from jax_mscclpp.dsl.plan_format import receives_nothing

from .virtual_ranks import DTYPE_CODES, REDUCE_CODES, RankData, connect_all, make_rank, native_cuda

INPUT, OUTPUT, SCRATCH = 0, 1, 2
_CODE_OF_ITEMSIZE = {1: DTYPE_CODES["int8"], 2: DTYPE_CODES["bfloat16"], 4: DTYPE_CODES["float32"],
                     8: DTYPE_CODES["float64"]}


class PlanRanksError(RuntimeError):
    """A rank's kernel failed; the message carries every rank's timeout record."""


class NotResidentError(ValueError):
    """The plan's blocks on every rank of the GPU cannot all be resident at once: launched, the call would never end
    (its blocks wait for blocks that wait to start) and the timeout's trap would end the process's CUDA context."""


def plan_spec(cuda, plan: dict):
    """The native decoded plan (``ExecutorPlanSpec``) of a plan dict (PLAN.md)."""
    from jax_mscclpp.plan_encoding import encode_plan

    e = encode_plan(plan)
    return cuda.ExecutorPlanSpec(e["name"], e["collective"], e["world_size"], e["geometry"], e["channels"],
                                 e["threadblocks"])


def dtype_code(dtype) -> int:
    """The native dtype code of a dtype or dtype name ("bfloat16" included)."""
    if isinstance(dtype, str):
        return DTYPE_CODES[dtype]
    return DTYPE_CODES[np.dtype(dtype).name]


class PlanRanks(RankData):
    """N virtual ranks running ``plan`` (a lowered plan dict).

    max_block_count / itemsize size the input and output buffers; scratch_bytes defaults to what one call of
    max_block_count elements of 8 bytes needs in one launch (smaller scratch pipelines larger calls).
    """

    def __init__(self, plan: dict, *, max_block_count: int, itemsize: int = 8, device: int = 0,
                 scratch_bytes: int | None = None, channels_per_peer: int | None = None, threads: int = 0,
                 timeout_s: float | None = None, port_channels: bool | None = None, stream_blocks: int = 4):
        cuda = native_cuda()
        if cuda is None:
            from . import MISSING

            raise RuntimeError(MISSING)
        self.cuda = cuda
        self.plan = plan
        self.spec = plan_spec(cuda, plan)
        self.nranks = n = self.spec.world_size
        self.input_blocks, self.output_blocks = self.spec.input_blocks, self.spec.output_blocks
        in_bytes = max(self.input_blocks * max_block_count * itemsize, 16)
        out_bytes = max(self.output_blocks * max_block_count * itemsize, 16)
        if scratch_bytes is None:
            scratch_bytes = self.spec.scratch_bytes(max_block_count, _CODE_OF_ITEMSIZE[itemsize])
        cpp = channels_per_peer or self.spec.channels_per_peer
        port = self.spec.uses_port_channels if port_channels is None else port_channels
        self.ranks = []
        try:
            for r in range(n):
                self.ranks.append(make_rank(cuda.ExecutorRank, r, n, device=device, input_bytes=in_bytes,
                                            output_bytes=out_bytes, scratch_bytes=scratch_bytes,
                                            channels_per_peer=cpp, timeout_s=timeout_s, port_channels=port,
                                            stream_blocks=stream_blocks))
            connect_all(self.ranks)
            for rk in self.ranks:
                rk.set_plan(self.spec, threads)
        except BaseException:
            self.close()
            raise

    def launch_count(self, block_count: int, dtype) -> int:
        return self.ranks[0].launch_count(block_count, dtype_code(dtype))

    # -- running ---------------------------------------------------------------------------------------------------

    def check_resident(self, dtype, op: str = "sum") -> None:
        """Raises NotResidentError where the plan's blocks on all the ranks (one GPU) exceed what the GPU holds at
        once for this dtype and op (kernels/executor/executor.h, plan_resident_blocks)."""
        info = self.ranks[0].plan_info()
        need = self.nranks * info["threadblocks"]
        holds = self.ranks[0].resident_blocks(dtype_code(dtype), REDUCE_CODES[op])  # 0: the device could not say
        if holds and need > holds:
            raise NotResidentError(
                f"plan {self.plan.get('name', '?')!r}: {self.nranks} ranks x {info['threadblocks']} blocks of "
                f"{info['threads']} threads and {info['image_bytes']} B of shared memory = {need} blocks must be "
                f"resident at once on one GPU, which holds {holds}")

    def launch(self, block_count: int, dtype, op: str = "sum", ranks: Iterable[int] | None = None) -> list[int]:
        self.check_resident(dtype, op)
        ranks = list(range(self.nranks)) if ranks is None else list(ranks)
        for r in ranks:
            self.ranks[r].launch_plan(block_count, dtype_code(dtype), REDUCE_CODES[op])
        return ranks

    def launch_collective(self, collective: int, algorithm: int, block_count: int, dtype, op: str = "sum") -> None:
        for rk in self.ranks:
            rk.launch_collective(collective, algorithm, block_count, dtype_code(dtype), REDUCE_CODES[op])

    def synchronize(self, ranks: Iterable[int] | None = None) -> None:
        ranks = list(range(self.nranks)) if ranks is None else list(ranks)
        for r in ranks:
            try:
                self.ranks[r].synchronize()
            except RuntimeError as e:  # a trap poisons the shared context: report every rank's record
                text = str(e)
                for m in (rk.error_message() for rk in self.ranks):
                    if m and m not in text:
                        text += "\n" + m
                raise PlanRanksError(text) from None

    def run(self, inputs: Sequence[np.ndarray], op: str = "sum", poison: int = 0xEE) -> list[np.ndarray]:
        """One call on every rank: rank r's input is inputs[r] (input_blocks * block_count elements). Outputs
        are poisoned first, so an element the executor never writes shows; but a permutation's rank that receives
        nothing starts from the zeros the runtime gives it before the plan runs (PLAN.md, "permutation")."""
        if len(inputs) != self.nranks:
            raise ValueError(f"{self.nranks} inputs needed")
        dt = np.asarray(inputs[0]).dtype
        count = np.asarray(inputs[0]).size
        if count % self.input_blocks:
            raise ValueError(f"input count {count} is not a multiple of {self.input_blocks} blocks")
        block_count = count // self.input_blocks
        for r, x in enumerate(inputs):
            self.upload(r, INPUT, np.asarray(x, dtype=dt).reshape(-1))
            self.fill(r, OUTPUT, 0 if receives_nothing(self.plan, r) else poison)
        self.launch(block_count, dt, op)
        self.synchronize()
        nbytes = self.output_blocks * block_count * dt.itemsize
        return [self.download(r, OUTPUT, nbytes, dtype=dt) for r in range(self.nranks)]

    def time(self, block_count: int, dtype, op: str = "sum", *, repeats: int = 50, samples: int = 10,
             collective: int | None = None, algorithm: int = 0) -> list[float]:
        """Milliseconds per call (one value per sample) of ``repeats`` back-to-back calls on every rank: the plan,
        or with ``collective`` set the hand-written ``launch_collective(collective, algorithm)``."""
        kind = 0 if collective is None else 1
        if kind == 0:
            self.check_resident(dtype, op)
        return self.cuda.time_calls(self.ranks, kind, collective or 0, algorithm, block_count, dtype_code(dtype),
                                    REDUCE_CODES[op], repeats, samples)
