"""How many times XLA CPU combines a reduce's init value, measured against XLA itself (jaxlib).

XLA CPU (jaxlib 0.10.2) hands f32/f64 add-reduces of at least 4096 input elements (the whole
input, whatever the row length) to YNNPACK, which adds the init value once to the sum of the
elements; every other reduce is tree-rewritten into windows of 32 that each start from the init;
a reduce of size-1 dimensions only is a reshape that does not use the init at all.  The inputs are
small integers, so every summation order gives the same bits and the init's multiplicity alone
decides the result.  Both the text as written and XLA's own optimized text of it are run.
Needs jaxlib (skipped without it).
"""
from __future__ import annotations

import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from golden import assert_same  # noqa: E402

from hlo_cli.interpreter.evaluator import run_module  # noqa: E402
from hlo_cli.parser import parse  # noqa: E402

pytest.importorskip("jaxlib._hlo")

# (input dims, reduced dims): both sides of 4096 total elements, short and long rows, one or
# several or all reduced dimensions, a reduce of a size-1 dimension only
CASES = [((4095,), (0,)), ((4096,), (0,)), ((4097,), (0,)), ((2, 2047), (1,)), ((2, 2048), (1,)),
         ((3, 1365), (1,)), ((3, 1366), (1,)), ((64, 64), (0,)), ((64, 64), (0, 1)), ((1, 4096), (0,)),
         ((4, 1, 1024), (0, 2)), ((40, 30), (1,))]
# the types XLA never gives to YNNPACK: fewer cases (XLA takes seconds to compile each of them)
FEW = [((4096,), (0,)), ((2, 2048), (1,)), ((64, 64), (0, 1)), ((1, 4096), (0,))]
TYPES = {"f32": np.float32, "f64": np.float64, "s32": np.int32, "bf16": ml_dtypes.bfloat16, "f16": np.float16}
INITS = {"f32": (10, -0.0, 0.5), "f64": (10, -0.0, 0.5), "s32": (10, -3), "bf16": (10, 0.5), "f16": (-0.0, 0.5)}


def _cases(et):
    return CASES if et in ("f32", "f64") else FEW


def _module(et: str) -> str:
    """One reduce per case, all from the init value given as the last parameter."""
    params, reduces, outs = [], [], []
    cases = _cases(et)
    for k, (dims, red) in enumerate(cases):
        shape = f"{et}[{','.join(map(str, dims))}]"
        out = f"{et}[{','.join(str(d) for i, d in enumerate(dims) if i not in red)}]"
        params.append(f"  x{k} = {shape} parameter({k})")
        reduces.append(f"  r{k} = {out} reduce(x{k}, init), dimensions={{{','.join(map(str, red))}}}, to_apply=add")
        outs.append((out, f"r{k}"))
    return (f"HloModule reduce_init_{et}\n\nadd {{\n  a = {et}[] parameter(0)\n  b = {et}[] parameter(1)\n"
            f"  ROOT s = {et}[] add(a, b)\n}}\n\nENTRY main {{\n" + "\n".join(params) +
            f"\n  init = {et}[] parameter({len(cases)})\n" + "\n".join(reduces) +
            f"\n  ROOT t = ({', '.join(o for o, _ in outs)}) tuple({', '.join(n for _, n in outs)})\n}}\n")


def _inputs(et: str):
    rng = np.random.default_rng(len(et))
    if et in ("bf16", "f16"):          # sparse ones: sums below 128 stay exact in the narrow types
        return [(rng.random(dims) < 0.02).astype(TYPES[et]) for dims, _ in _cases(et)]
    return [rng.integers(-4, 4, dims).astype(TYPES[et]) for dims, _ in _cases(et)]


@pytest.mark.parametrize("et", list(TYPES))
def test_init_multiplicity_matches_xla(et):
    from hlo_cli.tools.xla_reference import XlaExecutable
    text = _module(et)
    xla = XlaExecutable(text)
    optimized = parse(xla.executable.hlo_modules()[0].to_string())
    written = parse(text)
    for init in INITS[et]:
        args = _inputs(et) + [np.asarray(init, TYPES[et])]
        want = xla(args)
        for name, module in (("as written", written), ("XLA-optimized", optimized)):
            got = run_module(module, args)
            for k, (g, w) in enumerate(zip(got, want)):
                dims, red = _cases(et)[k]
                assert_same(np.asarray(g), w, {"exact": True},
                            f"{et} init {init} ({name}): reduce of {dims} over {red}")


@pytest.mark.xfail(strict=True, reason="XLA CPU's YNNPACK max/min reductions (>= 4096 elements) do not "
                                       "propagate NaN elements; we keep XLA's NaN-propagating semantics")
def test_large_max_reduce_with_a_nan_element():
    from hlo_cli.tools.xla_reference import run_with_xla
    text = ("HloModule m\n\nmax {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
            "  ROOT m = f32[] maximum(a, b)\n}\n\nENTRY main {\n  x = f32[4096] parameter(0)\n"
            "  init = f32[] constant(-inf)\n  ROOT r = f32[] reduce(x, init), dimensions={0}, to_apply=max\n}\n")
    x = np.ones(4096, np.float32)
    x[100] = np.nan
    (want,) = run_with_xla(text, [x])
    assert float(want) == 1.0                         # XLA drops the NaN here
    assert_same(np.asarray(run_module(parse(text), [x])), want, {"exact": True})
