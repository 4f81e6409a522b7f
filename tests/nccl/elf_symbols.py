"""The dynamic symbols a shared library defines and its SONAME, read from its ELF file (64-bit, little-endian), so
that the export tests need no binutils."""

from __future__ import annotations

import struct

_SHT_DYNSYM = 11
_SHT_DYNAMIC = 6
_DT_SONAME = 14
_SHN_UNDEF = 0
_STB_GLOBAL, _STB_WEAK = 1, 2


def _sections(data: bytes) -> list[tuple]:
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    # (type, offset, size, link, entsize) of every section header
    return [struct.unpack_from("<4xI16xQQI4x8xQ", data, shoff + i * shentsize) for i in range(shnum)]


def _string(data: bytes, table_offset: int, index: int) -> str:
    end = data.index(b"\0", table_offset + index)
    return data[table_offset + index:end].decode()


def defined_dynamic_symbols(path: str) -> set[str]:
    """Names of the global and weak symbols the library defines in its dynamic symbol table."""
    data = open(path, "rb").read()
    sections = _sections(data)
    names: set[str] = set()
    for kind, offset, size, link, entsize in sections:
        if kind != _SHT_DYNSYM:
            continue
        strtab_offset = sections[link][1]
        for start in range(offset, offset + size, entsize):
            name_index, info, _, shndx = struct.unpack_from("<IBBH", data, start)
            if shndx != _SHN_UNDEF and (info >> 4) in (_STB_GLOBAL, _STB_WEAK) and name_index:
                names.add(_string(data, strtab_offset, name_index))
    return names


def soname(path: str) -> str | None:
    data = open(path, "rb").read()
    sections = _sections(data)
    for kind, offset, size, link, entsize in sections:
        if kind != _SHT_DYNAMIC:
            continue
        strtab_offset = sections[link][1]
        for start in range(offset, offset + size, entsize):
            tag, value = struct.unpack_from("<qQ", data, start)
            if tag == _DT_SONAME:
                return _string(data, strtab_offset, value)
    return None
