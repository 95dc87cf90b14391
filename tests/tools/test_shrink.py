"""`hlo shrink` and hlo_cli.tools.shrink: reduce a module while a condition holds.

A real overflow (a JAX training step) shrinks with --nan to a few instructions that still make the
same non-finite value first; a command's exit status drives it as C-Reduce's scripts do; the
result is deterministic and logged; a condition that does not hold on the module is refused.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import hlo_cli
from hlo_cli.errors import HloInputError
from hlo_cli.tools import shrink as lib
from run_harness import hlo  # noqa: F401  (the fixture)

ROOT = Path(__file__).resolve().parent.parent.parent
JAX = ROOT / "samples" / "jax"
TOOLS = ROOT / "tests" / "data" / "tools"


def _count(text: str) -> int:
    return sum(1 for ln in text.splitlines() if re.match(r"\s*(ROOT\s+)?%[\w.\-]+ = ", ln)
               and " parameter(" not in ln)


def test_nan_training_step_shrinks_to_the_overflow(hlo, tmp_path):
    r = hlo("shrink", TOOLS / "nan_train_step.hlo", "--inputs", TOOLS / "nan_train_step.inputs.npz", "--nan",
            "-o", "s.hlo", "--log", "log.json", "--format", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["instructions_before"] > 50 and doc["instructions_after"] <= 20
    assert "exp.1" in doc["condition"]
    text = (tmp_path / "s.hlo").read_text()
    assert _count(text) == doc["instructions_after"]
    run = hlo("run", "s.hlo", "--inputs", "s.inputs.npz", "--check-finite")
    assert run.exit_code == 1 and "exp.1: exponential produced a non-finite value" in run.stderr
    log = json.loads((tmp_path / "log.json").read_text())
    assert log["attempts"] and all({"kind", "tried", "kept", "instructions"} <= set(a) for a in log["attempts"])


def test_deterministic(hlo, tmp_path):
    args = ("shrink", TOOLS / "nan_train_step.hlo", "--inputs", TOOLS / "nan_train_step.inputs.npz", "--nan",
            "--format", "json")
    a = json.loads(hlo(*args, "-o", "a.hlo").stdout)
    b = json.loads(hlo(*args, "-o", "b.hlo").stdout)
    assert (tmp_path / "a.hlo").read_text() == (tmp_path / "b.hlo").read_text()
    assert [(x["kind"], x["tried"], x["kept"]) for x in a["log"]] == [(x["kind"], x["tried"], x["kept"])
                                                                     for x in b["log"]]


def test_until_command(hlo, tmp_path):
    # still interesting while the module has an exponential
    r = hlo("shrink", JAX / "mlp_train_step.hlo", "--inputs", JAX / "mlp_train_step.inputs.npz",
            "--until-command", "grep -q ' exponential(' {}", "-o", "t.hlo", "--format", "json")
    assert r.exit_code == 0, r.stderr
    text = (tmp_path / "t.hlo").read_text()
    assert " exponential(" in text and _count(text) <= 3
    assert hlo("run", "t.hlo", "--inputs", "t.inputs.npz").exit_code == 0


def test_error_condition_and_loop_trips(hlo, tmp_path):
    # a loop guarded by --max-iterations: the error holds while the loop runs more than 2 trips
    r = hlo("shrink", JAX / "fori_loop.hlo", "--inputs", JAX / "fori_loop.inputs.npz", "--max-iterations", "2",
            "--error", "iteration", "-o", "e.hlo", "--format", "json")
    assert r.exit_code == 0, r.stderr          # the sample's loop runs 10 trips: the error holds
    doc = json.loads(r.stdout)
    assert doc["instructions_after"] < doc["instructions_before"]
    trips = [a for a in doc["log"] if a["kind"] == "loop-trips"]
    assert [a["kept"] for a in trips][:2] == [True, False]     # 10 -> 5 still fails; 5 -> 2 stays within the limit
    assert "constant(5)" in (tmp_path / "e.hlo").read_text()
    run = hlo("run", "e.hlo", "--inputs", "e.inputs.npz", "--max-iterations", "2")
    assert run.exit_code == 1 and "iteration" in run.stderr


def test_a_condition_that_does_not_hold_is_refused(hlo):
    r = hlo("shrink", JAX / "mlp_train_step.hlo", "--inputs", JAX / "mlp_train_step.inputs.npz", "--nan")
    assert r.exit_code == 2 and "does not hold" in r.stderr
    r = hlo("shrink", JAX / "mlp_train_step.hlo", "--random-inputs")
    assert r.exit_code == 2 and "exactly one condition" in r.stderr
    r = hlo("shrink", JAX / "mlp_train_step.hlo", "--random-inputs", "--until-command", "true")
    assert r.exit_code == 2 and "{}" in r.stderr


def test_expect_condition_keeps_the_differing_output(tmp_path):
    from hlo_cli.pipeline.compare import load_reference
    from hlo_cli.pipeline.inputs import load_inputs
    text = (JAX / "mlp_train_step.hlo").read_text().replace("constant.21 = f32[] constant(0.1)",
                                                              "constant.21 = f32[] constant(0.2)")
    m = hlo_cli.parse(text)
    args = load_inputs(m.entry_computation.parameters, (), str(JAX / "mlp_train_step.inputs.npz")).values
    root = m.entry_computation.root_instruction.shape
    ref = load_reference(str(JAX / "mlp_train_step.expected.npz"), [s.dims for s in root.leaves()])
    from hlo_cli.interpreter import RunOptions
    res = lib.shrink(m, args, lib.ExpectCondition(ref, 1e-3, 1e-3, RunOptions()), time_budget=120)
    assert res.candidate.size < res.start_size
    assert res.candidate.outputs and len(res.candidate.outputs) < 5
    assert "constant.21" in {i.name for i in res.candidate.insts} or \
        any("constant.21" in str(c) for c in res.candidate.comps)


@pytest.mark.slow
def test_mismatch_with_xla(hlo, tmp_path):
    p = tmp_path / "m.hlo"
    p.write_text("""HloModule m

ENTRY %main (x: c64[1,1,1,1], y: f32[4]) -> (f32[4], c64[1,1,1,1]) {
  %x = c64[1,1,1,1] parameter(0)
  %y = f32[4] parameter(1)
  %t = f32[4] tanh(%y)
  %s = f32[4] sine(%t)
  %e = c64[1,1,1,1] exponential(%x)
  %f = c64[1,1,1,1] fft(%e), fft_type=FFT, fft_length={0}
  %n = c64[1,1,1,1] negate(%f)
  ROOT %r = (f32[4], c64[1,1,1,1]) tuple(%s, %n)
}
""")
    r = hlo("shrink", p, "--random-inputs", "--mismatch", "xla", "-o", "s.hlo", "--format", "json")
    assert r.exit_code == 0, r.stderr
    text = (tmp_path / "s.hlo").read_text()
    assert " fft(" in text and " sine(" not in text and _count(text) <= 2


def test_library_refuses_when_the_condition_does_not_hold():
    from hlo_cli.interpreter import RunOptions
    m = hlo_cli.parse_file(str(JAX / "mlp_train_step.hlo"))
    from hlo_cli.interpreter.inputs import random_inputs
    with pytest.raises(HloInputError, match="does not hold"):
        lib.shrink(m, random_inputs(m.entry_computation.parameters, 0), lib.NanCondition(RunOptions()))


def test_constants_make_a_module_without_inputs(hlo, tmp_path):
    r = hlo("shrink", TOOLS / "nan_train_step.hlo", "--inputs", TOOLS / "nan_train_step.inputs.npz", "--nan",
            "--constants", "-o", "c.hlo", "--format", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert "inputs" not in doc["files"] and doc["log"][-1]["kind"] == "to-constants" and doc["log"][-1]["kept"]
    assert " parameter(" not in (tmp_path / "c.hlo").read_text()
    run = hlo("run", "c.hlo", "--check-finite")
    assert run.exit_code == 1 and "exp.1" in run.stderr
