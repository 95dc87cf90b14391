"""Element types: HLO spelling <-> NumPy / ml_dtypes dtype, width and kind.

NumPy and ml_dtypes are imported on the first use of a dtype (`ElementType.numpy`, `from_numpy`), not
with this module: reading, checking and printing HLO text never need them, and importing them is a
tenth of a second of every cold `hlo check`."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property


@dataclass(frozen=True)
class ElementType:
    name: str          # HLO spelling, e.g. "bf16"
    kind: str          # pred | int | uint | float | complex | token | opaque
    bits: int          # storage width in bits (0 for token/opaque)
    # where the dtype lives: ("numpy" | "ml_dtypes", attribute name), or None (token, opaque)
    dtype_source: tuple[str, str] | None = field(default=None, repr=False)

    @cached_property
    def numpy(self):
        """The NumPy dtype (None for token and opaque)."""
        return _load(self.dtype_source)

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_integral(self) -> bool:
        return self.kind in ("int", "uint")

    @property
    def is_array_type(self) -> bool:
        return self.kind not in ("token", "opaque")

    def __repr__(self) -> str:
        return self.name


def _load(source):
    if source is None:
        return None
    import numpy as np
    if source[0] == "numpy":
        return np.dtype(getattr(np, source[1]))
    import ml_dtypes
    return np.dtype(getattr(ml_dtypes, source[1]))


def _et(name: str, kind: str, bits: int, module: str | None = None, attr: str | None = None) -> ElementType:
    return ElementType(name, kind, bits, None if module is None else (module, attr))


_TABLE = [
    _et("pred", "pred", 8, "numpy", "bool_"),
    _et("s1", "int", 1, "ml_dtypes", "int1"), _et("s2", "int", 2, "ml_dtypes", "int2"),
    _et("s4", "int", 4, "ml_dtypes", "int4"), _et("s8", "int", 8, "numpy", "int8"),
    _et("s16", "int", 16, "numpy", "int16"), _et("s32", "int", 32, "numpy", "int32"),
    _et("s64", "int", 64, "numpy", "int64"),
    _et("u1", "uint", 1, "ml_dtypes", "uint1"), _et("u2", "uint", 2, "ml_dtypes", "uint2"),
    _et("u4", "uint", 4, "ml_dtypes", "uint4"), _et("u8", "uint", 8, "numpy", "uint8"),
    _et("u16", "uint", 16, "numpy", "uint16"), _et("u32", "uint", 32, "numpy", "uint32"),
    _et("u64", "uint", 64, "numpy", "uint64"),
    _et("f16", "float", 16, "numpy", "float16"), _et("bf16", "float", 16, "ml_dtypes", "bfloat16"),
    _et("f32", "float", 32, "numpy", "float32"), _et("f64", "float", 64, "numpy", "float64"),
    _et("f8e5m2", "float", 8, "ml_dtypes", "float8_e5m2"),
    _et("f8e4m3", "float", 8, "ml_dtypes", "float8_e4m3"),
    _et("f8e4m3fn", "float", 8, "ml_dtypes", "float8_e4m3fn"),
    _et("f8e4m3b11fnuz", "float", 8, "ml_dtypes", "float8_e4m3b11fnuz"),
    _et("f8e5m2fnuz", "float", 8, "ml_dtypes", "float8_e5m2fnuz"),
    _et("f8e4m3fnuz", "float", 8, "ml_dtypes", "float8_e4m3fnuz"),
    _et("f8e3m4", "float", 8, "ml_dtypes", "float8_e3m4"),
    _et("f8e8m0fnu", "float", 8, "ml_dtypes", "float8_e8m0fnu"),
    _et("f6e2m3fn", "float", 6, "ml_dtypes", "float6_e2m3fn"),
    _et("f6e3m2fn", "float", 6, "ml_dtypes", "float6_e3m2fn"),
    _et("f4e2m1fn", "float", 4, "ml_dtypes", "float4_e2m1fn"),
    _et("c64", "complex", 64, "numpy", "complex64"), _et("c128", "complex", 128, "numpy", "complex128"),
    _et("token", "token", 0), _et("opaque", "opaque", 0),
]

ELEMENT_TYPES: dict[str, ElementType] = {t.name: t for t in _TABLE}
_BY_NUMPY: dict = {}        # numpy dtype -> ElementType, filled on the first from_numpy


def element_type(name: str) -> ElementType | None:
    return ELEMENT_TYPES.get(name)


def from_numpy(dtype) -> ElementType | None:
    import numpy as np
    if not _BY_NUMPY:
        _BY_NUMPY.update({t.numpy: t for t in _TABLE if t.numpy is not None})
    return _BY_NUMPY.get(np.dtype(dtype))
