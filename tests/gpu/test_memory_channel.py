"""MemoryChannel on virtual ranks: HB put/get/put_with_signal, LL packets, elements, barriers, reduce_put."""

import numpy as np
import pytest


from .collective_helpers import random_array
from .gpu_helpers import INPUT, OUTPUT, SCRATCH, VirtualRanks, is_float, numpy_dtype, random_bytes, round_up

pytestmark = pytest.mark.gpu

MiB = 1 << 20
BIG = 64 * MiB
SIZES = [1, 3, 15, 16, 17, 255, 4097, 65537, MiB + 3, BIG - 1, BIG]
OFFSETS = [(0, 0), (1, 3), (8, 8), (5, 0)]


@pytest.fixture(scope="module")
def vr2(cuda):
    slot = round_up(BIG + 64, 256)
    with VirtualRanks(2, buffer_bytes=2 * slot, scratch_bytes=2 * slot, channels_per_peer=8) as vr:
        vr.slot = slot
        yield vr


def clear_scratch(vr):
    # Scratch that held HB data can hold any word; LL flags come from epochs (never 0), so zero it before LL use.
    for r in range(vr.nranks):
        vr.fill(r, SCRATCH, 0)


def exchange_and_check(vr, rng, op, nbytes, src_off, dst_off, slot, **params):
    if op == "ll_exchange":
        clear_scratch(vr)
    inputs = [random_bytes(rng, nbytes + src_off) for _ in range(vr.nranks)]
    for r in range(vr.nranks):
        vr.upload(r, INPUT, inputs[r])
    counters = vr.run(op, bytes=nbytes, src_off=src_off, dst_off=dst_off, slot_stride=slot, **params)
    for r in range(vr.nranks):
        for p in range(vr.nranks):
            if p == r:
                continue
            got = vr.download(r, OUTPUT, nbytes, offset=p * slot)
            want = inputs[p][src_off : src_off + nbytes]
            assert np.array_equal(got, want), f"rank {r} from {p}: {np.count_nonzero(got != want)} bytes differ"
    return counters


@pytest.mark.parametrize("nbytes", SIZES)
@pytest.mark.parametrize("offsets", OFFSETS)
def test_hb_put_signal_wait_sizes(vr2, rng, nbytes, offsets):
    if nbytes >= BIG - 1 and offsets not in [(0, 0), (1, 3)]:
        pytest.skip("64 MiB only at two offset pairs")
    exchange_and_check(vr2, rng, "hb_exchange", nbytes, *offsets, vr2.slot, mode=0, blocks=8, threads=512)


@pytest.mark.parametrize("nbytes", [1, 17, 4097, MiB + 3, BIG])
@pytest.mark.parametrize("mode", [1, 2], ids=["put_with_signal", "get"])
def test_hb_fused_and_get(vr2, rng, nbytes, mode):
    exchange_and_check(vr2, rng, "hb_exchange", nbytes, 3, 1, vr2.slot, mode=mode, blocks=8, threads=512)


@pytest.mark.parametrize("nranks", [3, 4, 5, 8])
@pytest.mark.parametrize("mode", [0, 1, 2])
def test_hb_many_ranks(cuda, rng, nranks, mode):
    slot = 128 * 1024
    with VirtualRanks(nranks, buffer_bytes=nranks * slot, scratch_bytes=nranks * slot, channels_per_peer=2) as vr:
        for nbytes in [1, 4097, 100_003]:
            exchange_and_check(vr, rng, "hb_exchange", nbytes, 1, 2, slot, mode=mode, blocks=2, threads=256)


@pytest.mark.parametrize("packet", [8, 16])
@pytest.mark.parametrize("nbytes", [1, 3, 4, 5, 8, 9, 17, 255, 4097, 65537, MiB + 3])
def test_ll_packets_sizes(vr2, rng, packet, nbytes):
    # LL16 needs 8-byte aligned source/destination for the fast path; odd offsets take the byte path.
    exchange_and_check(vr2, rng, "ll_exchange", nbytes, 8, 0, vr2.slot, packet=packet, blocks=4, threads=256)
    exchange_and_check(vr2, rng, "ll_exchange", nbytes, 3, 0, vr2.slot, packet=packet, blocks=2, threads=128)


@pytest.mark.parametrize("nranks", [2, 3, 4, 6, 8])
def test_ll_many_ranks(cuda, rng, nranks):
    slot = 64 * 1024
    with VirtualRanks(nranks, buffer_bytes=nranks * slot, scratch_bytes=8 * nranks * slot, channels_per_peer=2) as vr:
        for packet in (8, 16):
            for nbytes in [7, 4096, 30_001]:
                exchange_and_check(vr, rng, "ll_exchange", nbytes, 0, 0, slot, packet=packet, blocks=2, threads=256)


@pytest.mark.parametrize("packet", [8, 16])
def test_ll_10000_epochs_no_stale_read(vr2, packet):
    """10 000 calls reuse the same two scratch halves; every word is checked against this epoch's pattern."""
    clear_scratch(vr2)
    e0 = vr2.epoch(0)
    counters = vr2.run("ll_exchange", bytes=4096, slot_stride=8192, packet=packet, iters=10_000, blocks=2, threads=256)
    assert [int(c[0]) for c in counters] == [0, 0]
    assert vr2.epoch(0) == e0 + 10_000 and vr2.epoch(1) == vr2.epoch(0)


def test_ll_epochs_eight_ranks(cuda):
    with VirtualRanks(8, buffer_bytes=1 << 16, scratch_bytes=1 << 20, channels_per_peer=2) as vr:
        counters = vr.run("ll_exchange", bytes=2048, slot_stride=4096, packet=16, iters=2000, blocks=2, threads=128)
        assert all(int(c[0]) == 0 for c in counters)
        assert {vr.epoch(r) for r in range(8)} == {2000}


def test_ll_epoch_lives_on_device_across_launches(vr2):
    """One epoch per launch, read from and bumped in device memory: 300 launches, all verified."""
    clear_scratch(vr2)
    e0 = vr2.epoch(0)
    bad = 0
    for _ in range(300):
        counters = vr2.run("ll_exchange", bytes=1000, slot_stride=1024, packet=16, mode=1, blocks=1, threads=64)
        bad += sum(int(c[0]) for c in counters)
    assert bad == 0
    assert vr2.epoch(0) == e0 + 300 and vr2.epoch(1) == e0 + 300


def test_hb_10000_epochs_signal_never_before_data(vr2):
    """put, signal, wait, verify, 10 000 times over double-buffered scratch: a signal seen before its data, or
    a put landing in a half the peer still reads, shows up as a wrong word."""
    counters = vr2.run("hb_epochs", bytes=8192, slot_stride=8192, iters=10_000, blocks=2, threads=256)
    assert [int(c[0]) for c in counters] == [0, 0]


def test_hb_epochs_eight_ranks(cuda):
    with VirtualRanks(8, buffer_bytes=1 << 16, scratch_bytes=1 << 20, channels_per_peer=2) as vr:
        counters = vr.run("hb_epochs", bytes=4096, slot_stride=4096, iters=1000, blocks=2, threads=128)
        assert all(int(c[0]) == 0 for c in counters)


@pytest.mark.parametrize("nranks", [2, 4, 8])
def test_single_element_read_write(cuda, nranks):
    with VirtualRanks(nranks, channels_per_peer=1) as vr:
        for _ in range(3):
            counters = vr.run("elements")
            assert all(int(c[0]) == 0 for c in counters)


@pytest.mark.parametrize("nranks", [2, 5, 8])
def test_barriers(cuda, nranks):
    with VirtualRanks(nranks, channels_per_peer=1) as vr:
        vr.run("barrier", mode=0, iters=10_000)  # relaxed_signal / relaxed_wait: completes
        counters = vr.run("barrier", mode=1, iters=2000)  # signal / wait: data written before is visible
        assert all(int(c[0]) == 0 for c in counters)


REDUCE_PUT_CASES = [
    ("float32", "sum", 3),
    ("float32", "max", 2),
    ("float32", "min", 5),
    ("bfloat16", "sum", 2),
    ("float16", "sum", 4),
    ("int8", "sum", 3),
    ("uint64", "sum", 2),
    ("int32", "sum", 9),
]


def reference_reduce(arrays, dtype, op):
    dt = numpy_dtype(dtype)
    if op == "sum":
        if is_float(dt):
            acc = arrays[0].astype(np.float64 if dt == np.float64 else np.float32)
            for a in arrays[1:]:
                acc = acc + a.astype(acc.dtype)
            return acc.astype(dt)
        acc = arrays[0].copy()
        for a in arrays[1:]:
            acc = (acc + a).astype(dt)
        return acc
    fn = np.maximum if op == "max" else np.minimum
    acc = arrays[0]
    for a in arrays[1:]:
        acc = fn(acc, a)
    return acc


@pytest.mark.parametrize("nranks", [2, 3])
@pytest.mark.parametrize("dtype,op,nsrc", REDUCE_PUT_CASES)
def test_reduce_put(cuda, rng, nranks, dtype, op, nsrc):
    count = 10_007
    esize = numpy_dtype(dtype).itemsize
    stride = round_up(count * esize, 256)
    with VirtualRanks(nranks, buffer_bytes=nsrc * stride, scratch_bytes=stride, channels_per_peer=4) as vr:
        srcs = [[random_array(rng, dtype, count) for _ in range(nsrc)] for _ in range(nranks)]
        for r in range(nranks):
            for k in range(nsrc):
                vr.upload(r, INPUT, srcs[r][k], offset=k * stride)
        vr.run("reduce_put", dtype=dtype, reduce_op=op, nsrc=nsrc, count=count, slot_stride=stride, blocks=4)
        for r in range(nranks):
            prev = (r - 1) % nranks
            got = vr.download(r, OUTPUT, count * esize, dtype=dtype)
            want = reference_reduce(srcs[prev], dtype, op)
            if is_float(numpy_dtype(dtype)):
                np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-2, atol=1e-2)
            else:
                assert np.array_equal(got, want)
