"""The H200 cases copied from ../shared/gpu/cases into samples/gpu/cases: loading and comparing."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

CASES = Path(__file__).resolve().parents[2] / "samples" / "gpu" / "cases"


def load(name: str, stage: str):
    """(spec from NAME.json, the NAME.STAGE.hlo text, inputs, XLA GPU's outputs)."""
    spec = json.loads((CASES / f"{name}.json").read_text())
    ins = np.load(CASES / f"{name}.inputs.npz")
    exp = np.load(CASES / f"{name}.expected.npz")
    # float64 arrays stand for f32 parameters (shared/gpu/README.md)
    args = [a.astype(np.float32) if a.dtype == np.float64 else a for a in (ins[f"arg{i}"] for i in range(len(ins.files)))]
    return spec, (CASES / f"{name}.{stage}.hlo").read_text(), args, [exp[f"out{i}"] for i in range(len(exp.files))]


def flat(value):
    return [x for v in value for x in flat(v)] if isinstance(value, tuple) else [np.asarray(value)]


def compare(outs, want, spec, skip=()):
    """Every output within the case's tolerance (rtol, atol of NAME.json), but those in `skip`."""
    assert len(outs) == len(want) == spec["n_out"]
    for i, (g, w) in enumerate(zip(outs, want)):
        if i not in skip:
            np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64), rtol=spec["rtol"],
                                       atol=spec["atol"], err_msg=f"out{i}")


def assert_refused(text, args, fragment, line):
    """Running `text` fails with a diagnostic at `line` whose message holds `fragment`."""
    import pytest

    from hlo_cli.errors import HloEvalError
    from hlo_cli.interpreter import run
    with pytest.raises(HloEvalError) as e:
        run(text, *args)
    d = e.value.diagnostics[0]
    assert fragment in d.message and d.line == line and d.column > 0, d.message
    return d.message
