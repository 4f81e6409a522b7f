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
from jax_mscclpp.dsl.mscclpp import Json, chunk
from jax_mscclpp.dsl.mscclpp.buffer import Buffer
from jax_mscclpp.dsl.mscclpp.general import JSON
from jax_mscclpp.dsl.simulate import run_plan
from tests.dsl import mscclpp_channel_programs, mscclpp_chunk_programs
from tests.dsl.test_dsl_simulate import expected_outputs

# What the loader refuses: switch operations. (A barrier across thread blocks is written as MSCCL++'s barrier.)
NOT_LOADED = {(mscclpp_channel_programs, "allreduce_switch")}
CASES = [(api, name, fn, collective)
         for api in (mscclpp_channel_programs, mscclpp_chunk_programs)
         for name, (fn, collective) in api.PROGRAMS.items() if (api, name) not in NOT_LOADED]


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
