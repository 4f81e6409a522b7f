"""``JSON()`` / ``Json()`` of the MSCCL++ front end write MSCCL++'s executor format: the loader of that format
(``jax_mscclpp.dsl.load_plan``) reads it back to a plan that computes the collective, and its channels pair as
MSCCL++ pairs them (the k-th from rank a to b with the k-th from b to a)."""

import contextlib
import io
import json
from collections import Counter

import numpy as np
import pytest

from jax_mscclpp.dsl import load_plan
from jax_mscclpp.dsl.imports.errors import PlanImportError
from jax_mscclpp.dsl.mscclpp import Json, chunk
from jax_mscclpp.dsl.mscclpp.buffer import Buffer
from jax_mscclpp.dsl.mscclpp.general import JSON
from jax_mscclpp.dsl.simulate import run_plan
from tests.dsl import mscclpp_channel_programs, mscclpp_chunk_programs
from tests.dsl.test_dsl_simulate import expected_outputs

CASES = [(api, name, fn, collective)
         for api in (mscclpp_channel_programs, mscclpp_chunk_programs)
         for name, (fn, collective) in api.PROGRAMS.items()]


@pytest.mark.parametrize("world_size,instances", [(2, 1), (4, 2), (8, 1)])
@pytest.mark.parametrize("api,name,fn,collective", CASES, ids=[f"{c[0].__name__[15:]}-{c[1]}" for c in CASES])
def test_json_loads_back_to_the_collective(rng, api, name, fn, collective, world_size, instances):
    program = fn(world_size, instances)
    document = json.loads(program.to_json())
    assert document["name"] == program.name and len(document["gpus"]) == world_size
    assert document["protocol"] == ("LL" if program.plan()["buffers"]["scratch"]["packets"] else "Simple")
    _assert_channels_pair(document)
    plan = load_plan(program.to_json())
    inputs = list(rng.integers(1, 1 << 20, size=(world_size, 3 * plan["buffers"]["input"]["blocks"]))
                  .astype(np.int32))
    for ours, expected in zip(run_plan(plan, inputs), expected_outputs(collective, inputs, np.add)):
        np.testing.assert_array_equal(ours, expected)


def test_memory_puts_with_signal_are_a_put_and_a_signal():
    """MSCCL++ runs pws and flush on port channels only."""
    document = json.loads(mscclpp_channel_programs.reducescatter_allpairs(4).to_json())
    names = Counter(op["name"] for gpu in document["gpus"] for tb in gpu["threadblocks"] for op in tb["ops"])
    assert names["pws"] == 0 and names["flush"] == 0 and names["put"] == names["signal"] == 4 * 3
    port = json.loads(mscclpp_channel_programs.alltoall_port(4).to_json())
    assert {op["name"] for gpu in port["gpus"] for tb in gpu["threadblocks"] for op in tb["ops"]} >= {"pws", "flush"}


def test_json_and_JSON_write_the_program_being_written():
    program = mscclpp_chunk_programs.allgather_port(2)
    with program:
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            Json()
        assert json.loads(printed.getvalue()) == json.loads(JSON()) == json.loads(program.to_json())
        chunk(0, Buffer.input, 0)  # the chunk API reads the same program


def _assert_channels_pair(document):
    """Every channel of type t from rank a to b has a partner from b to a at the same occurrence."""
    links = Counter()
    for gpu in document["gpus"]:
        for channel in gpu["channels"]:
            for peer in channel.get("connected_to", []):
                links[channel["channel_type"], gpu["id"], peer] += 1
    for (kind, a, b), count in links.items():
        assert links[kind, b, a] == count, (kind, a, b)


def _switch_document(world_size: int) -> dict:
    document = json.loads(mscclpp_channel_programs.allreduce_switch(world_size).to_json())
    assert {op["name"] for gpu in document["gpus"] for op in gpu["threadblocks"][0]["ops"]} >= {"glre", "gstore"}
    return document


def test_a_switch_reduce_and_store_fused_into_glres_load(rng):
    """MSCCL++'s Python fuses a glre whose result a gstore stores into glres: each rank reduces its chunk of every
    member's scratch and stores the sum into every member's scratch (then copies every chunk into its output)."""
    n = 4
    document = _switch_document(n)
    for rank, gpu in enumerate(document["gpus"]):
        ops = gpu["threadblocks"][0]["ops"]
        first = next(i for i, op in enumerate(ops) if op["name"] == "glre")
        last = next(i for i, op in enumerate(ops) if op["name"] == "gstore")
        load, store = ops[first], ops[last]
        ops[first:last + 1] = [{"name": "glres", "channel_type": "switch", "reduce_op": "sum",
                                "src_buff": [{"switch_channel_id": load["channel_ids"][0],
                                              "index": load["buffer_offset"], "size": load["size"]}],
                                "dst_buff": store["dst_buff"]}]
        ops.append({"name": "copy", "src_buff": [{"type": "s", "index": rank, "size": 1}],
                    "dst_buff": [{"type": "o", "index": rank, "size": 1}]})
    plan = load_plan(json.dumps(document))
    names = Counter(op["op"] for rank in plan["ranks"] for tb in rank["threadblocks"] for op in tb["ops"])
    assert names["switch_reduce"] == names["switch_broadcast"] == n
    inputs = list(rng.integers(1, 1 << 20, size=(n, 3 * n)).astype(np.int32))
    for ours, expected in zip(run_plan(plan, inputs), expected_outputs("all_reduce", inputs, np.add)):
        np.testing.assert_array_equal(ours, expected)


def test_switch_channels_we_cannot_run_are_refused():
    def refused(edit, element, attribute, reason):
        document = _switch_document(4)
        edit(document)
        with pytest.raises(PlanImportError) as caught:
            load_plan(json.dumps(document))
        error = caught.value
        assert element in error.element and error.attribute == attribute and reason in error.reason, str(error)

    def switch_channel(document, rank):
        return next(c for c in document["gpus"][rank]["channels"] if c["channel_type"] == "switch")

    def first_op(document, name):
        return next(op for op in document["gpus"][0]["threadblocks"][0]["ops"] if op["name"] == name)

    refused(lambda d: switch_channel(d, 0).update(buffer_type="i"), "gpu 0 channels[1]", "buffer_type",
            "switch channel over the input: our switch channels multicast scratch only")
    refused(lambda d: first_op(d, "glre").update(buffer_type="o"), "gpu 0, threadblock 0", "buffer_type",
            "multicast scratch only")
    refused(lambda d: first_op(d, "gstore").update(name="gstorepkt"), "gpu 0, threadblock 0", "name",
            "our switch channels carry plain data")
    refused(lambda d: d["gpus"][2]["channels"].remove(switch_channel(d, 2)), "gpu 0 channels", "rank_groups",
            "gpu 0 has 1 switch channels over gpus [0, 1, 2, 3], gpu 2 0")
    refused(lambda d: switch_channel(d, 1)["rank_groups"][0].update(ranks=[0, 2, 3]), "gpu 1 channels[1]",
            "rank_groups", "include gpu 1")
    refused(lambda d: first_op(d, "gstore")["dst_buff"][0].update(index=99), "gpu 0, threadblock 0", "dst_buff",
            "not in gpu 0's")
    refused(lambda d: first_op(d, "glre").update(channel_ids=[3]), "gpu 0, threadblock 0", "channel_ids",
            "not one of the thread block's 1 switch channels")
