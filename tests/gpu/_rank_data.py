"""The data of the multi-process GPU workers (_jax_worker.py, _nccl_worker.py): every rank's input, rebuilt in each
process from the seed so that each can check its own result against all ranks' data. Random, never zeros:
integers in [-100, 100), floats standard normal rounded to the dtype."""

import numpy as np


def per_rank_inputs(world: int, seed: int, count: int, dtype) -> list:
    out = []
    for r in range(world):
        rng = np.random.default_rng(seed * 1000 + r)
        if np.issubdtype(np.dtype(dtype), np.integer):
            out.append(rng.integers(-100, 100, size=count).astype(dtype))
        else:
            out.append(rng.standard_normal(count).astype(np.float32).astype(dtype))
    return out
