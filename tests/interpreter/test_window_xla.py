"""reduce-window, select-and-scatter, pad and reverse against XLA CPU's own results, bit for bit.

tests/data/window/ holds one small module per case with its inputs and XLA's outputs (written by
tests/data/window/make_goldens.py with jaxlib): hostile inputs (ties, NaN of both signs, +-inf,
+-0, subnormals), padding, base and window dilation, overlapping windows, several element types.
Each case runs three ways -- the compiled run, the generic instruction loop, and the reduce-window
cases once more through the gather path the sweep replaced -- and must give XLA's bits; with
jaxlib installed the goldens are also checked against live XLA.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from golden import assert_same, load_golden  # noqa: E402

from hlo_cli.interpreter import computations as C  # noqa: E402
from hlo_cli.interpreter.evaluator import run_module  # noqa: E402
from hlo_cli.parser import parse  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data" / "window"
CASES = sorted(DATA.glob("*.hlo"))
# f32 sums whose order XLA CPU's emitter does not keep row-major (measured on jaxlib 0.10.2: some
# unpadded windows, e.g. 2x2 and 2x3 ones, sum each window row first and then the rows; this
# window-dilated one sums column by column): the same values to the last bits, not the same bits
NOT_IN_ORDER = {"rw_add_f32_wdil": {"exact": False, "rtol": 1e-6, "atol": 1e-6}}


def _mode(path):
    return NOT_IN_ORDER.get(path.stem, {"exact": True})


def _leaves(r):
    return [np.asarray(v) for v in (r if isinstance(r, (tuple, list)) else [r])]


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_matches_xla(path):
    module = parse(path.read_text())
    args, want = load_golden(path, module)
    for compiled in (True, False):
        got = _leaves(run_module(module, args, compiled=compiled))
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_same(g, w, _mode(path), f"{path.stem} (compiled={compiled})")


@pytest.mark.parametrize("path", [p for p in CASES if p.stem.startswith("rw_")],
                         ids=[p.stem for p in CASES if p.stem.startswith("rw_")])
def test_gather_path_agrees(path, monkeypatch):
    """The per-position sweep and the gather it replaced give the same bits (both XLA's)."""
    monkeypatch.setattr(C, "_taps_pay", lambda shape, wdims: False)
    module = parse(path.read_text())
    args, want = load_golden(path, module)
    got = _leaves(run_module(module, args))
    for g, w in zip(got, want):
        assert_same(g, w, _mode(path), path.stem)


def test_software_flushing_agrees(monkeypatch):
    """Without the processor's FTZ/DAZ flags (other machines) the software flushing gives the
    same bits."""
    import hlo_cli.interpreter.fpenv as fpenv
    monkeypatch.setattr(fpenv, "_state", None)
    for path in CASES:
        if "f32" not in path.stem and "f64" not in path.stem:
            continue
        module = parse(path.read_text())
        args, want = load_golden(path, module)
        for g, w in zip(_leaves(run_module(module, args)), want):
            assert_same(g, w, _mode(path), f"{path.stem} (software flushing)")


@pytest.mark.slow
def test_goldens_are_xla_s():
    pytest.importorskip("jaxlib._hlo")
    from hlo_cli.tools.xla_reference import XlaExecutable
    for path in CASES:
        module = parse(path.read_text())
        args, want = load_golden(path, module)
        live = XlaExecutable(path.read_text())(args)
        for g, w in zip(live, want):
            assert_same(np.asarray(g), w, {"exact": True}, f"{path.stem}: XLA now")
