"""Smoke test of an installed wheel on CPU devices: import, info(), and a psum on 4 CPU devices against lax.

Run from outside the source tree, so the installed copy is the one imported. Argument: "cuda" when the wheel was
built with the CUDA parts (info() must say so).
"""

import os
import sys

os.environ["JAX_PLATFORMS"] = "cpu"
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import Mesh  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import jax_mscclpp as jm  # noqa: E402

print("imported", jm.__file__)
assert "site-packages" in jm.__file__, "the source tree's copy was imported, not the installed one"
info = jm.info()
print("info: platforms", info["platforms"], "cuda_built", info["cuda_built"], "timeout_s", info["timeout_s"])
assert "cpu" in info["platforms"]
if sys.argv[1:] == ["cuda"]:
    assert info["cuda_built"], "the wheel was built without its CUDA parts"
from jax_mscclpp._native import native  # noqa: E402

assert not hasattr(native, "skip_next_calls"), "the wheel's module has the testing build's fault hooks"

mesh = Mesh(np.array(jax.devices()[:4]), ("x",))


def summed(psum):
    return jax.jit(jax.shard_map(lambda x: psum(x, "x"), mesh=mesh, in_specs=P("x"), out_specs=P()))


x = np.random.default_rng(0).standard_normal((4 * 8, 33)).astype(np.float32)
ours, theirs = summed(jm.psum)(x), summed(lax.psum)(x)
np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=1e-6, atol=1e-6)
print(f"psum on {len(jax.devices())} CPU devices matches lax: OK")
