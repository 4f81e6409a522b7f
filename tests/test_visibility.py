"""What a user can see: info() lists registered algorithms, environment values that are not understood are errors,
explain() names each call's algorithm, rewrite logs what it keeps on lax; and auto never emits lax where lax
cannot run (processes sharing one GPU)."""

import logging
import os
import subprocess
import sys
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import Mesh

import jax_mscclpp as jm
from jax_mscclpp import selection
from jax_mscclpp._types import Collective
from jax_mscclpp.dsl import library
from tests.helpers import P, random_array, sharded


def test_info_lists_registered_algorithms():
    jm.register_algorithm(library.allreduce_2pa_ll, name="visible_2pa", min_bytes=16, max_bytes=1 << 20)
    try:
        rows = [r for r in jm.info()["algorithms"] if r["algorithm"] == "visible_2pa"]
        assert {r["platform"] for r in rows} == {"cpu", "gpu"}
        assert all(r["source"] == "registered" and r["collective"] == "all_reduce" and r["min_bytes"] == 16
                   and r["max_bytes"] == 1 << 20 for r in rows)
        assert jm.info()["algorithms"][0]["source"] == "registered"  # consulted first, listed first
    finally:
        jm.unregister_algorithm("visible_2pa")
    assert not [r for r in jm.info()["algorithms"] if r["algorithm"] == "visible_2pa"]


def test_unknown_forced_algorithm_is_an_error(mesh8, monkeypatch, rng):
    # environment/JAX_MSCCLPP_ALGORITHM
    x = random_array(rng, (8 * 4,), "float32")
    monkeypatch.setenv("JAX_MSCCLPP_ALGORITHM", "no_such_algorithm")
    with pytest.raises(ValueError, match="JAX_MSCCLPP_ALGORITHM='no_such_algorithm' is not understood; accepted: .*1pa_ll"):
        sharded(lambda v: jm.psum(v, "x"), mesh8, P("x"), P())(x)
    monkeypatch.setenv("JAX_MSCCLPP_ALGORITHM", "allpairs")  # known to some collectives: the others ignore it
    np.testing.assert_allclose(sharded(lambda v: jm.psum(v, "x"), mesh8, P("x"), P())(x),
                               sharded(lambda v: lax.psum(v, "x"), mesh8, P("x"), P())(x), rtol=1e-5)


@pytest.mark.parametrize("name,value", [("JAX_MSCCLPP_COMMAND_BUFFERS", "2"), ("JAX_MSCCLPP_NVLS", "yes"),
                                        ("JAX_MSCCLPP_STREAM_SLOTS", "0"), ("JAX_MSCCLPP_SCRATCH_BYTES", "1M"),
                                        ("JAX_MSCCLPP_TIMEOUT_S", "soon"), ("JAX_MSCCLPP_NCCL", "yes"),
                                        ("JAX_MSCCLPP_NCCL_RUNTIME", "off"),
                                        ("JAX_MSCCLPP_REAL_NCCL", "lib/libnccl.so.2"),
                                        ("JAX_MSCCLPP_NCCL_BOOTSTRAP_ADDRESS", "host-a"),
                                        ("JAX_MSCCLPP_STREAM_CHUNK", "-4")])
def test_values_not_understood_are_errors_at_import(name, value):
    # environment/other_values
    env = dict(os.environ, JAX_PLATFORMS="cpu", **{name: value})
    out = subprocess.run([sys.executable, "-c", "import jax_mscclpp"], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode != 0
    assert f"ValueError: jax_mscclpp: {name}={value!r} is not understood; accepted:" in out.stderr, out.stderr[-2000:]


def test_explain_names_every_call(mesh8):
    def body(v):
        return (jm.psum(v, "x"), jm.all_gather(v[:4], "x"), jm.psum(v, "x", algorithm="lax"),
                jm.psum(1, "x"), jm.pmax(v.astype(jnp.int32), "x", algorithm="2pa_ll"))

    f = jax.shard_map(body, mesh=mesh8, in_specs=P("x"), out_specs=(P(), P("x"), P(), P(), P()))
    calls = jm.explain(f, jax.ShapeDtypeStruct((8 * 1000,), jnp.float32))
    assert [(c.collective, c.algorithm) for c in calls] == [
        ("psum", "lax"),  # the constant: lax's static x * axis size, decided at trace time
        ("all_reduce(sum)", "1pa_ll" if 4000 <= 16 << 10 else "2pa_hb"),
        ("all_gather", "allpairs"),
        ("all_reduce(sum)", "lax"),
        ("all_reduce(max)", "2pa_ll"),
    ]
    assert calls[1].bytes == 4000 and calls[1].dtype == "float32" and calls[1].axes == ("x",)
    assert "constant" in calls[0].reason
    assert "all_gather over ('x',) 16 B float32: allpairs" in [str(c) for c in calls]
    # the same again: nothing cached hides a call
    assert len(jm.explain(f, jnp.ones(8 * 1000))) == 5


def test_explain_names_lax_lowerings_with_their_reason(cpu_devices):
    mesh = Mesh(np.array(cpu_devices[:8]).reshape(2, 4), ("a", "b"))
    f = jax.vmap(jax.shard_map(lambda v: jm.psum(v, "b"), mesh=mesh, in_specs=P("b"), out_specs=P(),
                               axis_names={"b"}))
    (call,) = jm.explain(f, jnp.ones((2, 8)))
    assert call.algorithm == "lax" and "not every mesh axis" in call.reason


def test_explain_lists_the_calls_of_a_world_of_one(cpu_devices):
    """A one-device mesh (and a size-1 axis of a larger one): every call is listed, exchanging nothing."""
    def body(v):
        return (jm.psum(v, "x"), jm.all_gather(v, "x"), jm.psum_scatter(v, "x", tiled=True),
                jm.all_to_all(v, "x", 0, 0, tiled=True), jm.ppermute(v, "x", [(0, 0)]))

    for mesh, spec, summed in ((Mesh(np.array(cpu_devices[:1]), ("x",)), P("x"), P()),
                               (Mesh(np.array(cpu_devices[:8]).reshape(8, 1), ("d", "x")), P(("d", "x")), P("d"))):
        def program(v):
            return jax.shard_map(body, mesh=mesh, in_specs=spec, out_specs=(summed, spec, spec, spec, spec))(v)

        calls = jm.explain(program, jnp.ones(mesh.devices.size * 4))
        assert [c.collective for c in calls] == ["psum", "all_gather", "psum_scatter", "all_to_all", "ppermute"]
        assert all(c.axes == ("x",) and c.algorithm == "none" and c.reason == "axis size 1: nothing to exchange"
                   for c in calls), calls
        assert "psum over ('x',): none (axis size 1: nothing to exchange)" in [str(c) for c in calls]


def test_explain_lists_calls_handed_to_lax_by_a_partially_manual_shard_map_every_time(cpu_devices):
    mesh = Mesh(np.array(cpu_devices[:8]).reshape(2, 4), ("a", "b"))
    f = jax.jit(jax.shard_map(lambda v: jm.psum(v, "b"), mesh=mesh, in_specs=P("b"), out_specs=P(),
                              axis_names={"b"}))
    f(jnp.ones(8))  # traced and cached before explain
    for _ in range(2):
        (call,) = jm.explain(f, jnp.ones(8))
        assert (call.collective, call.axes, call.algorithm) == ("psum", ("b",), "lax")
        assert "manual over ['b'] only" in call.reason


def test_explain_lists_the_programs_own_lax_collectives(mesh8):
    """lax's collectives written in the program, and the psums JAX inserts for a replicated value's gradient, are
    listed beside ours; rewrite leaves none of them."""
    def body(v, w):
        loss = jax.grad(lambda w: jnp.sum(jm.psum(v * w, "x") ** 2))(w)
        return lax.psum(v, "x"), lax.all_gather(v, "x", tiled=True), loss

    f = jax.shard_map(body, mesh=mesh8, in_specs=(P("x"), P()), out_specs=(P(), P("x"), P()))
    args = (jnp.ones(8 * 4), jnp.ones(4))
    calls = jm.explain(f, *args)
    theirs = [c for c in calls if c.collective.startswith("lax.")]
    assert [(c.collective, c.bytes, c.dtype) for c in theirs] == [
        ("lax.psum", 16, "float32"), ("lax.psum", 16, "float32"), ("lax.all_gather", 16, "float32")]
    assert all(c.algorithm == "lax" and "not a jax_mscclpp call" in c.reason for c in theirs)
    assert [c.collective for c in calls if not c.collective.startswith("lax.")] == ["all_reduce(sum)"]
    rewritten = jm.explain(jm.rewrite(f), *args)
    assert rewritten and not [c for c in rewritten if c.collective.startswith("lax.")], rewritten


def test_explain_says_why_a_large_pytree_sum_runs_lax(mesh8):
    big = jax.ShapeDtypeStruct((8 * selection.GRADIENT_TREE_BYTES // 8,), jnp.float32)  # half the bytes each
    tree = {"a": big, "b": big, "small": jax.ShapeDtypeStruct((8 * 4,), jnp.float32)}
    calls = jm.explain(sharded(lambda t: jm.psum(t, "x"), mesh8, P("x"), P()), tree)
    large = [c for c in calls if c.bytes == selection.GRADIENT_TREE_BYTES // 2]
    assert len(large) == 2 and all(c.algorithm == "lax" and c.reason == selection.GRADIENT_TREE_REASON
                                   for c in large), calls
    (small,) = [c for c in calls if c.bytes == 16]
    assert small.algorithm != "lax" and small.reason.startswith("the selection table")


def test_explain_gives_every_call_its_reason(cpu_devices):
    mesh = Mesh(np.array(cpu_devices[:8]).reshape(2, 4), ("a", "b"))

    def body(v):
        return (jm.psum(v, "b"), jm.psum(v, "b", algorithm="2pa_ll"), jm.psum(v, "b", algorithm="lax"),
                jm.psum(v[:2], ("a", "b"), algorithm="2ph"), jm.psum(2, "b"), lax.pmax(v, "b"),
                jm.all_gather(v, ("a", "b")), jm.pmean(v, "a"), jm.psum(v, ()),
                jm.fused.all_reduce_residual(v, v, "b"), jm.ppermute(v, "b", [(0, 1), (1, 0)]))

    f = jax.shard_map(body, mesh=mesh, in_specs=P(("a", "b")), out_specs=(
        P("a"), P("a"), P("a"), P(), P(), P("a"), P(("a", "b")), P("b"), P(("a", "b")), P(("a", "b")),
        P(("a", "b"))))
    calls = jm.explain(f, jnp.ones(8 * 4))
    # The eleven calls, 2PH's pieces (our reduce_scatter and all_gather over the fast axis) too.
    assert len(calls) == 13, calls
    assert all(isinstance(c.reason, str) and c.reason for c in calls), calls
    reasons = {c.reason for c in calls}
    assert {"algorithm='2pa_ll' asked for", "algorithm='lax' asked for"} <= reasons
    assert any("constant" in r for r in reasons) and any("not a jax_mscclpp call" in r for r in reasons)


def test_rewrite_logs_what_it_keeps(mesh8, caplog):
    def body(v):
        grouped = lax.psum(v, "x", axis_index_groups=[[0, 1, 2, 3], [4, 5, 6, 7]])
        return grouped + lax.psum(v.astype(jnp.float8_e4m3fn), "x").astype(v.dtype)

    f = jax.pmap(jm.rewrite(body), axis_name="x")  # lax takes groups under pmap, not under shard_map
    with caplog.at_level(logging.DEBUG, logger="jax_mscclpp.rewrite"):
        out = f(jnp.ones((8, 2)))
    assert "axis_index_groups" in caplog.text
    np.testing.assert_allclose(out, jax.pmap(body, axis_name="x")(jnp.ones((8, 2))))
    assert "float8_e4m3fn is not supported" in caplog.text


class _Communicator(SimpleNamespace):
    fallback_reason = None
    port_channels = False
    scratch_bytes = 64 << 20


@pytest.mark.parametrize("nbytes", [2 << 20, 1 << 30])
def test_auto_emits_no_lax_where_processes_share_a_gpu(monkeypatch, nbytes):
    def decide(algorithm, shares):
        comm = _Communicator(shares_gpus=shares)
        return selection.decide(Collective.ALL_REDUCE, "gpu", nbytes=nbytes, world=2, block_count=nbytes // 8,
                                itemsize=4, algorithm=algorithm, communicator=lambda: comm)

    monkeypatch.setattr(selection, "_tuned_rules", lambda platform: ())
    monkeypatch.delenv("JAX_MSCCLPP_ALGORITHM", raising=False)
    if nbytes == 2 << 20:  # the two-GPU table says lax for 1-4 MiB
        assert decide(None, shares=False).kind == "lax"
        assert decide(None, shares=True) == selection.Decision("native", "1pa_hb")
    # the gradient-tree rule's lax, likewise
    assert decide(selection.GRADIENT_TREE_LAX, shares=False).kind == "lax"
    assert decide(selection.GRADIENT_TREE_LAX, shares=True).kind == "native"
    # lax asked for by name stays lax; an NCCL-API library of ours would make lax runnable again
    assert decide("lax", shares=True).kind == "lax"
    monkeypatch.setattr(selection, "nccl_api_active", lambda: True)
    assert decide(selection.GRADIENT_TREE_LAX, shares=True).kind == "lax"


@pytest.mark.parametrize("world,nbytes,chosen", [
    (2, 256 << 10, "1pa_ll"), (2, 1 << 20, "1pa_hb"), (2, 4 << 20, "1pa_hb"), (2, 16 << 20, "2pa_hb"),
    (4, 256 << 10, "1pa_ll"), (4, 1 << 20, "1pa_hb"), (4, 2 << 20, "1pa_hb"), (4, 4 << 20, "2pa_hb"),
    (8, 64 << 10, "1pa_ll"), (8, 256 << 10, "2pa_ll"), (8, 512 << 10, "1pa_hb"), (8, 1 << 20, "2pa_hb"),
    (3, 1 << 30, "2pa_hb")])
def test_where_ranks_share_a_gpu_all_reduce_runs_the_shared_gpu_rows(monkeypatch, world, nbytes, chosen):
    """selection.def's shared-GPU rows decide between processes that share a GPU, before the rules measured over
    NVLink (two ranks' 1 MiB runs one-phase HB there, not the NVLink rules' one-phase LL): one LL hop while a
    rank's n-fold packet reads are cheap, two-phase LL on 8 ranks at 256 KiB, the one-phase streaming kernel while
    its n-fold reads cost less than the two-phase kernel's second hop, then the two-phase one."""
    monkeypatch.setattr(selection, "_tuned_rules", lambda platform: ())
    comm = _Communicator(shares_gpus=True)
    def decide():
        return selection.decide(Collective.ALL_REDUCE, "gpu", nbytes=nbytes, world=world, block_count=nbytes // 4,
                                itemsize=4, algorithm=None, communicator=lambda: comm)

    assert decide() == selection.Decision("native", chosen)
    # Where our NCCL-API library makes lax runnable, the JAX path runs what the library would run on those ranks.
    monkeypatch.setattr(selection, "nccl_api_active", lambda: True)
    assert decide() == selection.Decision("native", chosen)


def test_processes_share_gpus_on_one_process():
    from jax_mscclpp.communicator import processes_share_gpus

    assert not processes_share_gpus(jax.devices())


def test_processes_share_gpus_across_processes():
    """Two processes on one host, each with devices of local ordinals 0 and 1: devices of one ordinal in both
    processes share (as processes on one GPU do), other ordinals do not, however the other process's devices look."""
    import json
    import socket
    from pathlib import Path

    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=2")
    root = Path(__file__).resolve().parents[1]
    procs = [subprocess.Popen([sys.executable, "-m", "tests._shared_gpus_worker", str(i), str(port)], cwd=root,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in (0, 1)]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
        result = json.loads(out.strip().splitlines()[-1])
        assert result == {"remote_ids": result["remote_ids"], "all": True, "same_ordinal": True,
                          "other_ordinals": False, "one_process": False}, result
