"""Records as strict JSON: what the bench, the kernel record and the soak write."""

from __future__ import annotations

import math


def json_safe(value):
    """``value`` with every float that is not finite (NaN, +-inf) as None, through dicts, lists and tuples (JSON
    has no such numbers; a record must load anywhere)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
