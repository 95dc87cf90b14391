"""`hlo isolate` and hlo_cli.tools.isolate: every instruction alone on XLA CPU on hlo's own operand values.

Where hlo and XLA really disagree (an FFT of length 0: XLA's evaluator gives zeros, checked live
here), the instruction is the first cause and its users (which agree on hlo's values) are not
named; a planted fault (an edited opcode or constant of a JAX training step, XLA running the
original instruction: --reference-module) is named, not its users; identical instructions run
once; --shard splits the work exactly; the JSON is a `hlo graph --overlay`.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import hlo_cli
from hlo_cli.errors import HloInputError
from hlo_cli.tools.isolate import isolate, parse_shard
from run_harness import hlo  # noqa: F401  (the fixture)

ROOT = Path(__file__).resolve().parent.parent.parent
JAX = ROOT / "samples" / "jax"

FFT0 = """HloModule fft0

ENTRY %main (x: c64[1,1,1,1]) -> c64[1,1,1,1] {
  %x = c64[1,1,1,1] parameter(0)
  %e = c64[1,1,1,1] exponential(%x)
  %f = c64[1,1,1,1] fft(%e), fft_type=FFT, fft_length={0}
  ROOT %n = c64[1,1,1,1] negate(%f)
}
"""

FUSED_FFT0 = """HloModule fused_fft0

%fc (a: c64[1,1,1,1]) -> c64[1,1,1,1] {
  %a = c64[1,1,1,1] parameter(0)
  %f = c64[1,1,1,1] fft(%a), fft_type=FFT, fft_length={0}
  ROOT %m = c64[1,1,1,1] multiply(%f, %f)
}

ENTRY %main (x: c64[1,1,1,1]) -> c64[1,1,1,1] {
  %x = c64[1,1,1,1] parameter(0)
  %fu = c64[1,1,1,1] fusion(%x), kind=kLoop, calls=%fc
  ROOT %n = c64[1,1,1,1] negate(%fu)
}
"""

TWINS = """HloModule twins

ENTRY %main (x: f32[8]) -> (f32[8], f32[8]) {
  %x = f32[8] parameter(0)
  %a = f32[8] tanh(%x)
  %b = f32[8] tanh(%x)
  %c = f32[8] add(%a, %b)
  ROOT %t = (f32[8], f32[8]) tuple(%c, %b)
}
"""


def _args(path: Path, module):
    from hlo_cli.pipeline.inputs import load_inputs
    return load_inputs(module.entry_computation.parameters, (), str(path)).values


def test_parse_shard():
    assert parse_shard("1/4") == (1, 4)
    assert parse_shard(None) is None
    for bad in ("4/4", "x", "1/0", "-1/2"):
        with pytest.raises(HloInputError, match="--shard"):
            parse_shard(bad)


def test_bad_options_are_usage_errors(hlo, tmp_path):
    p = tmp_path / "m.hlo"
    p.write_text(TWINS)
    r = hlo("isolate", p, "--random-inputs", "--shard", "3/2")
    assert r.exit_code == 2 and "--shard 3/2" in r.stderr
    r = hlo("isolate", p, "--random-inputs", "--filter-name", "(")
    assert r.exit_code == 2 and "--filter-name" in r.stderr
    r = hlo("isolate", tmp_path / "missing.hlo", "--random-inputs")
    assert r.exit_code == 2


@pytest.mark.slow
def test_fft_of_length_zero_is_the_first_cause(hlo, tmp_path):
    p = tmp_path / "fft0.hlo"
    p.write_text(FFT0)
    r = hlo("isolate", p, "--random-inputs", "--format", "json")
    assert r.exit_code == 1, r.stderr
    doc = json.loads(r.stdout)
    assert [c["instruction"] for c in doc["causes"]] == ["f"]
    cause = doc["causes"][0]
    assert cause["opcode"] == "fft" and cause["location"].endswith("fft0.hlo:6")
    assert cause["hlo_value"] != cause["xla_value"]    # (XLA CPU's value is whatever its buffer held)
    assert doc["symptoms"] == []                       # the negate agrees on hlo's value
    assert doc["counts"] == {"MATCHED": 2, "MISMATCH": 1, "XLA-REFUSED": 0, "SKIPPED": 1}
    text = hlo("isolate", p, "--random-inputs")
    assert text.exit_code == 1 and "first causes (1)" in text.stdout and "%f = c64[1,1,1,1] fft" in text.stdout


@pytest.mark.slow
def test_the_json_is_a_graph_overlay(hlo, tmp_path):
    from hlo_cli.graph.overlays import load_overlays
    p = tmp_path / "fft0.hlo"
    p.write_text(FFT0)
    r = hlo("isolate", p, "--random-inputs", "--format", "json")
    (tmp_path / "iso.json").write_text(r.stdout)
    ov = load_overlays(str(tmp_path / "iso.json"), hlo_cli.parse(FFT0))[0]
    assert ov.kind == "diff" and ov.first is not None and "f" in ov.first
    g = hlo("graph", p, "--overlay", tmp_path / "iso.json", "--format", "dot")
    assert g.exit_code == 0, g.stderr


@pytest.mark.slow
def test_into_fusions_names_the_instruction_inside(tmp_path):
    m = hlo_cli.parse(FUSED_FFT0)
    x = [np.array([[[[1.5 + 0.5j]]]], np.complex64)]
    outer = isolate(m, x)
    causes, _ = outer.classify()
    assert [c.name for c in causes] == ["fu"]
    inner = isolate(m, x, into_fusions=True)
    causes, symptoms = inner.classify()
    assert [c.name for c in causes] == ["f"] and causes[0].inside == "fu"
    assert [s.name for s, _ in symptoms] == ["fu"]        # the fusion around it is its symptom


@pytest.mark.slow
def test_identical_instructions_run_once():
    m = hlo_cli.parse(TWINS)
    r = isolate(m, [np.linspace(-1, 1, 8, dtype=np.float32)])
    assert r.stats["identical"] == 1 and r.counts()["MATCHED"] == 3
    assert r.nodes[("main", "b")].status == "MATCHED"


@pytest.mark.slow
def test_a_training_step_agrees_and_shards_split_the_work():
    m = hlo_cli.parse_file(str(JAX / "mlp_train_step.hlo"))
    args = _args(JAX / "mlp_train_step.inputs.npz", m)
    full = isolate(m, args)
    assert full.counts()["MISMATCH"] == 0 and full.counts()["MATCHED"] > 80
    isolated = {k for k, n in full.nodes.items() if n.status != "SKIPPED" or n.note}
    parts = [isolate(m, args, shard=(i, 3)) for i in range(3)]
    seen = [set(p.nodes) for p in parts]
    assert not (seen[0] & seen[1]) and not (seen[1] & seen[2])
    assert set().union(*seen) == set(full.nodes)
    assert isolated <= set(full.nodes)
    only_dots = isolate(m, args, filter_opcode="^dot$")
    assert {n.opcode for n in only_dots.nodes.values()} == {"dot"} and only_dots.filtered > 0


def _plant(text: str, pattern: str, repl: str) -> tuple[str, str]:
    """TEXT with the first line matching PATTERN edited; (new text, the edited instruction's name)."""
    lines = text.splitlines()
    for k, line in enumerate(lines):
        if re.search(pattern, line):
            lines[k] = re.sub(pattern, repl, line, count=1)
            return "\n".join(lines) + "\n", re.match(r"\s*(?:ROOT\s+)?%?([\w.\-]+)", line).group(1)
    raise AssertionError(pattern)


@pytest.mark.slow
@pytest.mark.parametrize("pattern,repl", [
    (r"\bmultiply\(", "subtract("),                       # an opcode
    (r"= f32\[\] constant\(0\.1\)", "= f32[] constant(0.2)"),   # a constant (the learning rate)
])
def test_a_planted_fault_is_named_not_its_users(hlo, tmp_path, pattern, repl):
    orig = (JAX / "mlp_train_step.hlo").read_text()
    assert re.search(pattern, orig), "the committed sample holds the line to plant the fault in"
    planted, name = _plant(orig, pattern, repl)
    p = tmp_path / "planted.hlo"
    p.write_text(planted)
    r = hlo("isolate", p, "--inputs", JAX / "mlp_train_step.inputs.npz", "--reference-module",
            JAX / "mlp_train_step.hlo", "--expect", JAX / "mlp_train_step.expected.npz", "--format", "json")
    assert r.exit_code == 1, r.stderr
    doc = json.loads(r.stdout)
    assert [c["instruction"] for c in doc["causes"]] == [name]
    # its users agree on hlo's (planted) operand values; only a call around it differs, as its symptom
    assert all(s["opcode"] == "call" and s["after"] == [name] for s in doc["symptoms"])
    assert doc["outputs"]["ok"] is False
    loc = doc["localized"]
    assert loc["causes"][0]["instruction"] == name and loc["causes"][0]["reaches"]
    assert loc["unexplained_outputs"] == []


@pytest.mark.slow
def test_an_optimized_text_with_fusions_and_bitcasts_runs_on_xla():
    m = hlo_cli.parse_file(str(JAX / "sort_gather_scatter.opt.hlo"))
    r = isolate(m, _args(JAX / "sort_gather_scatter.inputs.npz", m))
    c = r.counts()
    assert c["MISMATCH"] == 0 and c["XLA-REFUSED"] == 0 and c["MATCHED"] >= 35


@pytest.mark.slow
def test_a_program_on_devices_is_isolated_per_device_and_collectives_on_all():
    spmd = ROOT / "samples" / "spmd"
    m = hlo_cli.parse_file(str(spmd / "dp_matmul_grad_1d.opt.hlo"))
    from hlo_cli.pipeline.devices import DeviceRun
    from hlo_cli.pipeline.inputs import load_inputs
    dv = DeviceRun(m, {})
    args = load_inputs(m.entry_computation.parameters, (), str(spmd / "dp_matmul_grad_1d.inputs.npz"),
                       dv.shape_for).values
    r = isolate(m, args)
    c = r.counts()
    assert c["MISMATCH"] == 0 and c["XLA-REFUSED"] == 0
    ar = [n for n in r.nodes.values() if n.opcode == "all-reduce"]
    assert ar and all(n.status == "MATCHED" for n in ar)
    assert r.stats["jobs"] > c["MATCHED"]          # one job per device for the per-device instructions


def test_without_jax_it_says_how_to_install_it(hlo, tmp_path, monkeypatch):
    import hlo_cli.tools.reference as ref
    monkeypatch.setattr(ref, "jax_installed", lambda: False)
    p = tmp_path / "m.hlo"
    p.write_text(TWINS)
    r = hlo("isolate", p, "--random-inputs")
    assert r.exit_code == 6 and "pip install 'hlo-cli[xla]'" in r.stderr
    r = hlo("shrink", p, "--random-inputs", "--mismatch", "xla")
    assert r.exit_code == 6 and "pip install" in r.stderr


@pytest.mark.slow
def test_a_snapshot_brings_its_arguments_and_its_result(hlo):
    r = hlo("isolate", ROOT / "samples" / "snapshots" / "mlp.snapshot.pb", "--format", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["outputs"]["ok"] and "snapshot's result" in doc["outputs"]["reference"]
    assert doc["counts"]["MATCHED"] > 0 and doc["counts"]["MISMATCH"] == 0


@pytest.mark.slow
def test_lapack_custom_calls_keep_their_column_major_layouts():
    # an optimized text's LAPACK calls read column-major buffers: isolated with default layouts they
    # would see their operands transposed and differ everywhere
    m = hlo_cli.parse_file(str(JAX / "fft_linalg.opt.hlo"))
    r = isolate(m, _args(JAX / "fft_linalg.inputs.npz", m))
    calls = [n for n in r.nodes.values() if n.opcode == "custom-call"]
    assert len(calls) >= 6 and all(n.status == "MATCHED" for n in calls)
    assert r.counts()["MISMATCH"] == 0


@pytest.mark.slow
def test_a_refused_instruction_is_split_out_of_its_batch(hlo, tmp_path):
    from hlo_cli.tools.xla_worker import XlaRefused, XlaWorker

    class Refusing(XlaWorker):
        """XLA, except that it refuses any module with a sine."""
        def run_rounds(self, text, rounds):
            if " sine(" in text:
                raise XlaRefused("compile", "no sines here")
            return super().run_rounds(text, rounds)
    m = hlo_cli.parse("""HloModule m

ENTRY %main (x: f32[8]) -> f32[8] {
  %x = f32[8] parameter(0)
  %a = f32[8] tanh(%x)
  %s = f32[8] sine(%a)
  %c = f32[8] cosine(%a)
  %e = f32[8] exponential(%c)
  ROOT %r = f32[8] add(%s, %e)
}
""")
    with Refusing() as w:
        r = isolate(m, [np.linspace(-1, 1, 8, dtype=np.float32)], worker=w)
    assert r.nodes[("main", "s")].status == "XLA-REFUSED" and "no sines here" in r.nodes[("main", "s")].note
    assert all(r.nodes[("main", n)].status == "MATCHED" for n in ("a", "c", "e", "r"))
    assert r.stats["refused_batches_split"] >= 1
