"""Write the narrow-float goldens: modules converting every bf16/f16 bit pattern, every f8 pattern
and hostile f32 values, and binary ops on bf16/f16/f8 pairs, with XLA CPU's outputs (jaxlib), for
tests/interpreter/test_narrow_speed.py.

    python tests/data/narrow/make_goldens.py

Each binary-op dtype has a "clean" case (no NaN: zeros of both signs, subnormals, overflow, equal
pairs; the fast paths keep it) and a "hostile" one (random bit patterns: NaN of both signs,
infinities; the generic path decides NaN signs).  Arrays have at least 4096 elements so that the
table conversions run.
"""
from __future__ import annotations

import sys
from pathlib import Path

import ml_dtypes
import numpy as np

HERE = Path(__file__).resolve().parent
T = {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "f32": np.float32, "f8e4m3fn": ml_dtypes.float8_e4m3fn,
     "f8e5m2": ml_dtypes.float8_e5m2, "f8e4m3fnuz": ml_dtypes.float8_e4m3fnuz}


def _convert_module(name, src, n, dsts):
    lines = [f"HloModule {name}\n\nENTRY main {{", f"  x = {src}[{n}] parameter(0)"]
    for k, d in enumerate(dsts):
        lines.append(f"  c{k} = {d}[{n}] convert(x)")
    shapes = ", ".join(f"{d}[{n}]" for d in dsts)
    lines.append(f"  ROOT t = ({shapes}) tuple({', '.join(f'c{k}' for k in range(len(dsts)))})")
    return "\n".join(lines) + "\n}\n"


BINARY = ["add", "subtract", "multiply", "divide", "maximum", "minimum"]


def _binary_module(name, et, n):
    lines = [f"HloModule {name}\n\nENTRY main {{", f"  a = {et}[{n}] parameter(0)", f"  b = {et}[{n}] parameter(1)"]
    outs = []
    for op in BINARY:
        lines.append(f"  {op} = {et}[{n}] {op}(a, b)")
        outs.append((op, f"{et}[{n}]"))
    for d in ("GT", "EQ", "LE"):
        lines.append(f"  cmp{d} = pred[{n}] compare(a, b), direction={d}")
        outs.append((f"cmp{d}", f"pred[{n}]"))
    # a parameter, not cmpGT: XLA fuses a bf16 select with the compare into f32 code that makes its
    # NaNs canonical (0x7FC0), while a select alone copies bf16 bits (measured)
    lines.insert(3, f"  p = pred[{n}] parameter(2)")
    lines.append(f"  sel = {et}[{n}] select(p, a, b)")
    outs.append(("sel", f"{et}[{n}]"))
    lines.append(f"  ROOT t = ({', '.join(s for _, s in outs)}) tuple({', '.join(o for o, _ in outs)})")
    return "\n".join(lines) + "\n}\n"


def _bits(dt, n, rng):
    nb = 8 * np.dtype(dt).itemsize
    return rng.integers(0, 1 << nb, n, dtype=np.uint32).astype(np.uint16 if nb == 16 else np.uint8).view(dt)


def _clean(et, n, rng):
    """No NaN and no infinity: values of several scales, +-0, subnormals (bf16/f16), the largest
    finite values (so sums and products overflow), equal and opposite pairs."""
    dt = T[et]
    fi = ml_dtypes.finfo(dt)
    v = rng.standard_normal(n) * np.exp2(rng.integers(-8, 8, n))
    r = rng.random(n)
    v = np.where(r < 0.08, 0.0, v)
    v = np.where((r >= 0.08) & (r < 0.12), -0.0, v)
    v = np.where((r >= 0.12) & (r < 0.2), float(fi.smallest_subnormal) * rng.integers(-5, 6, n), v)
    v = np.where((r >= 0.2) & (r < 0.24), float(fi.max) * rng.choice([-1, 1], n), v)
    v = np.where((r >= 0.24) & (r < 0.3), float(fi.smallest_normal) * rng.choice([-1, 1.5], n), v)
    return v.astype(np.float32).astype(dt)


def cases():
    rng = np.random.default_rng(20261126)
    out = []
    for src, dsts in [("bf16", ["f8e4m3fn", "f8e5m2", "f16", "f32"]), ("f16", ["f8e4m3fn", "f8e5m2", "bf16", "f32"])]:
        x = np.arange(1 << 16, dtype=np.uint16).view(T[src])
        out.append((f"convert_{src}_all", _convert_module(f"convert_{src}_all", src, 1 << 16, dsts), [x]))
    for src in ("f8e4m3fn", "f8e5m2", "f8e4m3fnuz"):
        x = np.tile(np.arange(256, dtype=np.uint8), 16).view(T[src])
        out.append((f"convert_{src}_all", _convert_module(f"convert_{src}_all", src, 4096,
                                                          ["bf16", "f16", "f32", "f8e4m3fn" if src != "f8e4m3fn" else "f8e5m2"]),
                    [x]))
    # f32: random bit patterns, and values next to the f8 types' rounding boundaries
    n = 16384
    bits = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    e = rng.integers(127 - 20, 127 + 18, n // 2).astype(np.uint32)        # the f8 exponent ranges
    m = rng.integers(0, 8, n // 2).astype(np.uint32) << np.uint32(20)      # 3 mantissa bits
    low = rng.choice(np.array([0x80000, 0x7FFFF, 0x80001, 0x40000, 0xC0000, 1, 0], np.uint32), n // 2)
    sign = rng.integers(0, 2, n // 2).astype(np.uint32) << np.uint32(31)
    bits[: n // 2] = sign | (e << np.uint32(23)) | m | low
    x = bits.view(np.float32)
    out.append(("convert_f32_narrow", _convert_module("convert_f32_narrow", "f32", n,
                                                      ["f8e4m3fn", "f8e5m2", "f8e4m3fnuz", "bf16", "f16"]), [x]))
    for et in ("bf16", "f16", "f8e4m3fn", "f8e5m2"):
        n = 4096
        a, b = _clean(et, n, rng), _clean(et, n, rng)
        b[: n // 8] = a[: n // 8]                                            # equal pairs
        b[n // 8: n // 4] = -a[n // 8: n // 4]                               # opposite pairs
        name = f"binary_{et}_clean"
        out.append((name, _binary_module(name, et, n), [a, b, rng.random(n) < 0.5]))
        a, b = _bits(T[et], n, rng), _bits(T[et], n, rng)
        name = f"binary_{et}_hostile"
        out.append((name, _binary_module(name, et, n), [a, b, rng.random(n) < 0.5]))
    return out


def _storable(a):
    """ml_dtypes arrays as raw bytes (np.load cannot read the f8 types' descriptors back); the
    test views them as the module's types."""
    a = np.asarray(a)
    return a.view(f"V{a.dtype.itemsize}") if a.dtype.type.__module__.startswith("ml_dtypes") or a.dtype.kind == "V" else a


def main():
    sys.path.insert(0, str(HERE.parents[2]))
    from hlo_cli.tools.xla_reference import run_with_xla
    for name, text, args in cases():
        outs = run_with_xla(text, args)
        (HERE / f"{name}.hlo").write_text(text)
        np.savez_compressed(HERE / f"{name}.npz", **{f"arg{k}": _storable(a) for k, a in enumerate(args)},
                            **{f"out{k}": _storable(o) for k, o in enumerate(outs)})
        print(name, [(o.dtype, o.shape) for o in outs])


if __name__ == "__main__":
    main()
