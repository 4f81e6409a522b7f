"""``mscclpp.language.buffer`` of the chunk API: ``Buffer.input``, ``Buffer.output``, ``Buffer.scratch``."""

from .types import BufferType as Buffer

__all__ = ["Buffer"]
