"""The plan operations: one table row per operation, the only place an operation's meaning is written down.

Every pass reads this table and refuses an operation it does not list (``spec_of``): plan validation and JSON
output (plan_format.py), chunk accesses (access.py), fusion, barrier placement, verification, simulation, lowering, and
the integer encoding of the native executors (``jax_mscclpp/plan_encoding.py``). A row says:

* the name: the operation's code in the integer encoding is the row of that name in
  ``kernels/include/jax_mscclpp/codes.def`` (``jax_mscclpp/plan_encoding.py``, ``OPCODES``; a test checks that both
  tables list the same operations).
* ``channel``: whether the operation names a channel of its own (plan field ``"channel"``);
  ``channel_kinds``: the (type, protocol) pairs every channel it names may have, its own and those of its
  ``VIA`` operands; ``side``: which end of a memory/port pipe its own channel is, the sender's (``SEND``) or
  the receiver's (``RECV``).
* ``operands``: its chunk operands, in plan field order. Each is read or written, ``LOCAL`` (the executing
  rank's chunks) or ``REMOTE`` (through the channel: the peer of a memory/port channel, every member of a
  switch channel), and may carry LL packets (written as packets; or read by unpacking packets that the
  channel's peer wrote, waiting for them).
* ``sync``: its synchronization role (``BARRIER``, ``SIGNAL``, ``WAIT``, ``FLUSH`` or None). An operation with a
  role is a barrier point of its thread block, after its data step if it has one (PLAN.md, "Execution model").
* ``min_sources``: the fewest chunk references its read operands must have together (reductions: 2).
* ``reduction``, ``fuses_into``, ``fused_from``: what fusion may make of it (fusion.py, below).

What an operation does follows from its operands and role; the simulator and the verifier both read it so.
The data step comes first: per chunk, the values of the read references (operands in order, list entries in
order, switch members in ``peers`` order) are reduced in that order (one value is copied as is) and stored
into every written reference; on a port channel the data step is a DMA that may run until ``flush``. Then the
role: ``SIGNAL`` releases and increments the peer's semaphore, ``WAIT`` blocks until the next signal and
acquires, ``FLUSH`` waits for the thread block's DMA on the channel, ``BARRIER`` orders the thread block only.

Fusion (fusion.py) merges chains of one thread block:

* a ``reduction`` is ``dst <- srcs`` plus, optionally, ``VIA`` operands; the reductions of the table differ
  only in which ``VIA`` operands they have and over which channels. Fusion adds entries to a reduction's
  ``VIA`` operands and names the result after the first reduction of the table that holds them all;
* an operation with ``fuses_into=F`` becomes one entry of a reduction's ``VIA`` operand ``F``. Into a read
  operand (a source), it is an operation ``dst <- src`` through its channel whose ``dst`` is a temporary that
  only the reduction reads: the entry is ``{"channel", "src"}``. Into a written operand (a destination), it is
  an operation ``dst <- src`` through its channel right after the reduction, whose ``src`` is the reduction's
  result: the entry is ``{"channel", "dst"}``. The entry's packets and channel kind must suit the operand;
* ``fused_from=(a, b)``: ``a`` followed by ``b`` on the same channel is this one operation. A share that
  lowering finds empty drops the parts with chunk operands and keeps the other (``put_with_signal`` keeps its
  ``signal``).

How to add an operation
-----------------------
1. ``dsl/ops.py``: a row of ``_TABLE``. An operation whose data step and role fit
   the description above, with fields the integer encoding carries (``channel``, ``dst``, ``src``, ``srcs``,
   ``packet_srcs``, ``remotes``), needs nothing else from the passes; a new kind of semantics (a new role,
   say) needs its handling in ``simulate.py`` and ``verify.py`` as well, a new field its words in
   ``jax_mscclpp/plan_encoding.py``.
2. ``dsl/program.py`` (a local operation) or ``dsl/channels.py`` (a channel operation): the DSL call, which
   ``Program.record``s it with the plan fields of its operands as argument names.
3. ``dsl/PLAN.md``: its row in "Operations" (a test checks that the table lists exactly the operations here).
4. A test in ``tests/dsl``.

The native executors learn it separately: its code, a row of ``kernels/include/jax_mscclpp/codes.def`` (a test
compares the two tables), and its implementation in the host backend and the executor kernel.
"""

from __future__ import annotations

import dataclasses

from .errors import OpLocation, VerificationError

# How an operand appears in a plan operation: one chunk reference, a list of them, or a list of entries
# {"channel": c, "src" or "dst": reference}, each reached through its own channel ("src" when read).
REF, REFS, VIA = "ref", "refs", "via"
READ, WRITE = "read", "write"
LOCAL, REMOTE = "local", "remote"
SEND, RECV = "send", "recv"
BARRIER, SIGNAL, WAIT, FLUSH = "barrier", "signal", "wait", "flush"


@dataclasses.dataclass(frozen=True)
class Operand:
    """One chunk operand of an operation (module docstring)."""

    field: str
    shape: str
    access: str
    place: str = LOCAL
    packets: bool = False
    min_entries: int = 0

    @property
    def entry_key(self) -> str:
        """Key of the chunk reference inside a ``VIA`` entry."""
        return "src" if self.access == READ else "dst"


@dataclasses.dataclass(frozen=True)
class OpSpec:
    """One operation of the plan (module docstring)."""

    name: str
    operands: tuple[Operand, ...] = ()
    channel: bool = False
    channel_kinds: frozenset = frozenset()
    side: str | None = None
    sync: str | None = None
    min_sources: int = 0
    reduction: bool = False
    fuses_into: str | None = None
    fused_from: tuple[str, str] | None = None

    @property
    def fields(self) -> dict[str, str]:
        """Plan field -> shape (``"channel"`` for the operation's own channel), in plan field order."""
        own = {"channel": "channel"} if self.channel else {}
        return {**own, **{operand.field: operand.shape for operand in self.operands}}

    @property
    def barrier_point(self) -> bool:
        """Whether every thread of the thread block finishes what came before, this operation's data step
        included, before any starts what follows."""
        return self.sync is not None

    @property
    def uses_packets(self) -> bool:
        return any(operand.packets for operand in self.operands)

    def operand(self, field: str) -> Operand | None:
        return next((operand for operand in self.operands if operand.field == field), None)


_PIPES = frozenset({("memory", "HB"), ("memory", "LL"), ("port", "HB")})
_PUTS = frozenset({("memory", "HB"), ("port", "HB")})
_MEMORY_HB = frozenset({("memory", "HB")})
_MEMORY_LL = frozenset({("memory", "LL")})
_SWITCH = frozenset({("switch", "HB")})

_DST = Operand("dst", REF, WRITE)
_SRC = Operand("src", REF, READ)
_SRCS = Operand("srcs", REFS, READ)
_PUT = (Operand("dst", REF, WRITE, REMOTE), _SRC)

_TABLE = (
    OpSpec("copy", (_DST, _SRC)),
    OpSpec("reduce", (_DST, _SRCS), min_sources=2, reduction=True),
    OpSpec("put", _PUT, channel=True, channel_kinds=_PUTS, side=SEND, fuses_into="remotes"),
    OpSpec("put_packets", (Operand("dst", REF, WRITE, REMOTE, packets=True), _SRC), channel=True,
           channel_kinds=_MEMORY_LL, side=SEND, fuses_into="remotes"),
    OpSpec("read_packets", (_DST, Operand("src", REF, READ, packets=True)), channel=True,
           channel_kinds=_MEMORY_LL, side=RECV, fuses_into="packet_srcs"),
    OpSpec("signal", channel=True, channel_kinds=_PIPES, side=SEND, sync=SIGNAL),
    OpSpec("wait", channel=True, channel_kinds=_PIPES, side=RECV, sync=WAIT),
    OpSpec("flush", channel=True, channel_kinds=_PIPES, side=SEND, sync=FLUSH),
    OpSpec("put_with_signal", _PUT, channel=True, channel_kinds=_PUTS, side=SEND, sync=SIGNAL,
           fused_from=("put", "signal")),
    OpSpec("reduce_put", (_DST, _SRCS, Operand("remotes", VIA, WRITE, REMOTE, min_entries=1)),
           channel_kinds=_MEMORY_HB, min_sources=2, reduction=True),
    OpSpec("reduce_packets", (_DST, _SRCS, Operand("packet_srcs", VIA, READ, packets=True),
                              Operand("remotes", VIA, WRITE, REMOTE, packets=True)),
           channel_kinds=_MEMORY_LL, min_sources=2, reduction=True),
    OpSpec("barrier", sync=BARRIER),
    OpSpec("switch_reduce", (_DST, Operand("src", REF, READ, REMOTE)), channel=True, channel_kinds=_SWITCH),
    OpSpec("switch_broadcast", (Operand("dst", REF, WRITE, REMOTE), _SRC), channel=True,
           channel_kinds=_SWITCH),
)

OPS: dict[str, OpSpec] = {spec.name: spec for spec in _TABLE}

# The operation barrier placement inserts: a barrier point and nothing else.
BARRIER_OP = "barrier"
# The operation that only waits for a signal: fusion may move a reduction past it (fusion.py, "chains").
WAIT_OP = "wait"
# The operation that only signals: fusion may move a put of a reduction's result before it (fusion.py,
# "destinations").
SIGNAL_OP = "signal"
# The local copy: fusion takes it for a reduction of one source (fusion.py, "chains").
COPY_OP = "copy"

# (first, second) -> the operation that is both, on one channel.
FUSED_PAIRS: dict[tuple[str, str], str] = {spec.fused_from: spec.name for spec in _TABLE if spec.fused_from}

# The reductions, in the order fusion tries them.
REDUCTIONS: tuple[OpSpec, ...] = tuple(spec for spec in _TABLE if spec.reduction)


def spec_of(name, at: OpLocation | None = None) -> OpSpec:
    """The table row of operation ``name``; a ``schema`` VerificationError (located at ``at``) when the table
    has none."""
    spec = OPS.get(name) if isinstance(name, str) else None
    if spec is None:
        raise VerificationError("schema", f"unknown operation {name!r}; the operations are {', '.join(OPS)}", at)
    return spec
