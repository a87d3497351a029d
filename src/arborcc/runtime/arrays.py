"""What the data plane needs to know about a caller's array: its address, its element
count and type; numpy arrays and torch CPU tensors are read without copies.

Element types: float32, float64, float16, bfloat16, int32, int64, uint8 (numpy has no
bfloat16: pass a torch tensor, or wrap a uint16 numpy array of bfloat16 bit patterns
in :class:`BFloat16`).
Reduction operators: sum, prod, min, max, and avg for the floating-point types (the sum
divided by the rank count, as NCCL's ncclAvg).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from arborcc.errors import InputError
import arborcc.runtime.native as native

#: element type name -> (data-plane code, bytes per element)
DTYPES: dict[str, tuple[int, int]] = {
    "float32": (0, 4), "float64": (1, 8), "float16": (2, 2), "bfloat16": (3, 2),
    "int32": (4, 4), "int64": (5, 8), "uint8": (6, 1),
}
FLOAT_DTYPES = frozenset({"float32", "float64", "float16", "bfloat16"})
#: reduction operator name -> data-plane code (avg runs as sum, then a division)
OPS: dict[str, int] = {"sum": 0, "prod": 1, "min": 2, "max": 3, "avg": 0}

_TORCH_NAMES = {"torch.float32": "float32", "torch.float64": "float64", "torch.float16": "float16",
                "torch.bfloat16": "bfloat16", "torch.int32": "int32", "torch.int64": "int64",
                "torch.uint8": "uint8"}


@dataclass(frozen=True)
class BFloat16:
    """A uint16 numpy array whose elements are bfloat16 bit patterns."""

    bits: np.ndarray


class ArrayRef(NamedTuple):
    """A contiguous, writable view of a caller's array (kept alive by ``owner``)."""

    address: int
    count: int
    dtype: str
    owner: object

    @property
    def nbytes(self) -> int:
        return self.count * DTYPES[self.dtype][1]

    @property
    def dtype_code(self) -> int:
        return DTYPES[self.dtype][0]


_NUMPY_NAMES = {np.dtype(name): name for name in DTYPES if name != "bfloat16"}


def array_ref(obj: object, what: str, dtype: str | None = None) -> ArrayRef:
    """The :class:`ArrayRef` of a numpy array or torch CPU tensor; ``what`` names it in errors."""
    if type(obj) is np.ndarray:  # the fast path: one C call checks and finds the memory
        name = dtype or _NUMPY_NAMES.get(obj.dtype)
        if name is not None:
            try:
                address = native.buffer_address(obj)[0]
            except (BufferError, ValueError, TypeError):
                pass  # not contiguous or read-only: the checks below say which
            else:
                return ArrayRef(address, obj.size, name, obj)
    if type(obj).__module__.startswith("torch"):
        return _torch_ref(obj, what)
    if isinstance(obj, BFloat16):
        if obj.bits.dtype != np.uint16:
            raise InputError(f"bfloat16 bits must be a uint16 array, not {obj.bits.dtype}", source=what)
        return array_ref(obj.bits, what, "bfloat16")
    if not isinstance(obj, np.ndarray):
        raise InputError(f"expected a numpy array or a torch CPU tensor, got {type(obj).__name__}", source=what)
    if not obj.flags.c_contiguous:
        raise InputError("the array is not contiguous", source=what)
    if not obj.flags.writeable:
        raise InputError("the array is read-only", source=what)
    name = dtype or obj.dtype.name
    if name not in DTYPES:
        raise InputError(f"element type {obj.dtype.name} is not supported (supported: {', '.join(DTYPES)})",
                         source=what)
    if name != "bfloat16" and obj.dtype.name != name:
        raise InputError(f"the array holds {obj.dtype.name}, not {name}", source=what)
    return ArrayRef(obj.ctypes.data, obj.size, name, obj)


def _torch_ref(tensor, what: str) -> ArrayRef:
    if tensor.device.type != "cpu":
        raise InputError(f"the tensor is on {tensor.device}; the shared-memory runtime needs CPU tensors", source=what)
    if not tensor.is_contiguous():
        raise InputError("the tensor is not contiguous", source=what)
    name = _TORCH_NAMES.get(str(tensor.dtype))
    if name is None:
        raise InputError(f"element type {tensor.dtype} is not supported (supported: {', '.join(DTYPES)})",
                         source=what)
    return ArrayRef(tensor.data_ptr(), tensor.numel(), name, tensor)


def check_op(op: str, dtype: str) -> int:
    """The data-plane code of reduction ``op`` on ``dtype`` (InputError if undefined)."""
    if op not in OPS:
        raise InputError(f"unknown reduction {op!r} (known: {', '.join(OPS)})", source="op")
    if op == "avg" and dtype not in FLOAT_DTYPES:
        raise InputError(f"avg is defined for floating-point types only, not {dtype}", source="op")
    return OPS[op]
