"""load_plan: MSCCL-IR XML and MSCCL++ JSON plans (written here by the generators of msccl_ir_texts.py and
mscclpp_json_texts.py, in the forms those tools write) load as verified plans that compute their collective
(numpy, through the simulator, on random data and counts that leave chunks short or empty) and run as
registered algorithms against lax; what our executors cannot run is refused, naming element, attribute and
reason."""

import json

import numpy as np
import pytest
from jax import lax

import jax_mscclpp as jm
from jax_mscclpp.dsl import library, load_plan, plan_to_json
from jax_mscclpp.dsl.errors import VerificationError
from jax_mscclpp.dsl.imports import msccl_ir, mscclpp_json
from jax_mscclpp.dsl.imports.errors import PlanImportError
from jax_mscclpp.dsl.simulate import run_plan
from jax_mscclpp.dsl.thread_block_merge import merge_thread_blocks
from tests.dsl import msccl_ir_texts as xml
from tests.dsl import msccl_programs, mscclpp_channel_programs
from tests.dsl import mscclpp_json_texts as js
from tests.dsl.msccl_ir_texts import XmlWriter
from tests.helpers import P, compare_with_lax, random_array, sharded
from tests.test_plans import registered

REDUCE = {"sum": np.add, "max": np.maximum}


def expected(collective: str, inputs: list, op: str) -> list:
    n = len(inputs)
    if collective == "all_reduce":
        return [REDUCE[op].reduce(inputs)] * n
    if collective == "all_gather":
        return [np.concatenate(inputs)] * n
    if collective == "reduce_scatter":
        return np.split(REDUCE[op].reduce(inputs), n)
    return [np.concatenate([np.split(inputs[b], n)[r] for b in range(n)]) for r in range(n)]


def check_with_numpy(plan: dict, rng, op: str = "sum") -> None:
    n, blocks = plan["world_size"], plan["buffers"]["input"]["blocks"]
    per_block = plan["buffers"]["input"]["chunks_per_block"]
    # One element; counts that leave the tail chunks of a block short; and empty.
    for block_count in (1, 3 * per_block - 1, 2 * per_block + 1):
        inputs = [rng.standard_normal(blocks * block_count) for _ in range(n)]
        outputs = run_plan(plan, inputs, op)
        for rank, (ours, want) in enumerate(zip(outputs, expected(plan["collective"], inputs, op))):
            np.testing.assert_allclose(ours, want, rtol=1e-12, err_msg=f"rank {rank}, {block_count} per block")


PLANS = {
    "xml_ring_allreduce_simple": lambda n: xml.ring_allreduce(n, "Simple"),
    "xml_ring_allreduce_ll_2_instances": lambda n: xml.ring_allreduce(n, "LL", instances=2),
    "xml_ring_allreduce_ll128_in_place": lambda n: xml.ring_allreduce(n, "LL128", inplace=True),
    "xml_allpairs_allreduce_simple": lambda n: xml.allpairs_allreduce(n, "Simple"),
    "xml_allpairs_allreduce_ll": lambda n: xml.allpairs_allreduce(n, "LL"),
    "xml_allpairs_allgather_simple": lambda n: xml.allpairs_allgather(n, "Simple"),
    "xml_ring_allgather_ll_2_instances": lambda n: xml.ring_allgather(n, "LL", instances=2),
    "xml_allpairs_reducescatter_simple": lambda n: xml.allpairs_reducescatter(n, "Simple"),
    "xml_ring_reducescatter_ll": lambda n: xml.ring_reducescatter(n, "LL"),
    "xml_allpairs_alltoall_simple": lambda n: xml.allpairs_alltoall(n, "Simple"),
    "json_allpairs_allreduce_packets": lambda n: js.allpairs_allreduce_packets(n),
    "json_allpairs_allreduce_packets_2_instances": lambda n: js.allpairs_allreduce_packets(n, instances=2),
    "json_allpairs_allreduce_simple_2_instances": lambda n: js.allpairs_allreduce_simple(n, instances=2),
    "json_allpairs_allreduce_simple_in_place": lambda n: js.allpairs_allreduce_simple(n, inplace=True),
    "json_allgather_port": lambda n: js.allgather_port(n),
    "json_allpairs_reducescatter_packets": lambda n: js.allpairs_reducescatter_packets(n),
    "json_allpairs_alltoall": lambda n: js.allpairs_alltoall(n),
}


@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("name", sorted(PLANS))
def test_loaded_plans_compute_their_collective(rng, name, n):
    plan = load_plan(PLANS[name](n))
    assert plan["world_size"] == n
    check_with_numpy(plan, rng, "max" if n == 3 else "sum")


# Out-of-place plans whose steps write their input: world size -> text.
WRITE_INPUT = {
    "xml_allpairs_reducescatter_simple": lambda n: xml.allpairs_reducescatter(n, "Simple", into_input=True),
    "xml_allpairs_reducescatter_ll": lambda n: xml.allpairs_reducescatter(n, "LL", into_input=True),
    "json_allpairs_reducescatter_simple": lambda n: js.allpairs_reducescatter_into_input(n, "Simple"),
    "json_allpairs_reducescatter_packets": lambda n: js.allpairs_reducescatter_into_input(n, "LL"),
    "json_allpairs_allreduce_packets_2_instances": lambda n: js.allpairs_allreduce_packets(n, 2, into_input=True),
}


def translated(text: str) -> dict:
    """The plan a foreign text translates to, before ``load_plan`` merges its thread blocks."""
    if text.lstrip().startswith("<"):
        return msccl_ir.from_xml(text)
    return mscclpp_json.from_json(json.loads(text))


def test_load_plan_merges_the_thread_blocks_that_only_order_each_other(rng):
    """MSCCL-IR's all-pairs all-reduce gives a thread block each peer and one that reduces, joined by self
    channels: loaded, each rank runs one thread block, no self channel, and computes the same."""
    text = xml.allpairs_allreduce(3, "Simple")
    before, plan = translated(text), load_plan(text)
    assert plan == merge_thread_blocks(before)
    assert all(len(rank["threadblocks"]) > 1 for rank in before["ranks"])
    assert all(len(rank["threadblocks"]) == 1 for rank in plan["ranks"])
    assert not any(c["peer"] == r for r, rank in enumerate(plan["ranks"]) for c in rank["channels"])
    check_with_numpy(plan, rng)


def foreign_thread_blocks(text: str) -> list[int]:
    """Thread blocks per gpu of an MSCCL-IR or MSCCL++ JSON text."""
    if text.lstrip().startswith("<"):
        return [text.split("<gpu ")[g + 1].count("<tb ") for g in range(text.count("<gpu "))]
    return [len(gpu["threadblocks"]) for gpu in json.loads(text)["gpus"]]


@pytest.mark.parametrize("name", sorted(WRITE_INPUT))
def test_plans_that_write_their_input_read_it_where_it_is_unchanged(rng, name):
    """The steps that write the input write a private copy in scratch; the reads that would see the copy before
    any step wrote it read the input itself, so no prologue copies the input and nothing waits for one: each rank
    has the foreign plan's thread blocks (before they merge), nothing writes the input (the verifier), and the
    plan computes its collective."""
    for n in range(2, 6):
        text = WRITE_INPUT[name](n)
        plan = translated(text)
        assert [len(ranked["threadblocks"]) for ranked in plan["ranks"]] == foreign_thread_blocks(text)
        for ranked in plan["ranks"]:
            assert "prologue" not in json.dumps(ranked)
            assert '"input"' in json.dumps(ranked)
        check_with_numpy(plan, rng, "max" if n == 3 else "sum")


def test_a_read_of_both_copied_and_written_input_chunks_keeps_the_prologue(rng):
    """A reference whose chunks are partly still the input and partly written by a step cannot read the input:
    such a plan keeps its prologue (its copy of the input, and every thread block waiting for it), and computes
    its collective."""
    for n in (2, 3):
        text = xml.mixed_input_reads(n)
        plan = translated(text)
        input_chunks = plan["buffers"]["input"]["blocks"] * plan["buffers"]["input"]["chunks_per_block"]
        for ranked, foreign in zip(plan["ranks"], foreign_thread_blocks(text)):
            assert len(ranked["threadblocks"]) == foreign + 1
            copy, *signals = ranked["threadblocks"][-1]["ops"]
            assert copy["op"] == "copy" and copy["src"] == {"buffer": "input", "index": 0, "count": input_chunks}
            assert [op["op"] for op in signals] == ["signal"] * foreign
            assert all(tb["ops"][0]["op"] == "wait" for tb in ranked["threadblocks"][:-1])
        check_with_numpy(plan, rng)


def test_plans_that_do_not_write_their_input_read_it_in_place():
    for text in (xml.allpairs_reducescatter(3), js.allpairs_reducescatter_packets(3), xml.ring_allreduce(3)):
        plan = translated(text)
        assert [len(ranked["threadblocks"]) for ranked in plan["ranks"]] == foreign_thread_blocks(text)
        assert all('"input"' in json.dumps(ranked) for ranked in plan["ranks"])


def test_protocols_and_channels_map_as_documented():
    """Simple travels as put + signal / wait on HB memory channels, LL and LL128 as packets on LL ones; MSCCL-IR
    dependencies become self channels; MSCCL++ port channels stay port channels."""
    def kinds(plan):
        return {(c["type"], c["protocol"], c.get("peer") == r) for r, rank in enumerate(plan["ranks"])
                for c in rank["channels"]}

    def ops(plan):
        return {op["op"] for rank in plan["ranks"] for tb in rank["threadblocks"] for op in tb["ops"]}

    simple = translated(xml.allpairs_allreduce(3, "Simple"))
    assert kinds(simple) == {("memory", "HB", False), ("memory", "HB", True)}
    assert not ops(simple) & {"put_packets", "read_packets", "reduce_packets"}
    for proto in ("LL", "LL128"):
        packets = load_plan(xml.ring_allreduce(3, proto))
        assert kinds(packets) == {("memory", "LL", False)}
        assert "reduce_packets" in ops(packets) and not ops(packets) & {"put", "put_with_signal", "wait"}
    assert kinds(load_plan(js.allgather_port(3))) == {("port", "HB", False)}
    ring = load_plan(xml.ring_allreduce(4, "Simple", instances=3))
    assert all(len(rank["threadblocks"]) == 3 for rank in ring["ranks"])  # one per instance and channel
    assert ring["buffers"]["input"]["chunks_per_block"] == 12


@pytest.mark.parametrize("source", [
    "xml_ring_simple_2_instances", "xml_allpairs_ll", "json_allpairs_packets", "json_allpairs_simple_in_place"])
def test_loaded_all_reduce_matches_lax(mesh8, rng, source):
    text = {"xml_ring_simple_2_instances": lambda: xml.ring_allreduce(8, "Simple", instances=2),
            "xml_allpairs_ll": lambda: xml.allpairs_allreduce(8, "LL"),
            "json_allpairs_packets": lambda: js.allpairs_allreduce_packets(8),
            "json_allpairs_simple_in_place": lambda: js.allpairs_allreduce_simple(8, inplace=True)}[source]()
    with registered(load_plan(text), "loaded_" + source) as name:
        for count in (1, 37, 1000):
            x = random_array(rng, (8 * count,), "float32")
            compare_with_lax(lambda v: jm.psum(v, "x", algorithm=name), lambda v: lax.psum(v, "x"), mesh8, (x,),
                             P("x"), P())


@pytest.mark.parametrize("source", ["xml_allpairs_simple", "json_allpairs_packets"])
def test_loaded_reduce_scatter_that_writes_its_input_matches_lax(mesh8, rng, source):
    text = {"xml_allpairs_simple": lambda: xml.allpairs_reducescatter(8, "Simple", into_input=True),
            "json_allpairs_packets": lambda: js.allpairs_reducescatter_into_input(8, "LL")}[source]()
    with registered(load_plan(text), "loaded_rs_" + source) as name:
        for count in (1, 37):
            x = random_array(rng, (8 * 8 * count,), "float32")
            compare_with_lax(lambda v: jm.psum_scatter(v, "x", tiled=True, algorithm=name),
                             lambda v: lax.psum_scatter(v, "x", tiled=True), mesh8, (x,), P("x"), P("x"))


@pytest.mark.parametrize("source", ["xml_ring_ll_2_instances", "json_port"])
def test_loaded_all_gather_matches_lax(mesh8, rng, source):
    text = xml.ring_allgather(8, "LL", instances=2) if source == "xml_ring_ll_2_instances" else js.allgather_port(8)
    with registered(load_plan(text), "loaded_ag_" + source) as name:
        for count in (1, 37):
            x = random_array(rng, (8 * count,), "float32")
            compare_with_lax(lambda v: jm.all_gather(v, "x", algorithm=name), lambda v: lax.all_gather(v, "x"),
                             mesh8, (x,), P("x"), P("x"))


@pytest.mark.parametrize("protocol", ["Simple", "LL"])
def test_a_custom_collective_loads_with_the_permutation_it_implements(mesh8, rng, protocol):
    """MSCCLang's AllToNext written as MSCCL-IR (coll="custom", which states no postcondition) loads as a plan of
    the permutation the caller names, verified against those pairs, and runs ppermute like lax; without the pairs,
    with pairs it does not implement, or with pairs for a plan that is no custom collective, it is refused."""
    program = msccl_programs.alltonext(8, protocol)
    text = program.generate_xml()
    pairs = [(r, r + 1) for r in range(7)]
    plan = load_plan(text, permutation=pairs)
    assert plan["collective"] == "permute" and plan["permutation"] == [list(pair) for pair in pairs]
    with registered(plan, "loaded_alltonext_" + protocol) as name:
        for count in (2, 74):
            x = random_array(rng, (8 * count,), "float32")
            compare_with_lax(lambda v: jm.ppermute(v, "x", pairs, algorithm=name),
                             lambda v: lax.ppermute(v, "x", pairs), mesh8, (x,), P("x"), P("x"))
    refused(text, "<algo>", "coll", "load it with load_plan(..., permutation=[(source, destination), ...])")
    with pytest.raises(VerificationError, match=r"permute leaves rank 0 output\[0\] = nothing; expected input\[0\] of ranks \[1\]"):
        load_plan(text, permutation=[(r + 1, r) for r in range(7)])
    with pytest.raises(PlanImportError, match="is 'allreduce': permutation= names the pairs of a custom collective"):
        load_plan(xml.ring_allreduce(8, "LL"), permutation=pairs)
    with pytest.raises(PlanImportError, match="a JSON plan states its own collective"):
        load_plan(js.allpairs_allreduce_packets(8), permutation=pairs)
    with pytest.raises(PlanImportError, match="not \\(source, destination\\) pairs of ranks"):
        load_plan(text, permutation=[1, 2])


def test_a_barrier_across_thread_blocks_orders_them(mesh8, rng):
    """MSCCL++'s ``barrier`` (barrier_id, num_threadblocks) joins the thread blocks that name it: the copies after
    it read what the other thread block waited for, and the plan matches lax; without it the same copies race
    (the verifier names them); a barrier whose members disagree on their number or on how often they meet is
    refused."""
    with registered(load_plan(js.allgather_barrier(8)), "loaded_ag_barrier") as name:
        for count in (1, 37):
            x = random_array(rng, (8 * count,), "float32")
            compare_with_lax(lambda v: jm.all_gather(v, "x", algorithm=name), lambda v: lax.all_gather(v, "x"),
                             mesh8, (x,), P("x"), P("x"))
    with pytest.raises(VerificationError, match="race"):
        load_plan(js.allgather_barrier(3, barrier=False))
    plan = json.loads(js.allgather_barrier(3))
    barrier = plan["gpus"][1]["threadblocks"][1]["ops"][1]
    assert barrier["name"] == "barrier"
    barrier["num_threadblocks"] = 3
    refused(json.dumps(plan), "gpu 1, threadblock", "num_threadblocks", "names barrier 0 with")
    plan = json.loads(js.allgather_barrier(3))
    plan["gpus"][1]["threadblocks"][1]["ops"].append(dict(barrier, num_threadblocks=2))
    refused(json.dumps(plan), "gpu 1, threadblock", "barrier_id", "thread block 0 1 times, thread block 1 2 times")
    plan = json.loads(js.allgather_barrier(3))
    plan["gpus"][1]["threadblocks"][0]["ops"].pop()
    refused(json.dumps(plan), "gpu 1, threadblock 1", "num_threadblocks", "but thread blocks [1] of gpu 1")


def test_semaphores_between_two_thread_blocks_order_them():
    """MSCCL++'s device semaphores (``sem_release`` / ``sem_acquire``, the gpu's ``semaphores``) as to_json() writes
    them load back: the k-th acquire waits for the k-th release. One starting above 0, one that a second thread block
    acquires too, and an id the gpu does not have are refused, naming the op."""
    text = mscclpp_channel_programs.allgather_semaphore(3).to_json()
    load_plan(text)
    plan = json.loads(text)
    plan["gpus"][0]["semaphores"][0]["init_value"] = 1
    refused(json.dumps(plan), "gpu 0, threadblock 0", "semaphore_ids", "starts at 1: ours start each call at 0")
    plan = json.loads(text)
    plan["gpus"][1]["threadblocks"][0]["ops"].insert(0, {"name": "sem_acquire", "semaphore_ids": [0]})
    refused(json.dumps(plan), "gpu 1, threadblock 0", "semaphore_ids",
            "released by thread blocks [0] and acquired by [0, 1]")
    plan = json.loads(text)
    plan["gpus"][2]["threadblocks"][1]["ops"][1]["semaphore_ids"] = [4]
    refused(json.dumps(plan), "gpu 2, threadblock 1", "semaphore_ids", "gpu 2 has no semaphore 4")


def test_a_size_range_falls_back_outside_it(mesh8, rng):
    small, large = random_array(rng, (8 * 16,), "float32"), random_array(rng, (8 * 4096,), "float32")
    with registered(load_plan(xml.ring_allreduce(8, "LL")), "loaded_small_only", max_bytes=1024):
        for x, runs_plan in [(small, True), (large, False)]:
            text = sharded(lambda v: jm.psum(v, "x"), mesh8, P("x"), P()).lower(x).as_text()
            assert ("algorithm = 6" in text) == runs_plan
            compare_with_lax(lambda v: jm.psum(v, "x"), lambda v: lax.psum(v, "x"), mesh8, (x,), P("x"), P())


def test_paths_and_our_own_format(tmp_path, rng):
    text = xml.allpairs_alltoall(3)
    path = tmp_path / "alltoall.xml"
    path.write_text(text)
    assert load_plan(path) == load_plan(str(path)) == load_plan(text)
    ours = library.allreduce_2pa_ll(3).lower()
    assert load_plan(plan_to_json(ours)) == ours
    with pytest.raises(TypeError, match="path or the text"):
        load_plan(b"<algo/>")
    with pytest.raises(PlanImportError, match="neither an MSCCL-IR XML document"):
        load_plan("not a plan")


def refused(text: str, element: str, attribute: str | None, reason: str) -> PlanImportError:
    with pytest.raises(PlanImportError) as caught:
        load_plan(text)
    error = caught.value
    assert element in error.element and error.attribute == attribute and reason in error.reason, str(error)
    assert isinstance(error, ValueError)
    return error


def test_msccl_ir_refusals_name_element_attribute_and_reason():
    ring = xml.ring_allreduce(3, "Simple")
    refused(ring.replace('type="rcs"', 'type="rcx"', 1), '<step s="', "type", "unknown step type 'rcx'")
    refused(ring.replace('coll="allreduce"', 'coll="broadcast"'), "<algo>", "coll", "collective 'broadcast'")
    refused(ring.replace('ngpus="3"', 'ngpus="4"'), "<algo>", "ngpus", "is 4 but the <gpu> elements have ids")
    refused(ring.replace('proto="Simple"', 'proto="LL64"'), "<algo>", "proto", "unknown protocol 'LL64'")
    refused(ring[:-20], "MSCCL-IR document", None, "malformed XML")
    refused(ring.replace('nchunksperloop="3"', 'nchunksperloop="2"'), '<gpu id="0">', "i_chunks", "more than")
    refused(ring.replace('send="1"', 'send="2"', 1), '<tb id="0"> of <gpu id="1">', "recv",
            "gpu 0 sends 0 times to gpu 1 on chan 0 but gpu 1 receives 4 times")
    refused(ring.replace('cnt="1"', 'cnt="2"', 1), "<step", "cnt", "matching send")
    refused(ring.replace("<step ", "<op ", 1), "<op>", None, "unknown element")
    in_place_rs = xml.allpairs_reducescatter(2).replace('inplace="0"', 'inplace="1"')
    refused(in_place_rs, "<algo>", "inplace", "in place, reduce_scatter's output lies within its input")
    refused(xml.allpairs_alltoall(2).replace('srcoff="1"', 'srcoff="5"', 1), "<step", "srcoff", "past the 2 chunks")
    refused(xml.allpairs_allgather(3).replace('nchunksperloop="3"', 'nchunksperloop="4"'), "<algo>",
            "nchunksperloop", "do not cut")
    allpairs = xml.allpairs_allreduce(3)
    refused(allpairs.replace('depid="1" deps="1"', 'depid="1" deps="7"', 1), "<step", "depid", "does not have")
    refused(allpairs.replace('hasdep="1"', 'hasdep="0"', 1), "<step", "hasdep", "would never mark it done")
    two_senders = XmlWriter("two", "alltoall", 2, "Simple", 2, 2, 2)
    for r in range(2):
        for _ in range(2):
            tb = two_senders.tb(r, send=1 - r, recv=1 - r)
            two_senders.step(r, tb, "s", src=("i", 1 - r))
            two_senders.step(r, tb, "r", dst=("o", 1 - r))
    refused(two_senders.text(), "<tb", "send", "one connection per peer and channel")


def test_a_missing_dependency_is_caught_at_its_step():
    """Without the dependency on the reduction, a peer thread block sends the output before it is reduced: the
    verifier reports the race at the MSCCL-IR step."""
    text = xml.allpairs_allreduce(3)
    with pytest.raises(VerificationError) as caught:
        load_plan(text.replace('depid="0"', 'depid="-1"'))
    assert caught.value.kind == "race" and '<step s="' in caught.value.src_line


def test_data_parked_at_another_position_of_a_block_is_refused():
    """Chunk r staged in output chunk 1-r: where chunks of a block differ in length the copy would cut it, so
    the plan is refused although every chunk ends up with the right contributions."""
    text = XmlWriter("parked", "allreduce", 2, "Simple", 2, 2, 2, s_chunks=1)
    for r in range(2):
        tb = text.tb(r, send=1 - r, recv=1 - r)
        text.step(r, tb, "s", src=("i", 1 - r))
        text.step(r, tb, "r", dst=("s", 0))
        text.step(r, tb, "cpy", src=("i", r), dst=("o", 1 - r))
        text.step(r, tb, "re", src=("s", 0), dst=("o", 1 - r))
        text.step(r, tb, "cpy", src=("o", 1 - r), dst=("o", r))
        text.step(r, tb, "s", src=("o", r))
        text.step(r, tb, "r", dst=("o", 1 - r))
    refused(text.text(), '<step s="2">', None, "differ in length")


def test_mscclpp_json_refusals_name_element_attribute_and_reason():
    plan = json.loads(js.allpairs_allreduce_simple(3))

    def changed(edit):
        copy = json.loads(json.dumps(plan))
        edit(copy)
        return json.dumps(copy)

    def first_op(copy, name):
        return next(op for op in copy["gpus"][0]["threadblocks"][0]["ops"] if op["name"] == name)

    refused(changed(lambda p: first_op(p, "put").update(name="frobnicate")), "gpu 0, threadblock 0", "name",
            "unknown operation 'frobnicate'")
    refused(changed(lambda p: first_op(p, "put").update(name="rres")), "gpu 0, threadblock 0", "name",
            "reads a peer's buffer")
    refused(changed(lambda p: p.update(collective="broadcast")), "MSCCL++ plan", "collective", "'broadcast'")
    refused(changed(lambda p: p["gpus"][2].update(id=5)), "gpus[2]", "id", "must have id")
    refused(changed(lambda p: p["gpus"][0]["remote_buffers"][0].update(type="o")), "dst_buff[0]", "buffer_id",
            "writes gpu 1's output")
    refused(changed(lambda p: p["gpus"][0]["remote_buffers"][0].update(type="i")), "dst_buff[0]", "buffer_id",
            "writes gpu 1's input: our executors only write into peers' scratch")
    refused(changed(lambda p: first_op(p, "put").update(tbg_info={"tb_id": 0, "tbg_size": 2})), "op 2",
            "tbg_info", "element ranges")
    refused(changed(lambda p: first_op(p, "put").update(name="pws")), "op 2", "channel_type", "port channels only")
    refused(changed(lambda p: p["gpus"][1].update(output_chunks=4)), "gpu 1", "output_chunks", "chunks of one size")
    refused(js.allpairs_allreduce_simple(3)[:-3], "JSON document", None, "malformed JSON")
    refused(changed(lambda p: p.update(inplace=True, collective="alltoall")), "MSCCL++ plan", "inplace",
            "in place, all_to_all's output lies within its input")
    packets = json.loads(js.allpairs_reducescatter_packets(3))
    for tb in packets["gpus"][1]["threadblocks"]:
        tb["ops"] = [op for op in tb["ops"] if op["name"] != "repkt"]
    refused(json.dumps(packets), "op", "dst_buff", "no thread block of gpu 1 unpacks")
