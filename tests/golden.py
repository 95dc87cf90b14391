"""Running the per-opcode programs of tests/programs against their XLA-made golden files.

A program `NAME.hlo` may start with comment lines that set how results are compared:
    // compare: exact                 (default: bit-for-bit, NaN equal to NaN)
    // compare: rtol=1e-6 atol=1e-30  (floating-point results within a tolerance; NaN positions equal)
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from hlo_cli.interpreter import run
from hlo_cli.interpreter.values import leaves, np_dtype
from hlo_cli.parser import parse

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "tests" / "programs"


def programs(family: str | None = None):
    base = PROGRAMS / family if family else PROGRAMS
    return sorted(base.rglob("*.hlo"))


def compare_mode(text: str) -> dict:
    m = re.search(r"^//\s*compare:\s*(.*)$", text, re.M)
    if not m or m.group(1).strip() == "exact":
        return {"exact": True}
    opts = dict(kv.split("=") for kv in m.group(1).split())
    return {"exact": False, "rtol": float(opts.get("rtol", 0)), "atol": float(opts.get("atol", 0))}


def load_golden(path: Path, module):
    data = np.load(path.with_suffix(".npz"))
    params = module.entry_computation.parameters
    args = []
    for k, p in enumerate(params):
        a = data[f"arg{k}"]
        if a.dtype.kind == "V":
            a = a.view(np_dtype(p.shape))
        args.append(a)
    outs = []
    leaves_shapes = list(module.entry_computation.root_instruction.shape.leaves())
    k = 0
    while f"out{k}" in data.files:
        o = data[f"out{k}"]
        if o.dtype.kind == "V":
            o = o.view(np_dtype(leaves_shapes[k]))
        outs.append(o)
        k += 1
    return args, outs


def assert_same(ours: np.ndarray, want: np.ndarray, mode: dict, what: str = ""):
    assert ours.dtype == want.dtype, f"{what}: dtype {ours.dtype} vs XLA {want.dtype}"
    assert ours.shape == want.shape, f"{what}: shape {ours.shape} vs XLA {want.shape}"
    if mode["exact"] or ours.dtype.kind in "biu":
        if ours.dtype.kind in "fcV" or ours.dtype.name.startswith(("bfloat", "float")):
            a = ours.astype(np.complex128) if ours.dtype.kind == "c" else ours.astype(np.float64)
            b = want.astype(np.complex128) if want.dtype.kind == "c" else want.astype(np.float64)
            nan_a, nan_b = np.isnan(a), np.isnan(b)
            assert np.array_equal(nan_a, nan_b), f"{what}: NaN positions differ"
            eq = (a == b) | nan_a
            # signed zeros must match too
            sign_ok = np.signbit(a.real) == np.signbit(b.real) if a.dtype.kind != "c" else True
            bad = ~(eq & sign_ok)
            assert not bad.any(), f"{what}: {int(bad.sum())} values differ, first at {np.argwhere(bad)[0].tolist()}: " \
                                  f"ours {a[tuple(np.argwhere(bad)[0])]} vs XLA {b[tuple(np.argwhere(bad)[0])]}"
        else:
            bad = ours != want
            assert not bad.any(), f"{what}: {int(bad.sum())} values differ, first at {np.argwhere(bad)[0].tolist()}: " \
                                  f"ours {ours[tuple(np.argwhere(bad)[0])]} vs XLA {want[tuple(np.argwhere(bad)[0])]}"
    else:
        a = ours.astype(np.complex128 if ours.dtype.kind == "c" else np.float64)
        b = want.astype(np.complex128 if want.dtype.kind == "c" else np.float64)
        np.testing.assert_allclose(a, b, rtol=mode["rtol"], atol=mode["atol"], equal_nan=True, err_msg=what)


def check_program(path: Path):
    """Run `path` on its golden inputs and compare every result leaf with XLA's."""
    text = path.read_text()
    module = parse(text, str(path))
    args, want = load_golden(path, module)
    result = run(module, *args)
    got = list(leaves(result)) if isinstance(result, tuple) else [result]
    assert len(got) == len(want), f"{path.name}: {len(got)} results vs XLA {len(want)}"
    mode = compare_mode(text)
    for k, (g, w) in enumerate(zip(got, want)):
        assert_same(np.asarray(g), w, mode, f"{path.name} out{k}")
