"""What the MSCCL++ front end refuses: a call with no counterpart in our plans raises UnsupportedConstruct
naming the call, the reason and the program line; a malformed program a VerificationError of its kind."""

import pytest

from jax_mscclpp.dsl import VerificationError
from jax_mscclpp.dsl.mscclpp import MSCCLPPProgram, UnsupportedConstruct, chunk
from jax_mscclpp.dsl.mscclpp.buffer import Buffer as ChunkBuffer
from jax_mscclpp.dsl.mscclpp.channel import MemoryChannel, PortChannel, SwitchChannel
from jax_mscclpp.dsl.mscclpp.collectives import AllGather, AllReduce, Broadcast, ReduceScatter, SendRecv
from jax_mscclpp.dsl.mscclpp.loop import LoopIterationContext
from jax_mscclpp.dsl.mscclpp.program import CollectiveProgram
from jax_mscclpp.dsl.mscclpp.rank import Buffer, Rank, Semaphore
from jax_mscclpp.dsl.mscclpp.types import BufferType, ChannelType, ReduceOperationType


def channel_program(collective=None):
    collective = collective or AllReduce(2, 1, False)
    return CollectiveProgram("refused", collective, collective.num_ranks)


def chunk_program(collective=None, protocol="Simple"):
    collective = collective or AllReduce(2, 2, False)
    return MSCCLPPProgram("refused", collective, collective.num_ranks, 1, protocol=protocol)


def refused(call, reason):
    """pytest.raises for UnsupportedConstruct naming ``call``, ``reason`` and this file's line."""
    return pytest.raises(UnsupportedConstruct, match=rf"^{call} at test_mscclpp_errors\.py:\d+: .*{reason}")


def test_channel_api_refusals():
    with channel_program():
        scratch, inp, out = Buffer(1, 2), Rank(0).get_input_buffer(), Rank(1).get_output_buffer()
        memory, port = MemoryChannel(1, 0), PortChannel(1, 0)
        with refused(r"MemoryChannel\.get", "no get"):
            memory.get(inp[0:1], scratch[0:1], tb=0)
        with refused(r"MemoryChannel\.reduce", "reads peers' memory"):
            memory.reduce(inp[0:1], [Rank(1).get_input_buffer()[0:1]], tb=0)
        with refused(r"MemoryChannel\.put", "rank 1's output: peers write only scratch"):
            memory.put(out[0:1], inp[0:1], tb=0)
        with refused(r"MemoryChannel\.read_put_packets", "not forwarded as packets"):
            memory.read_put_packets(scratch[0:1], Buffer(0, 1)[0:1], tb=0)
        with refused(r"PortChannel\.put_packets", "memory channels only"):
            port.put_packets(scratch[0:1], inp[0:1], tb=0)
        with refused(r"Rank\.copy_packets", "packing into local scratch"):
            Rank(0).copy_packets(Buffer(0, 1)[0:1], inp[0:1], tb=0)
        with refused(r"Rank\.reduce", "a plan names no reduction"):
            Rank(0).reduce(inp[0:1], [inp[1:2]], tb=0, reduce_op=ReduceOperationType.max)
        with refused(r"SwitchChannel\(buffer_type=\.\.\.\)", "multicast over input"):
            SwitchChannel([0, 1], BufferType.input)
        with refused(r"Semaphore\(initial_value=\.\.\.\)", "start each call balanced at zero"):
            Semaphore(0, 1)
        with refused(r"LoopIterationContext\(\.\.\.\)", "a plan has no loops"):
            LoopIterationContext(1, 2)


@pytest.mark.parametrize("collective", [SendRecv, Broadcast])
def test_collectives_without_a_plan(collective):
    with refused(rf"{collective.__name__}\(\.\.\.\)", "all_reduce, all_gather, reduce_scatter and all_to_all"):
        collective(2, 1, False)


def test_chunk_api_refusals():
    with chunk_program():
        c = chunk(0, ChunkBuffer.input, 0)
        with refused("get", "no get"):
            c.get(1, ChunkBuffer.scratch, 0, recvtb=0)
        with refused("reduce", "reads or writes rank 1's memory from rank 0"):
            c.reduce(chunk(1, ChunkBuffer.input, 0), recvtb=0)
        with refused("put", "automatic thread block assignment"):
            c.put(1, ChunkBuffer.scratch, 0)
        with refused("put", "rank 1's output: peers write only scratch"):
            c.put(1, ChunkBuffer.output, 0, sendtb=0)
        with refused("put", "appending to a named scratch buffer"):
            c.put(1, ChunkBuffer.scratch, sendtb=0)
        with refused("put", "chan_type=switch"):
            c.put(1, ChunkBuffer.scratch, 0, sendtb=0, chan_type=ChannelType.nvls)
        with refused("put_packet", "memory channels only"):
            c.put_packet(1, ChunkBuffer.scratch, 0, sendtb=0, chan_type=ChannelType.port)
        with refused("group_load_reduce", "multicast over input"):
            c.group_load_reduce([chunk(1, ChunkBuffer.input, 0)], recvtb=0)


def test_in_place_refusals():
    """In place, the one MSCCL++ buffer is our input until written and our output after (aliasing.py)."""
    with channel_program(ReduceScatter(2, 1, True)) as program:
        Rank(0).copy(Rank(0).get_input_buffer()[1:2], Buffer(0, 1)[0:1], tb=0)  # not rank 0's output block
    with refused(r"Rank\.copy", "outside rank 0's output block; our input is read-only"):
        program.plan()
    with channel_program(AllReduce(2, 1, True)) as program:
        inp, scratch = Rank(0).get_input_buffer(), Buffer(0, 2)
        Rank(0).copy(inp[0:1], scratch[0:1], tb=0)
        Rank(0).copy(scratch[0:2], inp[0:2], tb=0)
    with refused(r"Rank\.copy", "holds chunks already written and chunks not yet written"):
        program.plan()


def test_signals_and_waits_must_balance():
    with channel_program() as program:
        MemoryChannel(1, 0).signal(tb=0)
    with pytest.raises(VerificationError, match=r"\[sync\] at test_mscclpp_errors\.py:\d+: MemoryChannel\.signal: "
                                                r"rank 0 signals rank 1 1 time\(s\) .* but rank 1 waits 0"):
        program.plan()
    with chunk_program() as program:
        chunk(0, ChunkBuffer.input, 0).wait(1, recvtb=0)
    with pytest.raises(VerificationError, match=r"\[deadlock\] .*wait: rank 1 signals rank 0 0 time\(s\)"):
        program.plan()


def test_packets_nobody_puts():
    with chunk_program(protocol="LL") as program:
        chunk(0, ChunkBuffer.scratch, 0).copy_packet(0, ChunkBuffer.output, 0, sendtb=0)
    with pytest.raises(VerificationError, match=r"\[deadlock\] .*copy_packet: reads packets from rank 0 scratch "
                                                r"chunk 0 that no put of packets writes"):
        program.plan()


def test_malformed_programs():
    with chunk_program(AllGather(2, 1, False)):
        with pytest.raises(VerificationError, match=r"\[program\] .*output\[1:3\] of rank 0 is past the end of its "
                                                    r"2 chunks"):
            chunk(0, ChunkBuffer.output, 1, 2)
        with pytest.raises(VerificationError, match=r"MemoryChannel belongs to the channel API"):
            MemoryChannel(1, 0)
    with pytest.raises(RuntimeError, match=r"no MSCCL\+\+ program in context"):
        chunk(0, ChunkBuffer.input, 0)
    with pytest.raises(ValueError, match="num_ranks=4 but the collective has 2 ranks"):
        CollectiveProgram("bad", AllReduce(2, 1, False), 4)
