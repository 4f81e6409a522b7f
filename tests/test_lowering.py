"""Our collectives reach XLA as custom calls to our FFI targets; info() describes the installation."""

import jax
import pytest

import jax_mscclpp as jm
from jax_mscclpp import primitives, selection, settings
from tests.helpers import P, random_array


@pytest.mark.parametrize("fn,target", [
    (lambda v: jm.psum(v, "x"), "jax_mscclpp_all_reduce"),
    (lambda v: jm.all_gather(v, "x", tiled=True), "jax_mscclpp_all_gather"),
    (lambda v: jm.psum_scatter(v, "x", tiled=True), "jax_mscclpp_reduce_scatter"),
    (lambda v: jm.all_to_all(v, "x", 0, 0, tiled=True), "jax_mscclpp_all_to_all"),
])
def test_hlo_holds_our_custom_call(mesh8, rng, fn, target):
    x = random_array(rng, (8 * 8,), "float32")
    f = jax.jit(jax.shard_map(fn, mesh=mesh8, in_specs=P("x"), out_specs=P("x"), check_vma=False))
    text = f.lower(x).as_text()
    assert f"custom_call @{target}(" in text
    assert "all-reduce" not in text and "stablehlo.all_reduce" not in text
    compiled = f.lower(x).compile().as_text()
    assert target in compiled


def test_algorithm_lax_emits_the_lax_collective(mesh8, rng):
    x = random_array(rng, (8 * 8,), "float32")
    f = jax.jit(jax.shard_map(lambda v: jm.psum(v, "x", algorithm="lax"), mesh=mesh8, in_specs=P("x"),
                              out_specs=P()))
    text = f.lower(x).as_text()
    assert "jax_mscclpp" not in text and "all_reduce" in text


def test_info_describes_the_installation(mesh8):
    jm.Communicator(mesh8, "x")
    info = jm.info()
    assert "cpu" in info["platforms"]
    assert set(info["targets"]["cpu"]) == {
        "jax_mscclpp_all_reduce", "jax_mscclpp_all_gather", "jax_mscclpp_reduce_scatter", "jax_mscclpp_all_to_all",
        "jax_mscclpp_permute"}
    assert info["timeout_s"] > 0
    assert any(r["collective"] == "all_reduce" and r["algorithm"] == "1pa_ll" for r in info["algorithms"])
    assert info["communicators"]


def test_command_buffer_choice(monkeypatch):
    # GPU calls up to GRAPH_MIN_BYTES per rank stay out of XLA's command buffers unless the variable says otherwise.
    monkeypatch.delenv(settings.ENV_COMMAND_BUFFERS, raising=False)
    small, large = selection.GRAPH_MIN_BYTES, selection.GRAPH_MIN_BYTES + 1
    assert not selection.in_command_buffers(small) and selection.in_command_buffers(large)
    assert primitives.gpu_target("jax_mscclpp_all_reduce", small) == "jax_mscclpp_all_reduce_outside_graphs"
    assert primitives.gpu_target("jax_mscclpp_all_reduce", large) == "jax_mscclpp_all_reduce"
    # On a communicator whose ranks are of several processes, large calls stay out too (they may run in place on
    # XLA's buffers only outside a capture), unless the variable says to record them.
    assert not selection.in_command_buffers(1 << 30, between_processes=True)
    assert (primitives.gpu_target("jax_mscclpp_all_reduce", 1 << 30, between_processes=True)
            == "jax_mscclpp_all_reduce_outside_graphs")
    monkeypatch.setenv(settings.ENV_COMMAND_BUFFERS, "1")
    assert selection.in_command_buffers(1)
    assert selection.in_command_buffers(1 << 30, between_processes=True)
    monkeypatch.setenv(settings.ENV_COMMAND_BUFFERS, "0")
    assert not selection.in_command_buffers(1 << 30)
    monkeypatch.setenv(settings.ENV_COMMAND_BUFFERS, "yes")
    with pytest.raises(ValueError, match="COMMAND_BUFFERS='yes' is not understood; accepted: 0, 1 or unset"):
        selection.in_command_buffers(1)
    # Where failing kernels stop, no call is recorded: a replayed call skips the handler that refuses calls after a
    # failure.
    monkeypatch.setenv(settings.ENV_COMMAND_BUFFERS, "1")
    monkeypatch.setenv("JAX_MSCCLPP_TRAP_ON_FAILURE", "0")
    assert not selection.in_command_buffers(1 << 30)
    assert primitives.gpu_target("jax_mscclpp_all_reduce", 1 << 30) == "jax_mscclpp_all_reduce_outside_graphs"
