"""The debug log of jax_mscclpp.rewrite: one line per distinct decision of a trace, with its count, named after the
rewritten function, logged when the outermost trace ends."""

import importlib
import logging

import jax
import numpy as np
from jax import lax

import jax_mscclpp as jm
from tests.helpers import P, random_array


def layers(x, w):
    """Three row-parallel products summed by psums of one shape (w, replicated, cast to varying for each), and two
    psums below min_bytes."""
    y = sum(lax.psum(x @ (w * k), "x") for k in (1.0, 2.0, 3.0))
    small = lax.psum(x[:1, :1], "x") + lax.psum(x[1:2, :1], "x")
    return (y * small).sum()


def messages(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "jax_mscclpp.rewrite"]


def test_each_decision_once_with_its_count(mesh8, caplog):
    rng = np.random.default_rng(11)
    x, w = random_array(rng, (16, 32), "float32"), random_array(rng, (32, 32), "float32")
    loss = jax.shard_map(layers, mesh=mesh8, in_specs=(P("x"), P()), out_specs=P())
    with caplog.at_level(logging.DEBUG, logger="jax_mscclpp.rewrite"):
        jax.jit(jm.rewrite(loss, min_bytes=8))(x, w)
    lines = messages(caplog)
    assert len(lines) == len(set(lines)) == 3, lines
    assert all(line.startswith("rewrite(layers): ") for line in lines), lines
    decisions = {line.removeprefix("rewrite(layers): ") for line in lines}
    assert "replaced lax psum over ('x',) on float32[2,32]{V:x} (256 bytes per rank) with jax_mscclpp.psum (3 times)" \
        in decisions, lines
    assert "kept lax psum over ('x',) on float32[1,1]{V:x}: 4 bytes per rank is below min_bytes=8 (2 times)" \
        in decisions, lines
    # w's casts to varying, however many: one line.
    (pvary,) = [d for d in decisions if d.startswith("replaced lax pvary over ('x',) with mscclpp_pvary")]
    assert pvary.endswith(" times)") or pvary.endswith("jax_mscclpp.psum"), pvary


def test_a_rewrite_inside_a_rewrite_logs_in_the_outer_summary(mesh8, caplog):
    def body(x):
        return lax.psum(x, "x") + lax.psum(x * x, "x")

    def step(x):
        return jax.shard_map(jm.rewrite(body), mesh=mesh8, in_specs=P("x"), out_specs=P())(x)

    x = random_array(np.random.default_rng(12), (16, 4), "float32")
    with caplog.at_level(logging.DEBUG, logger="jax_mscclpp.rewrite"):
        jax.jit(jm.rewrite(step))(x)
    assert messages(caplog) == ["rewrite(step): replaced lax psum over ('x',) on float32[2,4]{V:x} (32 bytes per "
                                "rank) with jax_mscclpp.psum (2 times)"]
    assert getattr(importlib.import_module("jax_mscclpp.rewrite")._log_state, "counts", None) is None
