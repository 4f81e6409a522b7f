"""Many setups and teardowns in one process: no leaked memory, proxy threads or IPC mappings."""

import os

import pytest


from .gpu_helpers import VirtualRanks

pytestmark = pytest.mark.gpu


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


def cycle(nranks):
    with VirtualRanks(nranks, buffer_bytes=1 << 20, scratch_bytes=4 << 20, channels_per_peer=2, port_channels=True) as vr:
        vr.run("hb_exchange", bytes=4097, slot_stride=8192, blocks=2)
        vr.run("port_exchange", bytes=4097, slot_stride=8192, mode=2)


def test_repeated_setup_and_teardown(cuda):
    cycle(4)  # warm up: module load, context, streams
    free0 = cuda.mem_get_info(0)[0]
    threads0 = threads()
    for i in range(25):
        cycle(2 + i % 7)
    assert cuda.live_proxy_threads() == 0
    assert cuda.live_ipc_mappings() == 0
    assert threads() <= threads0
    assert abs(cuda.mem_get_info(0)[0] - free0) <= 8 << 20, (free0, cuda.mem_get_info(0)[0])
