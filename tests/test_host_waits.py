"""The host backend's waits block: ranks waiting for a late peer (one rank of 8 held back 1 s by a host callback)
leave the CPU alone, in the built-in algorithms and in a DSL plan (the executor's waits), and the call's result is
still right. Generous bounds: ranks that spun or yielded in a loop would use both cores of a 2-core machine
(process CPU time about twice the wall time), ranks that napped and polled would wake tens of thousands of times
a second."""

import resource
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import jax_mscclpp as jm
from jax_mscclpp.dsl import library
from tests.helpers import P, random_array, sharded

DELAY_S = 1.0
LATE_RANK = 3
PLAN_NAME = "host_waits_allreduce_2pa_hb"


@pytest.fixture(scope="module")
def plan_registered():
    jm.register_algorithm(library.allreduce_2pa_hb, name=PLAN_NAME, min_bytes=1 << 62)
    yield PLAN_NAME
    jm.unregister_algorithm(PLAN_NAME)


def _hold_back(delay):
    """Per device: returns its block once the rank's host callback returned, `delay` seconds later on rank
    LATE_RANK, at once elsewhere."""

    def host(block, rank):
        if int(rank) == LATE_RANK:
            time.sleep(delay)
        return np.asarray(block)

    def run(block):
        return jax.pure_callback(host, jax.ShapeDtypeStruct(block.shape, block.dtype), block, lax.axis_index("x"))

    return run


@pytest.mark.parametrize("algorithm", ["1pa_ll", "2pa_hb", "plan"])
def test_ranks_waiting_for_a_late_peer_block(mesh8, rng, plan_registered, algorithm):
    name = plan_registered if algorithm == "plan" else algorithm
    x = random_array(rng, (8 * 256,), "float32")

    def body(delay):
        return lambda v: jm.psum(_hold_back(delay)(v), "x", algorithm=name)

    # The delay is read when the program is traced: one program held back, one not (run first: the communicator's
    # setup), both compiled before the clock starts.
    held, prompt = (sharded(body(d), mesh8, P("x"), P(), check_vma=False) for d in (DELAY_S, 0.0))
    expected = jax.block_until_ready(sharded(lambda v: lax.psum(v, "x"), mesh8, P("x"), P())(x))
    jax.block_until_ready(prompt(x))
    held = held.lower(x).compile()

    usage, cpu, wall = resource.getrusage(resource.RUSAGE_SELF), time.process_time(), time.perf_counter()
    out = jax.block_until_ready(held(x))
    wall = time.perf_counter() - wall
    cpu = time.process_time() - cpu
    after = resource.getrusage(resource.RUSAGE_SELF)
    sleeps = after.ru_nvcsw - usage.ru_nvcsw  # voluntary context switches: a thread blocked or slept

    np.testing.assert_allclose(np.asarray(out), np.asarray(expected), rtol=1e-5, atol=1e-4)
    assert wall >= DELAY_S, wall
    assert cpu < 0.5 * wall, f"{cpu:.2f} s of CPU in {wall:.2f} s while 7 ranks waited for rank {LATE_RANK}"
    # A blocked wait wakes when its peers rang and otherwise a few hundred times a second to check for failures
    # elsewhere (7 waiting ranks: about 3500 a second; ranks polling every 200 us would make about 20000).
    assert sleeps < 10000 * wall, f"{sleeps} voluntary context switches in {wall:.2f} s"
