"""Write the window goldens: one small HLO module per case (reduce-window, select-and-scatter, pad,
reverse) with its inputs and XLA CPU's outputs (jaxlib), for tests/interpreter/test_window_xla.py.

    python tests/data/window/make_goldens.py

Inputs are small and hostile: ties, NaN of both signs, +-inf, +-0, subnormals, padding, base and
window dilation, overlapping windows.  Rerun after changing a case; the test also checks each golden
against live XLA when jaxlib is installed.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import ml_dtypes
import numpy as np

HERE = Path(__file__).resolve().parent
TYPES = {"f32": np.float32, "f64": np.float64, "bf16": ml_dtypes.bfloat16, "f16": np.float16,
         "s32": np.int32, "u8": np.uint8, "s8": np.int8}


def _reducer(name, et, op, swapped=False):
    a, b = ("b", "a") if swapped else ("a", "b")
    return (f"{name} {{\n  a = {et}[] parameter(0)\n  b = {et}[] parameter(1)\n"
            f"  ROOT r = {et}[] {op}({a}, {b})\n}}\n")


def _compare(name, et, direction):
    return (f"{name} {{\n  a = {et}[] parameter(0)\n  b = {et}[] parameter(1)\n"
            f"  ROOT r = pred[] compare(a, b), direction={direction}\n}}\n")


def _shape(et, dims):
    return f"{et}[{','.join(map(str, dims))}]"


def hostile(et, dims, rng, nan=True, specials=True):
    """Small integers (many ties) with NaN of both signs, +-inf, +-0 and subnormals sprinkled in."""
    dt = np.dtype(TYPES[et])
    if dt.kind in "iu":
        info = np.iinfo(dt)
        v = rng.integers(max(info.min, -100), min(info.max, 100) + 1, dims)
        big = rng.random(dims) < 0.1
        v = np.where(big, rng.integers(info.min, int(info.max) + 1, dims), v)
        return v.astype(dt)
    v = rng.integers(-3, 4, dims).astype(np.float64)
    if specials:
        r = rng.random(dims)
        tiny = {"f32": 1e-40, "f64": 1e-310, "bf16": 1e-39, "f16": 1e-6}[et]
        v = np.where(r < 0.06, -0.0, v)
        v = np.where((r >= 0.06) & (r < 0.1), tiny * rng.choice([-1, 1], dims), v)
        v = np.where((r >= 0.1) & (r < 0.13), np.inf * rng.choice([-1, 1], dims), v)
        if nan:
            v = np.where((r >= 0.13) & (r < 0.16), np.nan * rng.choice([-1, 1], dims), v)
    with np.errstate(invalid="ignore"):
        out = v.astype(np.float32).astype(dt) if dt != np.float64 else v
    if nan and specials:                     # -NaN keeps its sign through the conversions
        neg = (np.isnan(v)) & np.signbit(v)
        out = np.where(neg, -np.abs(out.astype(np.float64)), out).astype(dt) if dt != np.float64 else out
    return np.asarray(out, dt)


def normal(et, dims, rng):
    return rng.standard_normal(dims).astype(TYPES[et])


def reduce_window(name, et, dims, window, op, init, data, swapped=False):
    """A reduce-window of one operand, the init value a parameter."""
    text = (f"HloModule {name}\n\n" + _reducer("red", et, op, swapped) +
            f"\nENTRY main {{\n  x = {_shape(et, dims)} parameter(0)\n  init = {et}[] parameter(1)\n"
            f"  ROOT rw = {{OUT}} reduce-window(x, init), window={{{window}}}, to_apply=red\n}}\n")
    return name, text, [data, np.asarray(init, TYPES[et])]


def select_and_scatter(name, et, dims, src_dims, window, direction, init, data, source, scatter="add"):
    text = (f"HloModule {name}\n\n" + _compare("sel", et, direction) + "\n" + _reducer("sct", et, scatter) +
            f"\nENTRY main {{\n  x = {_shape(et, dims)} parameter(0)\n  s = {_shape(et, src_dims)} parameter(1)\n"
            f"  init = {et}[] parameter(2)\n"
            f"  ROOT ss = {_shape(et, dims)} select-and-scatter(x, s, init), window={{{window}}}, "
            f"select=sel, scatter=sct\n}}\n")
    return name, text, [data, source, np.asarray(init, TYPES[et])]


def _expanded_select(name, data):
    dims = ",".join(map(str, data.shape))
    out = "2,5,5,3"
    text = f"""HloModule {name}

pick {{
  v0 = f32[] parameter(0)
  a0 = s32[] parameter(1)
  b0 = s32[] parameter(2)
  v1 = f32[] parameter(3)
  a1 = s32[] parameter(4)
  b1 = s32[] parameter(5)
  none = s32[] constant(-1)
  have0 = pred[] compare(a0, none), direction=NE
  have1 = pred[] compare(a1, none), direction=NE
  ge = pred[] compare(v0, v1), direction=GE
  no1 = pred[] not(have1)
  both = pred[] and(ge, have0)
  keep = pred[] or(both, no1)
  v = f32[] select(keep, v0, v1)
  a = s32[] select(keep, a0, a1)
  b = s32[] select(keep, b0, b1)
  ROOT t = (f32[], s32[], s32[]) tuple(v, a, b)
}}

ENTRY main {{
  x = f32[{dims}] parameter(0)
  i1 = s32[{dims}] iota(), iota_dimension=1
  i2 = s32[{dims}] iota(), iota_dimension=2
  c = f32[] constant(-inf)
  m = s32[] constant(-1)
  ROOT rw = (f32[{out}], s32[{out}], s32[{out}]) reduce-window(x, i1, i2, c, m, m), window={{size=1x3x3x1 stride=1x2x2x1 pad=0_0x1_1x1_1x0_0}}, to_apply=pick
}}
"""
    return name, text, [data]


def pad(name, et, dims, padding, data, value):
    text = (f"HloModule {name}\n\nENTRY main {{\n  x = {_shape(et, dims)} parameter(0)\n  v = {et}[] parameter(1)\n"
            f"  ROOT p = {{OUT}} pad(x, v), padding={padding}\n}}\n")
    return name, text, [data, np.asarray(value, TYPES[et])]


def reverse(name, et, dims, rev, data):
    text = (f"HloModule {name}\n\nENTRY main {{\n  x = {_shape(et, dims)} parameter(0)\n"
            f"  ROOT r = {_shape(et, dims)} reverse(x), dimensions={{{rev}}}\n}}\n")
    return name, text, [data]


def cases():
    rng = np.random.default_rng(20261126)
    d4 = (2, 9, 9, 3)
    pool = "size=1x3x3x1 stride=1x2x2x1 pad=0_0x1_1x1_1x0_0"
    same1 = "size=1x3x3x1 pad=0_0x1_1x1_1x0_0"
    out = []
    for op, init in (("maximum", -np.inf), ("minimum", np.inf)):
        out.append(reduce_window(f"rw_{op}_f32_pool", "f32", d4, pool, op, init, hostile("f32", d4, rng)))
        out.append(reduce_window(f"rw_{op}_f32_swapped", "f32", d4, pool, op, init, hostile("f32", d4, rng),
                                 swapped=True))
    out.append(reduce_window("rw_max_f32_init0", "f32", d4, pool, "maximum", 0.0, hostile("f32", d4, rng)))
    out.append(reduce_window("rw_max_f32_negzero", "f32", (1, 6, 6, 2), "size=1x2x2x1 stride=1x1x1x1", "maximum",
                             -np.inf, np.where(rng.random((1, 6, 6, 2)) < 0.7, -0.0,
                                               rng.choice([0.0, -1.0, 1e-40, -1e-40], (1, 6, 6, 2))).astype(np.float32)))
    out.append(reduce_window("rw_min_f32_zeros", "f32", (1, 6, 6, 2), "size=1x2x2x1 stride=1x1x1x1", "minimum",
                             np.inf, rng.choice([0.0, -0.0, 1.0, 1e-40, -1e-40], (1, 6, 6, 2)).astype(np.float32)))
    out.append(reduce_window("rw_max_f32_nonan", "f32", d4, pool, "maximum", -np.inf,
                             hostile("f32", d4, rng, nan=False)))
    out.append(reduce_window("rw_add_f32_same", "f32", (2, 8, 8, 4), same1, "add", 0.0, normal("f32", (2, 8, 8, 4), rng)))
    out.append(reduce_window("rw_add_f32_init", "f32", (2, 8, 8, 4), pool, "add", 1.5, normal("f32", (2, 8, 8, 4), rng)))
    out.append(reduce_window("rw_add_f32_negzero_init", "f32", (2, 8, 8, 4), pool, "add", -0.0,
                             hostile("f32", (2, 8, 8, 4), rng, nan=False)))
    out.append(reduce_window("rw_add_f32_hostile", "f32", d4, pool, "add", 0.0, hostile("f32", d4, rng)))
    out.append(reduce_window("rw_mul_f32", "f32", d4, pool, "multiply", 1.0, hostile("f32", d4, rng, nan=False)))
    out.append(reduce_window("rw_add_f32_wdil", "f32", (2, 11, 10, 3),
                             "size=1x3x2x1 stride=1x1x2x1 pad=0_0x2_1x0_2x0_0 rhs_dilate=1x2x3x1", "add", 0.0,
                             normal("f32", (2, 11, 10, 3), rng)))
    out.append(reduce_window("rw_add_f32_bdil", "f32", (2, 5, 6, 3),
                             "size=1x3x3x1 stride=1x2x1x1 pad=0_0x1_2x2_0x0_0 lhs_dilate=1x2x3x1", "add", 0.25,
                             normal("f32", (2, 5, 6, 3), rng)))
    out.append(reduce_window("rw_max_f32_dil", "f32", (2, 5, 6, 3),
                             "size=1x2x3x1 stride=1x3x2x1 pad=0_0x2_2x1_1x0_0 lhs_dilate=1x3x2x1 rhs_dilate=1x2x1x1",
                             "maximum", -np.inf, hostile("f32", (2, 5, 6, 3), rng)))
    out.append(reduce_window("rw_add_f32_global", "f32", (2, 7, 7, 8), "size=1x7x7x1 stride=1x7x7x1", "add", 0.0,
                             normal("f32", (2, 7, 7, 8), rng)))
    out.append(reduce_window("rw_add_f64", "f64", d4, pool, "add", 0.0, normal("f64", d4, rng)))
    out.append(reduce_window("rw_max_s32", "s32", d4, pool, "maximum", np.iinfo(np.int32).min, hostile("s32", d4, rng)))
    out.append(reduce_window("rw_add_s32_wrap", "s32", d4, pool, "add", 7, hostile("s32", d4, rng)))
    out.append(reduce_window("rw_min_u8", "u8", d4, pool, "minimum", 255, hostile("u8", d4, rng)))
    out.append(reduce_window("rw_add_s8", "s8", d4, same1, "add", 0, hostile("s8", d4, rng)))
    out.append(reduce_window("rw_add_bf16", "bf16", d4, same1, "add", 0.0, hostile("bf16", d4, rng)))
    out.append(reduce_window("rw_max_bf16", "bf16", d4, pool, "maximum", -np.inf, hostile("bf16", d4, rng)))
    out.append(reduce_window("rw_add_f16", "f16", d4, pool, "add", 0.5, hostile("f16", d4, rng)))
    out.append(reduce_window("rw_max_f16_big", "f16", (4, 16, 16, 8), "size=1x2x2x1 stride=1x2x2x1", "maximum",
                             -np.inf, hostile("f16", (4, 16, 16, 8), rng)))
    # select-and-scatter: max-pool and min-pool gradients, overlapping windows, padding in the window
    s4 = (2, 5, 5, 3)
    for et in ("f32", "f64"):
        for direction in ("GE", "GT", "LE", "LT"):
            out.append(select_and_scatter(f"ss_{direction.lower()}_{et}", et, d4, s4, pool, direction, 0.0,
                                          hostile(et, d4, rng), normal(et, s4, rng)))
    out.append(select_and_scatter("ss_ge_f32_nonan", "f32", d4, s4, pool, "GE", 0.0,
                                  hostile("f32", d4, rng, nan=False), normal("f32", s4, rng)))
    out.append(select_and_scatter("ss_ge_f32_ties_init", "f32", d4, s4, pool, "GE", -0.0,
                                  rng.integers(0, 2, d4).astype(np.float32), hostile("f32", s4, rng)))
    out.append(select_and_scatter("ss_ge_f32_unpadded", "f32", (2, 9, 9, 3), (2, 4, 4, 3), "size=1x3x3x1 stride=1x2x2x1",
                                  "GE", 0.0, rng.integers(0, 3, (2, 9, 9, 3)).astype(np.float32),
                                  normal("f32", (2, 4, 4, 3), rng)))
    out.append(select_and_scatter("ss_ge_f32_stride1", "f32", (1, 6, 6, 2), (1, 6, 6, 2),
                                  "size=1x3x3x1 pad=0_0x1_1x1_1x0_0", "GE", 0.0,
                                  rng.integers(0, 2, (1, 6, 6, 2)).astype(np.float32),
                                  normal("f32", (1, 6, 6, 2), rng)))
    out.append(select_and_scatter("ss_ge_s32", "s32", d4, s4, pool, "GE", 3, hostile("s32", d4, rng),
                                  hostile("s32", s4, rng)))
    out.append(select_and_scatter("ss_gt_bf16", "bf16", d4, s4, pool, "GT", 0.0, hostile("bf16", d4, rng),
                                  normal("bf16", s4, rng)))
    out.append(select_and_scatter("ss_ge_f16", "f16", d4, s4, pool, "GE", 0.0, hostile("f16", d4, rng),
                                  normal("f16", s4, rng)))
    out.append(select_and_scatter("ss_ge_f32_max_scatter", "f32", d4, s4, pool, "GE", -np.inf,
                                  hostile("f32", d4, rng), hostile("f32", s4, rng), scatter="maximum"))
    # pad and reverse
    x = hostile("f32", (3, 4, 5), rng)
    out.append(pad("pad_edges", "f32", (3, 4, 5), "1_2x0_1x2_0", x, -1.5))
    out.append(pad("pad_negative", "f32", (3, 4, 5), "-1_1x1_-2x-2_-1", x, 7.0))
    out.append(pad("pad_interior", "f32", (3, 4, 5), "0_0_2x1_1_1x0_0_0", x, 0.0))
    out.append(pad("pad_interior_negative", "f32", (3, 4, 5), "-2_1_1x-1_-3_2x2_-4_1", x, -0.0))
    out.append(pad("pad_bf16", "bf16", (3, 4, 5), "1_-1_1x0_2x0_0_3", hostile("bf16", (3, 4, 5), rng), 2.0))
    out.append(pad("pad_s8", "s8", (3, 4, 5), "1_1_1x-1_0x0_2", hostile("s8", (3, 4, 5), rng), -7))
    out.append(reverse("reverse_some", "f32", (2, 3, 4, 5), "1,2", hostile("f32", (2, 3, 4, 5), rng)))
    out.append(reverse("reverse_all_s32", "s32", (2, 3, 4), "0,1,2", hostile("s32", (2, 3, 4), rng)))
    # the in-place paths without NaN: relu-like data (many +0 ties), narrow floats computed in f32
    relu = np.maximum(normal("f32", d4, rng), 0)
    out.append(reduce_window("rw_max_f32_relu", "f32", d4, pool, "maximum", -np.inf, relu))
    for et in ("bf16", "f16"):
        out.append(reduce_window(f"rw_max_{et}_nonan", et, d4, pool, "maximum", -np.inf,
                                 hostile(et, d4, rng, nan=False)))
        out.append(reduce_window(f"rw_min_{et}_nonan", et, d4, pool, "minimum", np.inf,
                                 hostile(et, d4, rng, nan=False)))
        out.append(select_and_scatter(f"ss_ge_{et}_nonan", et, d4, s4, pool, "GE", 0.0,
                                      hostile(et, d4, rng, nan=False), normal(et, s4, rng)))
    out.append(select_and_scatter("ss_ge_f32_relu", "f32", d4, s4, pool, "GE", 0.0, relu, normal("f32", s4, rng)))
    for et, tiny in (("f32", 1e-40), ("bf16", 1e-39), ("f16", 1e-6)):     # ties, +0, positive subnormals
        v = np.where(rng.random(d4) < 0.1, tiny, rng.integers(0, 4, d4) - 0.5 * (rng.random(d4) < 0.3))
        out.append(reduce_window(f"rw_max_{et}_ties", et, d4, pool, "maximum", -np.inf, v.astype(TYPES[et])))
    # the form XLA's SelectAndScatterExpander gives a max pooling's gradient: a variadic
    # reduce-window picking (value, indices) by a generic computation
    out.append(_expanded_select("rw_variadic_select", hostile("f32", d4, rng)))
    # a scalar operand: XLA returns it, the init value unused
    name, text, args = reduce_window("rw_scalar", "f32", (), "", "add", 7.0, np.float32(2.5))
    out.append((name, text.replace("{OUT}", "f32[]")
                .replace(", window={}", ""), args))
    # PyTorch's NCHW layout: windows with strides along the minor dimension (read in phases)
    nchw, npool = (2, 3, 9, 10), "size=1x1x3x3 stride=1x1x2x2 pad=0_0x0_0x1_1x1_1"
    out.append(reduce_window("rw_max_f32_nchw", "f32", nchw, npool, "maximum", -np.inf,
                             np.maximum(normal("f32", nchw, rng), 0)))
    out.append(reduce_window("rw_max_f32_nchw_hostile", "f32", nchw, npool, "maximum", -np.inf,
                             hostile("f32", nchw, rng)))
    out.append(reduce_window("rw_min_bf16_nchw_s3", "bf16", nchw, "size=1x1x2x4 stride=1x1x1x3 pad=0_0x0_0x0_1x2_1",
                             "minimum", np.inf, hostile("bf16", nchw, rng, nan=False)))
    return out


def main():
    sys.path.insert(0, str(HERE.parents[2]))
    from hlo_cli.parser import parse
    from hlo_cli.tools.xla_reference import run_with_xla
    for name, text, args in cases():
        text = _with_shape(text, parse)
        outs = run_with_xla(text, args)
        (HERE / f"{name}.hlo").write_text(text)
        np.savez(HERE / f"{name}.npz", **{f"arg{k}": a for k, a in enumerate(args)},
                 **{f"out{k}": o for k, o in enumerate(outs)})
        print(name, [o.shape for o in outs])


def _with_shape(text, parse):
    """{OUT} filled in with the result shape (the window's or the padding's arithmetic)."""
    if "{OUT}" not in text:
        return text
    from hlo_cli.interpreter.computations import _out_len, window_dims
    root = parse(text.replace("{OUT}", "f32[]")).entry_computation.root_instruction
    m = re.search(r"x = (\w+)\[([\d,]*)\]", text)
    et, dims = m.group(1), [int(d) for d in m.group(2).split(",")]
    if root.opcode == "reduce-window":
        out = [_out_len(n, w) for n, w in zip(dims, window_dims(root.attrs["window"], len(dims)))]
    else:
        out = [max(p.low + p.high + n + max(n - 1, 0) * p.interior, 0)
               for n, p in zip(dims, root.attrs["padding"].dimensions)]
    return text.replace("{OUT}", _shape(et, out))


if __name__ == "__main__":
    main()
