"""`hlo extract` and hlo_cli.tools.extract: a small module around one instruction with the run's values.

The law: the extracted module, run on its saved inputs, gives the instruction's value bit for bit
(checked over every instruction of real JAX samples, at several heights, and with hypothesis over
a sample's instructions, heights and depths).  A real overflow (a JAX training step) extracted at
its first non-finite instruction is a module of a few instructions that `hlo run --check-finite`
stops at.  Values from a run's dump are the run's own; existing files are never replaced without
--force.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hlo_cli
from hlo_cli.errors import HloInputError
from hlo_cli.tools.extract import extract, verify
from run_harness import hlo  # noqa: F401  (the fixture)

ROOT = Path(__file__).resolve().parent.parent.parent
JAX = ROOT / "samples" / "jax"
TOOLS = ROOT / "tests" / "data" / "tools"


def _load(name: str, folder: Path = JAX):
    from hlo_cli.pipeline.inputs import load_inputs
    m = hlo_cli.parse_file(str(folder / f"{name}.hlo"))
    stem = name.split(".")[0]
    return m, load_inputs(m.entry_computation.parameters, (), str(folder / f"{stem}.inputs.npz")).values


def _executed(module, args) -> list:
    """(computation, name) of every instruction the run executes, in order, once each."""
    from hlo_cli.interpreter import run_module
    seen = {}

    def hook(ev):
        seen.setdefault((ev.computation.name, ev.instruction.name), ev.instruction.opcode)
    run_module(module, list(args), None, hook)
    fused = {c for _, i in module.instructions() if i.opcode == "fusion" for c in i.called_computations}
    return [k for k, op in seen.items() if op != "parameter" and k[0] not in fused]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mlp_train_step", "fori_loop", "attention.opt"])
def test_every_instruction_reproduces_bit_for_bit(name):
    m, args = _load(name)
    nodes = _executed(m, args)
    assert len(nodes) > 10
    for k, (comp, inst) in enumerate(nodes):
        ex = extract(m, inst, args=args, computation=comp, height=k % 3)
        check = verify(ex)
        assert check["identical"], (comp, inst, check)


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_law_with_hypothesis(data):
    m, args = _SAMPLE
    comp, inst = data.draw(st.sampled_from(_SAMPLE_NODES))
    height = data.draw(st.integers(0, 4))
    depth = data.draw(st.integers(0, 2))
    cut = data.draw(st.sampled_from(["parameters", "constants"]))
    ex = extract(m, inst, args=args, computation=comp, height=height, depth=depth, cut_as=cut)
    assert verify(ex)["identical"]
    if cut == "constants":              # only what feeds a contracted multiply stays a parameter
        assert not ex.inputs or any(n.startswith("--cut constants: ") and all(k in n for k in ex.inputs)
                                    for n in ex.notes)


_SAMPLE = _load("mlp_train_step")
_SAMPLE_NODES = _executed(*_SAMPLE)


def test_a_real_overflow_is_a_few_instructions_check_finite_stops_at(hlo, tmp_path):
    r = hlo("extract", TOOLS / "nan_train_step.hlo", "--inputs", TOOLS / "nan_train_step.inputs.npz",
            "--instruction", "exp.1", "--height", "1", "-o", "nan.hlo", "--format", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["reproduces"] and doc["instructions"] <= 5
    run = hlo("run", "nan.hlo", "--inputs", "nan.inputs.npz", "--check-finite")
    assert run.exit_code == 1 and "exp.1: exponential produced a non-finite value" in run.stderr
    again = hlo("run", "nan.hlo", "--inputs", "nan.inputs.npz", "--expect", "nan.expected.npz", "--rtol", "0",
                "--atol", "0")
    assert again.exit_code == 0, again.stderr


def test_existing_files_are_not_replaced(hlo, tmp_path):
    args = ("extract", JAX / "mlp_train_step.hlo", "--inputs", JAX / "mlp_train_step.inputs.npz",
            "--instruction", "dot_general.8", "-o", "x.hlo")
    assert hlo(*args).exit_code == 0
    before = (tmp_path / "x.hlo").read_text()
    r = hlo(*args, "--height", "2")
    assert r.exit_code == 2 and "already exist" in r.stderr and "--force" in r.stderr
    assert (tmp_path / "x.hlo").read_text() == before
    assert hlo(*args, "--height", "2", "--force").exit_code == 0
    assert (tmp_path / "x.hlo").read_text() != before


def test_unknown_and_ambiguous_names(hlo):
    r = hlo("extract", JAX / "mlp_train_step.hlo", "--inputs", JAX / "mlp_train_step.inputs.npz",
            "--instruction", "dot_general.88")
    assert r.exit_code == 2 and "no such instruction" in r.stderr and "did you mean" in r.stderr
    m, args = _load("fori_loop")
    names = [i.name for _, i in m.instructions()]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        with pytest.raises(HloInputError, match="--computation"):
            extract(m, dup, args=args)


def test_values_from_a_run_dump_are_the_runs(hlo, tmp_path):
    assert hlo("run", JAX / "fori_loop.hlo", "--inputs", JAX / "fori_loop.inputs.npz", "--dump-dir", "d").exit_code == 0
    m, args = _load("fori_loop")
    direct = extract(m, "while.16", args=args, height=1)
    dumped = extract(m, "while.16", values_from=str(tmp_path / "d"), height=1)
    assert direct.text == dumped.text
    assert all(np.array_equal(a, b) for a, b in zip(direct.inputs.values(), dumped.inputs.values()))
    assert all(np.array_equal(a, b) for a, b in zip(direct.expected, dumped.expected))
    assert verify(dumped)["identical"]


def test_zeros_and_random_cuts_recompute_the_expected_value():
    m, args = _load("mlp_train_step")
    for cut in ("zeros", "random"):
        ex = extract(m, "dot_general.8", args=args, height=1, cut_as=cut)
        assert ex.notes and verify(ex)["identical"]
    z = extract(m, "dot_general.8", args=args, cut_as="zeros")
    assert all(not v.any() for v in z.inputs.values())


SPMD = ROOT / "samples" / "spmd"


def test_a_program_on_devices_keeps_its_devices(hlo):
    r = hlo("extract", SPMD / "dp_matmul_grad_1d.opt.hlo", "--inputs", SPMD / "dp_matmul_grad_1d.inputs.npz",
            "--instruction", "all-reduce.2", "--height", "1", "-o", "sp.hlo", "--format", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["reproduces"] and doc["per_device"]
    text = Path("sp.hlo").read_text()
    assert "num_partitions=8" in text and "all-reduce(" in text
    run = hlo("run", "sp.hlo", "--inputs", "sp.inputs.npz", "--per-device", "--expect", "sp.expected.npz",
              "--rtol", "0", "--atol", "0")
    assert run.exit_code == 0, run.stderr


def test_a_contracted_product_is_not_an_output_of_its_piece():
    """mlp_train_step's mul.18 feeds only sub.22, which XLA CPU computes as one FMA: as an output
    of the piece the product would be a value of its own (rounded), so the piece leaves it out,
    says why, and gives sub.22's bits."""
    m, args = _SAMPLE
    ex = extract(m, "mul.18", args=args, computation="main.15", height=0, depth=1)
    assert ex.root == "sub.22"
    assert any(n.startswith("mul.18: not an output of the piece") for n in ex.notes)
    assert verify(ex)["identical"]
