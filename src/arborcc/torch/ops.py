"""torch's element types and reduction operators, as arborcc's runtime names them.

The shared-memory runtime reduces float32, float64, float16, bfloat16, int32, int64 and
uint8 with sum, prod, min, max, and avg for the floating-point types
(:mod:`arborcc.runtime.arrays`). Anything else (bool, int8, int16, complex, the bitwise
operators, premultiplied sums) is not arborcc's: the backend hands it to gloo.
"""

from __future__ import annotations

#: torch dtype name (``str(tensor.dtype)``) -> the runtime's element type
DTYPE_NAMES = {"torch.float32": "float32", "torch.float64": "float64", "torch.float16": "float16",
               "torch.bfloat16": "bfloat16", "torch.int32": "int32", "torch.int64": "int64", "torch.uint8": "uint8"}
FLOAT_NAMES = frozenset({"float32", "float64", "float16", "bfloat16"})
#: torch's ReduceOp.RedOpType member name -> the runtime's reduction
REDUCTION_NAMES = {"SUM": "sum", "PRODUCT": "prod", "MIN": "min", "MAX": "max", "AVG": "avg"}


#: filled on first use (they need torch): RedOpType value -> reduction; torch dtype -> name
_tables: dict = {}


def tables() -> dict:
    if not _tables:
        import torch
        import torch.distributed as dist

        kinds = dist.ReduceOp.RedOpType
        _tables["ops"] = {int(getattr(kinds, k)): v for k, v in REDUCTION_NAMES.items()}
        _tables["dtypes"] = {getattr(torch, name.split(".")[1]): v for name, v in DTYPE_NAMES.items()}
    return _tables


def reduction_name(reduce_op) -> str | None:
    """The runtime's name of a torch ``ReduceOp`` (or ``RedOpType``), None when it has none."""
    kind = getattr(reduce_op, "op", reduce_op)
    return tables()["ops"].get(int(kind))


def reduction_label(reduce_op) -> str:
    """torch's name of a ``ReduceOp`` (or ``RedOpType``): ``SUM``, ``BAND``, ``PREMUL_SUM``..."""
    import torch.distributed as dist

    kind = getattr(reduce_op, "op", reduce_op)
    return dist.ReduceOp.RedOpType(int(kind)).name


def dtype_label(dtype) -> str:
    """``int8`` for ``torch.int8``."""
    return str(dtype).removeprefix("torch.")


def unsupported(tensors, op: str | None = "sum") -> str | None:
    """Why arborcc cannot run a collective on ``tensors`` with reduction ``op`` (None: it can).

    ``op`` None means the caller's reduction has no arborcc equivalent."""
    if op is None:
        return "reduction operator"
    dtypes = tables()["dtypes"]
    for t in tensors:
        if not t.is_cpu:
            return f"device {t.device.type}"
        name = dtypes.get(t.dtype)
        if name is None:
            return f"dtype {dtype_label(t.dtype)}"
        if op == "avg" and name not in FLOAT_NAMES:
            return f"avg of {name}"
        if not t.is_contiguous():
            return "non-contiguous tensor"
    return None
