"""The NCCL-API library's process mailbox (nccl/runtime/mailbox.h), through the GPU tests' harness module (the CUDA
build; no GPU needed): a letter delivered to a key is collected once, whether it came before the collector waited
or while it waits; a key nobody delivered times out naming what was awaited; delivery to an address where no
mailbox listens fails naming it; connections that are not letters neither block nor corrupt the mailbox."""

import socket
import struct
import threading
import time

import pytest


def text_of(address):
    ipv4, port = address
    return socket.inet_ntoa(struct.pack("=I", ipv4)), struct.unpack(">H", struct.pack("=H", port))[0]


def test_a_letter_delivered_before_it_is_awaited(harness):
    box = harness.process_mailbox()
    assert harness.process_mailbox() == box, "one mailbox a process"
    harness.mailbox_deliver(box, "early", b"\x00id bytes\xff" * 13, 10.0)
    assert harness.mailbox_collect("early", 10.0) == b"\x00id bytes\xff" * 13
    with pytest.raises(RuntimeError, match="the letter 'early' did not come within 0 s"):
        harness.mailbox_collect("early", 0.2)  # collected once


def test_a_letter_delivered_while_it_is_awaited(harness):
    box = harness.process_mailbox()
    got = {}

    def wait():
        got["letter"] = harness.mailbox_collect("late", 20.0)

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.3)
    for key in ("other", "late"):
        harness.mailbox_deliver(box, key, key.encode() * 3, 10.0)
    waiter.join(timeout=30)
    assert got["letter"] == b"latelatelate"
    assert harness.mailbox_collect("other", 1.0) == b"otherotherother"


def test_delivery_where_no_mailbox_listens_fails_naming_it(harness):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()  # nothing listens there now
    to = (struct.unpack("=I", socket.inet_aton("127.0.0.1"))[0], struct.unpack("=H", struct.pack(">H", port))[0])
    with pytest.raises(RuntimeError, match=f"could not reach the mailbox at 127.0.0.1:{port}"):
        harness.mailbox_deliver(to, "nowhere", b"x", 0.5)


def test_connections_that_are_not_letters_do_not_block_the_mailbox(harness):
    box = harness.process_mailbox()
    silent = socket.create_connection(text_of(box), timeout=10)  # says nothing
    foreign = socket.create_connection(text_of(box), timeout=10)
    foreign.sendall(bytes(range(24)))  # a letter-sized header of another protocol
    start = time.monotonic()
    harness.mailbox_deliver(box, "after strangers", b"ok", 20.0)
    assert harness.mailbox_collect("after strangers", 1.0) == b"ok"
    assert time.monotonic() - start < 3, "a silent connection held up the letter"
    silent.close()
    foreign.close()
