"""float64, int64 and uint64 with jax_enable_x64 (a subprocess: x64 must be on before JAX starts)."""

import os
import subprocess
import sys
import textwrap


def test_x64_dtypes_match_lax():
    script = textwrap.dedent("""
        import numpy as np, jax
        from jax import lax
        from jax.sharding import Mesh
        import jax_mscclpp as jm
        from tests.helpers import P, compare_with_lax, random_array
        mesh = Mesh(np.array(jax.devices()[:8]), ("x",))
        rng = np.random.default_rng(5)
        for dtype in ["float64", "int64", "uint64"]:
            x = random_array(rng, (8 * 5,), dtype)
            for op, ref in [("sum", lax.psum), ("max", lax.pmax), ("min", lax.pmin)]:
                compare_with_lax(lambda v: jm.all_reduce(v, "x", op=op), lambda v: ref(v, "x"), mesh, (x,), P("x"), P())
            compare_with_lax(lambda v: jm.all_gather(v, "x"), lambda v: lax.all_gather(v, "x"), mesh, (x,), P("x"), P("x"))
        print("x64 ok")
    """)
    env = dict(os.environ, JAX_ENABLE_X64="1", JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=8")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", script], env=env, cwd=root, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "x64 ok" in out.stdout
