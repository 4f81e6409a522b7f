"""Bad input is a clear error at trace time; a lost peer is a timeout error naming rank, peer and op."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import Mesh

import jax_mscclpp as jm
from jax_mscclpp.testing import faults
from tests.helpers import P, random_array, sharded


def run(fn, mesh, x, out_specs=P("x")):
    return jax.block_until_ready(sharded(fn, mesh, P("x"), out_specs)(x))


def test_unknown_axis_is_a_name_error(mesh8, rng):
    x = random_array(rng, (8,), "float32")
    with pytest.raises(NameError, match="unknown axis name 'y'.*bound here: \\('x',\\)"):
        run(lambda v: jm.psum(v, "y"), mesh8, x)
    with pytest.raises(NameError, match="'z'"):
        run(lambda v: jm.all_gather(v, ("x", "z")), mesh8, x)


def test_outside_shard_map_is_a_clear_error(rng):
    x = random_array(rng, (8,), "float32")
    with pytest.raises(NameError, match="inside jax.shard_map"):
        jax.jit(lambda v: jm.psum(v, "x"))(x)
    with pytest.raises(NameError, match="inside jax.shard_map"):
        jm.all_to_all(x, "x", 0, 0)


@pytest.mark.parametrize("case", ["bool_psum_scatter", "key_psum", "key_pmax"])
def test_a_dtype_lax_refuses_is_a_type_error_as_lax(mesh8, case):
    """The dtype errors are lax's own, at trace time: a reduction without that arithmetic. Every other dtype runs
    (tests/test_dtypes.py)."""
    x = {"bool_psum_scatter": jnp.arange(8 * 8) % 3 == 0}.get(case, jax.random.split(jax.random.key(0), 8 * 8))
    ours, theirs = {"bool_psum_scatter": (jm.psum_scatter, lax.psum_scatter), "key_psum": (jm.psum, lax.psum),
                    "key_pmax": (jm.pmax, lax.pmax)}[case]
    kwargs = {"tiled": True} if case == "bool_psum_scatter" else {}
    with pytest.raises(TypeError, match="does not accept dtype"):
        run(lambda v: theirs(v, "x", **kwargs), mesh8, x)
    with pytest.raises(TypeError, match=f"unsupported dtype {x.dtype} for op"):
        run(lambda v: ours(v, "x", **kwargs), mesh8, x)


def test_unsupported_op_and_algorithm(mesh8, rng):
    x = random_array(rng, (8,), "float32")
    with pytest.raises(ValueError, match="unsupported op 'prod'.*sum, max, min"):
        run(lambda v: jm.all_reduce(v, "x", op="prod"), mesh8, x)
    with pytest.raises(ValueError, match="unknown algorithm 'fastest'.*1pa_ll"):
        run(lambda v: jm.psum(v, "x", algorithm="fastest"), mesh8, x)
    with pytest.raises(ValueError, match="'2pr' does not run on platform 'cpu'"):
        run(lambda v: jm.psum(v, "x", algorithm="2pr"), mesh8, x, P())


def test_shape_errors(mesh8, rng):
    x = random_array(rng, (8 * 3,), "float32")
    with pytest.raises(ValueError, match="does not divide by the axis size 8"):
        run(lambda v: jm.psum_scatter(v, "x", tiled=True), mesh8, x)
    with pytest.raises(ValueError, match="must equal the axis size 8"):
        run(lambda v: jm.all_to_all(v, "x", 0, 0), mesh8, x)
    with pytest.raises(ValueError, match="out of range"):
        run(lambda v: jm.all_gather(v, "x", axis=3), mesh8, x)


def test_lost_peer_times_out_naming_rank_peer_and_op(cpu_devices, rng, fault_hooks):
    # A mesh of its own: after a timeout its communicator refuses further calls.
    mesh = Mesh(np.array(cpu_devices[:8])[[3, 1, 4, 0, 5, 2, 7, 6]], ("x",))
    comm = jm.Communicator(mesh, "x")
    lost = mesh.devices[5]  # rank 5
    x = random_array(rng, (8 * 4,), "float32")
    f = sharded(lambda v: jm.psum(v, "x"), mesh, P("x"), P())
    jax.block_until_ready(f(x))  # a healthy call first
    faults.skip_next_calls(comm, lost)
    with faults.timeout(1.0):
        with pytest.raises(Exception, match=r"timeout after 1 s in all_reduce .*rank \d of 8 waited for peer 5"):
            jax.block_until_ready(f(x))
        with pytest.raises(Exception, match="unusable after an earlier failure"):
            jax.block_until_ready(f(x))
    comm.destroy()
