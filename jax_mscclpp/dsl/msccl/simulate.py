"""A numpy run of an MSCCLang program's chunk routing, for any collective, custom ones included.

The operations run in program order, each on whole chunks: because a program uses only the latest reference to
every slot (dag.py), that order computes what any correct schedule of it computes. A rank's input is cut into
as many equal chunks as its input buffer has slots; slot ``i`` of a buffer covers elements ``[i*e, (i+1)*e)``.
Slots that start empty start as NaN (the dtype's minimum for integers), so a result the program never writes
shows. The plan of a standard collective runs under ``jax_mscclpp.dsl.run_plan``; this runs the routing itself.
"""

from __future__ import annotations

from .buffers import Buffer
from .dag import REDUCE


def simulate(prog, inputs: list, op: str = "sum") -> list[dict]:
    """Per rank, buffer (``Buffer.input``, ``Buffer.output`` or a scratch name) -> numpy array after the program,
    from one flat input array per rank (same dtype and size, a multiple of the input's chunk count)."""
    import numpy as np

    from ..simulate import REDUCTIONS

    if op not in REDUCTIONS:
        raise ValueError(f"op must be one of {sorted(REDUCTIONS)}")
    if len(inputs) != prog.num_ranks:
        raise ValueError(f"the program has {prog.num_ranks} ranks but got {len(inputs)} inputs")
    arrays = [np.asarray(x).reshape(-1) for x in inputs]
    if len({(a.dtype, a.size) for a in arrays}) != 1:
        raise ValueError("all ranks' inputs must have one dtype and size")
    dtype, count = arrays[0].dtype, arrays[0].size
    input_chunks = len(prog.buffers[0][Buffer.input])
    if input_chunks == 0 or count % input_chunks:
        raise ValueError(f"input size {count} is not a multiple of the {input_chunks} input chunks")
    e = count // input_chunks
    empty = np.iinfo(dtype).min if np.issubdtype(dtype, np.integer) else np.nan
    memory = []
    for rank_buffers in prog.buffers:
        by_list: dict[int, np.ndarray] = {}  # aliased buffers (in place) share one array
        memory.append({name: by_list.setdefault(id(slots), np.full(len(slots) * e, empty, dtype))
                       for name, slots in rank_buffers.items()})
    for (rank, buffer, index), chunk in prog.dag.initial.items():
        origin = arrays[chunk.origin_rank][chunk.origin_index * e:(chunk.origin_index + 1) * e]
        memory[rank][buffer][index * e:(index + 1) * e] = origin
    reduce = REDUCTIONS[op]
    for operation in prog.dag.operations:
        src, dst = operation.src, operation.dst
        values = memory[src.rank][src.buffer][src.index * e:(src.index + src.size) * e].copy()
        target = memory[dst.rank][dst.buffer][dst.index * e:(dst.index + dst.size) * e]
        target[:] = reduce(target, values).astype(dtype) if operation.kind == REDUCE else values
    return memory
