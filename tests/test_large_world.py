"""A world of 16 ranks, past the 8 members an emulated SwitchChannel holds: every collective against lax on 16
virtual CPU devices, over one axis, over sub-groups of a 2-D mesh, forced algorithms and DSL plans (a subprocess:
JAX fixes the device count when it starts)."""

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import numpy as np, jax
    from jax import lax
    from jax.sharding import Mesh
    import jax_mscclpp as jm
    from jax_mscclpp.dsl import library
    from tests.helpers import P, compare_with_lax, random_array

    devices = jax.devices()
    assert len(devices) == 16, devices
    n = 16
    mesh = Mesh(np.array(devices)[np.random.default_rng(3).permutation(n)], ("x",))
    rng = np.random.default_rng(16)
    checks = 0

    def check(ours, ref, x, in_spec, out_spec, on=mesh):
        global checks
        compare_with_lax(ours, ref, on, (x,), in_spec, out_spec)
        checks += 1

    assert jm.Communicator(mesh, "x").world_size == n
    for dtype in ["float32", "bfloat16", "int32", "uint8"]:
        for count in [1, 7, 1023]:
            x = random_array(rng, (n * count,), dtype)
            for op, ref in [("sum", lax.psum), ("max", lax.pmax), ("min", lax.pmin)]:
                check(lambda v: jm.all_reduce(v, "x", op=op), lambda v: ref(v, "x"), x, P("x"), P())
            check(lambda v: jm.all_gather(v, "x", tiled=True), lambda v: lax.all_gather(v, "x", tiled=True),
                  x, P("x"), P("x"))
            y = random_array(rng, (n * n * count,), dtype)
            check(lambda v: jm.psum_scatter(v, "x", tiled=True), lambda v: lax.psum_scatter(v, "x", tiled=True),
                  y, P("x"), P("x"))
            check(lambda v: jm.all_to_all(v, "x", 0, 0, tiled=True),
                  lambda v: lax.all_to_all(v, "x", 0, 0, tiled=True), y, P("x"), P("x"))
    for algorithm in ["1pa_ll", "2pa_ll", "2pa_hb"]:
        for count in [3, 4099]:
            x = random_array(rng, (n * count,), "float32")
            check(lambda v: jm.psum(v, "x", algorithm=algorithm), lambda v: lax.psum(v, "x"), x, P("x"), P())
    for program in ["allreduce_1pa_ll", "allreduce_2pa_hb", "allreduce_2pa_nvls"]:
        name = "plan16_" + program
        jm.register_algorithm(getattr(library, program), name=name)
        x = random_array(rng, (n * 1023,), "float32")
        check(lambda v: jm.psum(v, "x", algorithm=name), lambda v: lax.psum(v, "x"), x, P("x"), P())
        jm.unregister_algorithm(name)
    grid = Mesh(np.array(devices).reshape(2, 8), ("a", "b"))
    square = Mesh(np.array(devices).reshape(4, 4), ("a", "b"))
    for on in (grid, square):
        x = random_array(rng, (on.shape["a"] * 5, on.shape["b"] * 7), "float32")
        for axes in ["a", "b", ("a", "b"), ("b", "a")]:
            check(lambda v: jm.psum(v, axes), lambda v: lax.psum(v, axes), x, P("a", "b"), P("a", "b"), on=on)
    x = random_array(rng, (2 * 3, 8 * 4099), "float32")
    check(lambda v: jm.psum(v, ("a", "b"), algorithm="2ph"), lambda v: lax.psum(v, ("a", "b")), x,
          P("a", "b"), P("a", "b"), on=grid)
    print(f"16 ranks: {checks} checks ok")
""")


def test_sixteen_ranks_match_lax():
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=16")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, cwd=root, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    assert "checks ok" in out.stdout, out.stdout[-2000:]
