"""One order for the collectives of a program on CPU devices.

The host backend needs every rank to make its calls one at a time and in the same order (docs/reliability.md).
XLA's CPU runtime orders the operations of a program only by the buffers they read and write, and runs
independent ones concurrently (programs of more than 8 operations with buffers over 512 bytes): two jax_mscclpp
collectives that do not depend on each other, such as the leaves of one pytree, can overlap on a device, or start
in one order on one device and in the other elsewhere. So the CPU lowering hands each collective the result of the
collective lowered before it in the same block as an extra operand, which the handler ignores: reading that buffer
makes it wait for its predecessor, on every device alike. Collectives in different blocks (a loop body and the code
around the loop, the branches of a cond, separately lowered functions) are not ordered this way; if XLA overlaps
them, the host backend refuses the second call of a rank with an error saying so rather than mixing data.
"""

from __future__ import annotations

from typing import Any

from . import _compat

_KEY = "ordering"


def predecessor(ctx) -> tuple[list[Any], list[Any]]:
    """(values, avals) of the last collective lowered in the current block of this module, or two empty lists."""
    last = _compat.module_state(ctx, _KEY).get(_compat.current_block())
    return ([last[0]], [last[1]]) if last is not None else ([], [])


def record(ctx, value: Any, aval: Any) -> None:
    """``value`` (of type ``aval``), the result of a collective just lowered, is the predecessor of the next one."""
    _compat.module_state(ctx, _KEY)[_compat.current_block()] = (value, aval)
