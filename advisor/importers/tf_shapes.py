"""Tensor shapes from TensorFlow's step records, for the op database (``advisor opdb``).

A ``NodeExecStats`` output usually carries its shape; where it does not (or a dimension is
unknown, -1), the element count is still known from the allocation's requested bytes divided
by the dtype's size, and the shape is then recorded as one dimension of that many elements:
the op database fits time against element counts, for which that is enough.
"""

from __future__ import annotations

from collections.abc import Sequence

# Bytes per element of TensorFlow dtypes, by the names the two encodings use
# ("float32" in the condensed dump, "DT_FLOAT" in protobuf-JSON).
DTYPE_BYTES: dict[str, int] = {
    "float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "half": 2, "float": 4, "double": 8,
    "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8,
    "bool": 1, "complex64": 8, "complex128": 16,
}


def dtype_size(dtype: object) -> int | None:
    """Bytes per element of ``dtype`` (either spelling), None for unknown or variable-size ones."""
    if not isinstance(dtype, str):
        return None
    name = dtype.lower().removeprefix("dt_").removesuffix("_ref")
    return DTYPE_BYTES.get(name)


def output_shape(dims: Sequence[int | None] | None, dtype: object, nbytes: int | None) -> tuple[int, ...] | None:
    """The shape as recorded, or ``(bytes / dtype size,)`` when the shape is absent or partly unknown."""
    known_dtype = dtype is not None  # a record without a dtype (RecvTensor) has no real shape
    if dims is not None and known_dtype and all(d is not None and d >= 0 for d in dims):
        return tuple(int(d) for d in dims if d is not None)
    size = dtype_size(dtype)
    if size and nbytes is not None and nbytes >= 0:
        return (nbytes // size,)
    return None
