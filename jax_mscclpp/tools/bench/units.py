"""Message sizes as people write them: ``1K``, ``64KiB``, ``1M``, ``1G``, ``4096``; lists and ranges of them.

Suffixes are binary (K = 1024), as in nccl-tests. A range ``LO:HI`` is every power of two from LO to HI
(``LO:HI:F`` multiplies by F instead); a list mixes both: ``1K,4K,1M:16M``.
"""

from __future__ import annotations

import re

_MULTIPLIERS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes in ``text`` (``"64K"``, ``"1MiB"``, ``"1.5M"``, ``"4096"``, ``"512B"``); ValueError otherwise."""
    match = _SIZE.match(str(text))
    if not match:
        raise ValueError(f"not a size: {text!r} (examples: 4096, 1K, 64KiB, 1M, 1G)")
    number, suffix = match.groups()
    value = float(number) * _MULTIPLIERS[suffix.upper()]
    if value != int(value) or value <= 0:
        raise ValueError(f"not a positive whole number of bytes: {text!r}")
    return int(value)


def parse_sizes(spec: str) -> list[int]:
    """Sorted, distinct byte counts from a comma-separated list of sizes and ``LO:HI[:FACTOR]`` ranges."""
    sizes: set[int] = set()
    for item in str(spec).split(","):
        item = item.strip()
        if not item:
            continue
        if ":" in item:
            parts = item.split(":")
            if len(parts) not in (2, 3):
                raise ValueError(f"not a size range: {item!r} (LO:HI or LO:HI:FACTOR, e.g. 1K:1G)")
            lo, hi = parse_size(parts[0]), parse_size(parts[1])
            factor = int(parts[2]) if len(parts) == 3 else 2
            if factor < 2:
                raise ValueError(f"range factor must be at least 2: {item!r}")
            if lo > hi:
                raise ValueError(f"range runs backwards: {item!r}")
            size = lo
            while size <= hi:
                sizes.add(size)
                size *= factor
        else:
            sizes.add(parse_size(item))
    if not sizes:
        raise ValueError(f"no sizes in {spec!r}")
    return sorted(sizes)


def format_size(nbytes: int) -> str:
    """The shortest exact binary spelling: 1024 -> ``1K``, 1536 -> ``1.5K``, 1000 -> ``1000``."""
    for suffix in ("T", "G", "M", "K"):
        unit = _MULTIPLIERS[suffix]
        if nbytes >= unit:
            value = nbytes / unit
            if value == int(value):
                return f"{int(value)}{suffix}"
            if (value * 10) == int(value * 10):
                return f"{value:.1f}{suffix}"
    return str(int(nbytes))
