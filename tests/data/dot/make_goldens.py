"""Regenerate the dot goldens of tests/interpreter/test_dot_types_xla.py: for each element-type
family one dot of random operands, its inputs and XLA CPU's result (jaxlib, through
hlo_cli.tools.xla_reference), saved as CASE.npz next to this file (narrow types stored as raw bytes).

    python tests/data/dot/make_goldens.py
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from hlo_cli.ir.dtypes import ELEMENT_TYPES  # noqa: E402

# (name, lhs type, rhs type, result type); every dot is [2,8,64] x [2,64,16] with batch dim 0
CASES = [
    ("bf16_f32", "bf16", "bf16", "f32"),
    ("bf16_bf16", "bf16", "bf16", "bf16"),
    ("f16_f16", "f16", "f16", "f16"),
    ("f16_f32", "f16", "f16", "f32"),
    ("f8e5m2_f8e4m3fn_bf16", "f8e5m2", "f8e4m3fn", "bf16"),
    ("f8e4m3fn_f32", "f8e4m3fn", "f8e4m3fn", "f32"),
    ("f8e4m3fnuz_f8e5m2fnuz_f32", "f8e4m3fnuz", "f8e5m2fnuz", "f32"),
    ("f8e4m3b11fnuz_bf16", "f8e4m3b11fnuz", "f8e4m3b11fnuz", "bf16"),
    ("f8e3m4_f8e4m3_f32", "f8e3m4", "f8e4m3", "f32"),
    ("s8_s32", "s8", "s8", "s32"),
    ("u8_s8_s32", "u8", "s8", "s32"),
    ("s8_s8", "s8", "s8", "s8"),
    ("s16_s32", "s16", "s16", "s32"),
    ("u16_u32", "u16", "u16", "u32"),
    ("s32_s32", "s32", "s32", "s32"),          # full-range values: beyond f64's 53 bits
    ("u32_u32", "u32", "u32", "u32"),
    ("s64_s64", "s64", "s64", "s64"),
    ("s32_f32", "s32", "s32", "f32"),
    ("f64_f64", "f64", "f64", "f64"),
    ("c64_c64", "c64", "c64", "c64"),
]
B, M, K, N = 2, 8, 64, 16


def dtype(name: str) -> np.dtype:
    return np.dtype(ELEMENT_TYPES[name].numpy)


def text(lt: str, rt: str, ot: str) -> str:
    return (f"HloModule m\nENTRY e {{\n  a = {lt}[{B},{M},{K}] parameter(0)\n  b = {rt}[{B},{K},{N}] parameter(1)\n"
            f"  ROOT d = {ot}[{B},{M},{N}] dot(a, b), lhs_batch_dims={{0}}, lhs_contracting_dims={{2}}, "
            f"rhs_batch_dims={{0}}, rhs_contracting_dims={{1}}\n}}\n")


def operand(rng, name: str, shape) -> np.ndarray:
    d = dtype(name)
    if d.kind in "iu":
        info = np.iinfo(d)
        return rng.integers(int(info.min), int(info.max), shape, dtype=np.int64, endpoint=True).astype(d)
    if d.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(d)
    return (rng.standard_normal(shape) * 2).astype(d)


def raw(x: np.ndarray) -> np.ndarray:
    """ml_dtypes arrays as bytes (npz cannot hold them); NumPy's own types as they are."""
    return x.view(np.uint8 if x.dtype.itemsize == 1 else np.uint16) if x.dtype.kind == "V" or \
        x.dtype.name.startswith(("bfloat", "float8", "float4")) else x


def main():
    from hlo_cli.tools.xla_reference import run_with_xla
    rng = np.random.default_rng(20261126)
    for name, lt, rt, ot in CASES:
        a, b = operand(rng, lt, (B, M, K)), operand(rng, rt, (B, K, N))
        out = run_with_xla(text(lt, rt, ot), [a, b])[0]
        np.savez_compressed(HERE / f"{name}.npz", a=raw(a), b=raw(b), out=raw(out))
        print(name, out.dtype, out.shape)


if __name__ == "__main__":
    main()
