"""After a failed call (ranks in mismatched calls, a lost peer) the process stays usable: the status code says what
happened, the message says how to go on, a program lowered afterwards runs on a fresh communicator by itself, and
``jm.reset()`` makes programs compiled before the failure run again."""

import jax
import numpy as np
import pytest
from jax import lax
from jax.sharding import Mesh

import jax_mscclpp as jm
from jax_mscclpp import _compat
from jax_mscclpp.testing import faults
from tests.helpers import P, assert_same, random_array, sharded


def _mesh(cpu_devices, order):
    # A mesh of its own per test (device order differs), so that no other test's communicator is touched.
    return Mesh(np.array(cpu_devices[:8])[order], ("x",))


def _mismatched(mesh):
    """Rank 0 sums, every other rank takes the maximum: a user error a cond on the axis index can make."""

    def run(v):
        return lax.cond(lax.axis_index("x") == 0, lambda a: _compat.make_varying(jm.psum(a, "x"), ("x",)),
                        lambda a: _compat.make_varying(jm.pmax(a, "x"), ("x",)), v)

    return sharded(run, mesh, P("x"), P("x"))


def _healthy(mesh, scale=1.0):
    return sharded(lambda v: jm.psum(v * scale, "x"), mesh, P("x"), P())


def test_mismatch_is_aborted_and_the_next_program_runs(cpu_devices, rng):
    mesh = _mesh(cpu_devices, [7, 1, 2, 3, 4, 5, 6, 0])
    x = random_array(rng, (8 * 4,), "float32")
    before = _healthy(mesh)
    jax.block_until_ready(before(x))
    with pytest.raises(Exception) as failure:
        jax.block_until_ready(_mismatched(mesh)(x))
    message = str(failure.value)
    assert "ABORTED" in message and "mismatched collective calls" in message, message
    assert "jax_mscclpp.reset()" in message and "fresh communicator" in message, message
    # a program lowered now gets a fresh communicator without anything done
    assert_same(_healthy(mesh, 2.0)(x), sharded(lambda v: lax.psum(v * 2.0, "x"), mesh, P("x"), P())(x))
    # one compiled before the failure holds the failed one until reset() lowers it again
    with pytest.raises(Exception, match=r"FAILED_PRECONDITION: .*was destroyed .*jax_mscclpp.reset\(\)"):
        jax.block_until_ready(before(x))
    assert jm.reset() >= 1
    assert_same(before(x), sharded(lambda v: lax.psum(v, "x"), mesh, P("x"), P())(x))


def test_lost_peer_is_deadline_exceeded_and_the_next_program_runs(cpu_devices, rng, fault_hooks):
    mesh = _mesh(cpu_devices, [0, 2, 1, 3, 4, 5, 7, 6])
    x = random_array(rng, (8 * 4,), "float32")
    f = _healthy(mesh)
    jax.block_until_ready(f(x))
    faults.skip_next_calls(jm.Communicator(mesh, "x"), mesh.devices[3])
    with faults.timeout(0.5):
        with pytest.raises(Exception) as failure:
            jax.block_until_ready(f(x))
        message = str(failure.value)
        assert "DEADLINE_EXCEEDED" in message and "timeout after" in message, message
        assert "jax_mscclpp.reset()" in message, message
        with pytest.raises(Exception, match="DEADLINE_EXCEEDED: .*unusable after an earlier failure: .*timeout"):
            jax.block_until_ready(f(x))
    assert jm.Communicator(mesh, "x").alive  # replaced: the failed one is gone
    assert_same(_healthy(mesh, 3.0)(x), sharded(lambda v: lax.psum(v * 3.0, "x"), mesh, P("x"), P())(x))
    jm.reset()
    assert_same(f(x), sharded(lambda v: lax.psum(v, "x"), mesh, P("x"), P())(x))


def test_reset_without_failures(cpu_devices, rng):
    mesh = _mesh(cpu_devices, [1, 0, 3, 2, 5, 4, 7, 6])
    x = random_array(rng, (8 * 2,), "int32")
    f = _healthy(mesh)
    want = f(x)  # still in flight (JAX dispatches asynchronously; x moves to the mesh first): reset() waits for it
    jm.reset()
    assert not jm.Communicator.live()
    assert_same(f(x), want)
