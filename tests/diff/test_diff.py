"""`hlo diff` and hlo_cli.diff: matching real before/after-optimization pairs made by JAX (XLA CPU),
deliberately broken copies (the edited instruction is named first, with the operands that agreed),
instructions only one module has, the JSON contract, exit codes and bad inputs, and a law: a module
diffed against itself agrees everywhere, every instruction matched by name.

samples/diff/ is made by samples/diff/make.py (JAX); its expected.npz holds XLA's results.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hlo_cli
from hlo_cli.diff import diff_modules, format_text, match_modules
from hlo_cli.errors import HloInputError
from run_harness import hlo  # noqa: F401  (the fixture)

ROOT = Path(__file__).resolve().parent.parent.parent
DIFF = ROOT / "samples" / "diff"
JAX = ROOT / "samples" / "jax"


def _args(npz: Path, module=None) -> list:
    """The inputs as `hlo run --inputs` reads them (raw bfloat16 records as the parameter's type)."""
    from hlo_cli.pipeline.inputs import load_inputs
    module = module or hlo_cli.parse_file(str(DIFF / "model.hlo"))
    return load_inputs(module.entry_computation.parameters, (), str(npz)).values


def _diff(a: Path, b: Path, npz: Path, **kw):
    ma = hlo_cli.parse_file(str(a))
    return diff_modules(ma, hlo_cli.parse_file(str(b)), _args(npz, ma), **kw)


# ----------------------------------------------------------------------------- real pairs

def test_model_results_are_xlas():
    """The golden: the pair's module run by hlo gives XLA's results (so the diff below compares
    values XLA would compute)."""
    out = hlo_cli.run(hlo_cli.parse_file(str(DIFF / "model.hlo")), *_args(DIFF / "inputs.npz"))
    with np.load(DIFF / "expected.npz") as z:
        for k, v in enumerate(out):
            np.testing.assert_allclose(np.asarray(v), z[f"out{k}"], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("a, b, npz", [
    (DIFF / "model.hlo", DIFF / "model.opt.hlo", DIFF / "inputs.npz"),
    (JAX / "mlp_train_step.hlo", JAX / "mlp_train_step.opt.hlo", JAX / "mlp_train_step.inputs.npz"),
    (JAX / "fori_loop.hlo", JAX / "fori_loop.opt.hlo", JAX / "fori_loop.inputs.npz"),
    (JAX / "cond_switch.hlo", JAX / "cond_switch.opt.hlo", JAX / "cond_switch.inputs.npz"),
    (JAX / "mixed_dtypes.hlo", JAX / "mixed_dtypes.opt.hlo", JAX / "mixed_dtypes.inputs.npz"),
], ids=lambda p: p.name if isinstance(p, Path) else None)
def test_before_after_optimizations_agree(a, b, npz):
    """Before vs after XLA's optimizations: the results and every matched value agree, nothing is
    left uncompared, and fused instructions are matched to the originals (structure, through their
    fusion's operands)."""
    r = _diff(a, b, npz)
    assert r.verdict == "agree" and r.results_agree
    s = r.summary()
    assert s["differing"] == 0 and s["skipped"] == 0, format_text(r)
    assert s["matched"] >= 20
    fused = [p for p in r.states.values() if p.b[0] != r.matching.b.entry and p.how == "structure"]
    assert fused, "no fused instruction matched"


def test_fusion_parameters_stand_for_the_fusion_operands():
    m = match_modules(hlo_cli.parse_file(str(DIFF / "model.hlo")), hlo_cli.parse_file(str(DIFF / "model.opt.hlo")))
    B = m.b
    dots = [n for n, i in B.inst.items() if i.opcode == "dot"]
    assert dots
    for n in dots:
        assert m.pairs[n].a[1] == "dot_general.1"
        # the fused dot's parameters are the entry parameters x.1 and w.1
        ops = [B.canonical((n[0], o)) for o in B.inst[n].operands]
        assert [m.canon[o][1] for o in ops] == ["x.1", "w.1"]


# ----------------------------------------------------------------------------- broken copies

def test_broken_copy_names_the_edited_instruction(hlo):
    """model.broken.hlo: the add of x @ w + b became a subtract. diff names it first, with both
    names and lines, the largest difference, and the operands that still agreed."""
    res = hlo("diff", DIFF / "model.hlo", DIFF / "model.broken.hlo", "--inputs", DIFF / "inputs.npz",
              "--format", "json")
    assert res.exit_code == 1
    doc = json.loads(res.stdout)
    assert doc["verdict"] == "differ" and doc["results_agree"] is False
    first = doc["first_differences"]
    assert len(first) == 1
    e = first[0]
    assert (e["a"], e["b"], e["opcode_a"], e["opcode_b"]) == ("add.11", "add.11", "add", "subtract")
    assert e["status"] == "differ" and e["max_abs_diff"] > 0.1 and len(e["where"]) == 2
    line = next(k for k, t in enumerate((DIFF / "model.broken.hlo").read_text().splitlines(), 1) if "subtract(" in t)
    assert e["location_b"].endswith(f"model.broken.hlo:{line}")
    chain = {c["b"]: c["status"] for c in e["chain"]}
    assert chain["dot_general.1"] == "agree" and chain["x.1"] == "agree" and chain["b.1"] == "agree"
    # the text form says the same
    res = hlo("diff", DIFF / "model.hlo", DIFF / "model.broken.hlo", "--inputs", DIFF / "inputs.npz")
    assert res.exit_code == 1
    assert "A add.11" in res.stdout and "add vs subtract" in res.stdout and "verdict: the results differ" in res.stdout


def test_broken_after_optimizations_found_inside_a_fusion_in_a_loop():
    """model.opt.broken.hlo: in the loop body's fusion, the multiply by 0.9 became an add. diff
    matches the fused instruction to the original multiply of the called computation (before
    CallInliner) and names it first, at the loop's first iteration."""
    text = (DIFF / "model.opt.broken.hlo").read_text()
    name = re.search(r"%(mul\.\d+) = f32\[4,6\]\{1,0\} add\(", text).group(1)
    r = _diff(DIFF / "model.hlo", DIFF / "model.opt.broken.hlo", DIFF / "inputs.npz")
    assert r.verdict == "differ"
    doc = r.to_json()
    e = doc["first_differences"][0]
    assert e["b"] == name and e["opcode_a"] == "multiply" and e["opcode_b"] == "add"
    assert e["a"] == "mul.1" and e["computation_a"] == "closed_call.1"
    assert e.get("first_differing_execution") == 1 and e["executions"] == 3
    assert e["source_b"].endswith("make.py:30")
    assert len(doc["first_differences"]) == 1


def test_spilling_gives_the_same_report(tmp_path):
    """A's values written to a temporary directory (no memory budget) compare the same."""
    a = _diff(DIFF / "model.hlo", DIFF / "model.opt.broken.hlo", DIFF / "inputs.npz").to_json()
    b = _diff(DIFF / "model.hlo", DIFF / "model.opt.broken.hlo", DIFF / "inputs.npz", keep_bytes=0).to_json()
    assert b["memory"]["spilled_bytes"] > 0 and b["memory"]["kept_peak_bytes"] == 0
    a.pop("memory"), b.pop("memory")
    assert a == b


# ----------------------------------------------------------------------------- hand-written pairs

A_TEXT = """HloModule m
ENTRY e {
  x = f32[2,3] parameter(0)
  y = f32[2,3] parameter(1)
  s = f32[2,3] add(x, y)
  r = f32[6] reshape(s)
  n = f32[6] negate(r)
  old = f32[2,3] multiply(x, x)
  ROOT t = (f32[6], f32[2,3]) tuple(n, old)
}
"""

B_TEXT = """HloModule m
ENTRY e {
  x = f32[2,3] parameter(0)
  y = f32[2,3] parameter(1)
  s = f32[2,3] add(y, x)
  r = f32[6] bitcast(s)
  n = f32[6] negate(r)
  extra = f32[2,3] sine(x)
  new = f32[2,3] multiply(x, extra)
  ROOT t = (f32[6], f32[2,3]) tuple(n, new)
}
"""


def test_only_in_one_and_reshapes():
    """Instructions only one module has are listed; a bitcast stands for its operand; the second
    result differs, with no matched instruction to blame (new reads extra, only in B)."""
    a, b = hlo_cli.parse(A_TEXT), hlo_cli.parse(B_TEXT)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    r = diff_modules(a, b, [x, x + 1])
    doc = r.to_json()
    assert doc["only_in_a"] == ["old"]
    assert doc["only_in_b"] == ["extra", "new"]
    assert [x["key"] for x in doc["results"] if x["status"] == "differ"] == ["out1"]
    assert doc["verdict"] == "differ"
    pairs = {p["b"]: p for p in doc["pairs"]}
    assert pairs["s"]["status"] == "agree" and pairs["n"]["status"] == "agree"
    assert "only in A: 1 instruction (old)" in format_text(r)


def test_values_of_another_shape_compare_after_a_reshape():
    a = hlo_cli.parse("HloModule m\nENTRY e {\n  x = f32[2,3] parameter(0)\n  ROOT n = f32[2,3] negate(x)\n}\n")
    b = hlo_cli.parse("HloModule m\nENTRY e {\n  x = f32[2,3] parameter(0)\n  r = f32[6] reshape(x)\n"
                      "  n = f32[6] negate(r)\n  ROOT o = f32[2,3] reshape(n)\n}\n")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    r = diff_modules(a, b, [x])
    assert r.results_agree
    p = {e["b"]: e for e in r.to_json()["pairs"]}
    assert p["n"]["a"] == "n" and p["n"]["status"] == "agree" and "reshape" in p["n"]["note"]


def test_json_contract(hlo):
    res = hlo("diff", DIFF / "model.hlo", DIFF / "model.opt.hlo", "--inputs", DIFF / "inputs.npz", "--format", "json")
    assert res.exit_code == 0
    doc = json.loads(res.stdout)
    for k in ("verdict", "results_agree", "pairs", "first_differences", "only_in_a", "only_in_b", "a", "b"):
        assert k in doc
    assert doc["verdict"] == "agree" and doc["results_agree"] is True
    assert doc["a"].endswith("model.hlo") and doc["b"].endswith("model.opt.hlo")
    for p in doc["pairs"]:
        for k in ("a", "b", "computation_a", "computation_b", "status", "max_abs_diff", "max_rel_diff", "where"):
            assert k in p
        assert p["status"] in ("agree", "differ", "skipped")


# ----------------------------------------------------------------------------- exit codes, bad inputs

def test_random_inputs_and_text(hlo):
    res = hlo("diff", DIFF / "model.hlo", DIFF / "model.opt.hlo", "--random-inputs", "--seed", "3")
    assert res.exit_code == 0, res.stderr
    assert "verdict: the results agree" in res.stdout


def test_missing_file(hlo):
    res = hlo("diff", DIFF / "model.hlo", "nope.hlo", "--random-inputs")
    assert res.exit_code == 2 and "nope.hlo" in res.stderr


def test_no_inputs(hlo):
    res = hlo("diff", DIFF / "model.hlo", DIFF / "model.opt.hlo")
    assert res.exit_code == 2 and "--random-inputs" in res.stderr


def test_parameter_count_differs(hlo, tmp_path):
    p = tmp_path / "one.hlo"
    p.write_text("HloModule m\nENTRY e {\n  x = f32[4,8] parameter(0)\n  ROOT n = f32[4,8] negate(x)\n}\n")
    res = hlo("diff", DIFF / "model.hlo", p, "--random-inputs")
    assert res.exit_code == 2 and "different numbers of parameters" in res.stderr and "takes 3" in res.stderr


def test_parameter_shape_differs(hlo, tmp_path):
    (tmp_path / "a.hlo").write_text("HloModule m\nENTRY e {\n  x = f32[3] parameter(0)\n  ROOT n = f32[3] negate(x)\n}\n")
    (tmp_path / "b.hlo").write_text("HloModule m\nENTRY e {\n  x = f32[4] parameter(0)\n  ROOT n = f32[4] negate(x)\n}\n")
    res = hlo("diff", "a.hlo", "b.hlo", "--random-inputs")
    assert res.exit_code == 2
    assert "parameter 0 differs: A's 'x' is f32[3], B's 'x' is f32[4]" in res.stderr


def test_bad_tolerance(hlo):
    res = hlo("diff", DIFF / "model.hlo", DIFF / "model.opt.hlo", "--random-inputs", "--rtol", "-1")
    assert res.exit_code == 2


# ----------------------------------------------------------------------------- a law

_UNARY = ["negate", "tanh", "abs", "exponential"]
_BINARY = ["add", "multiply", "subtract", "maximum", "minimum"]


@st.composite
def _programs(draw):
    n = draw(st.integers(1, 8))
    lines, names = ["  p0 = f32[3] parameter(0)", "  p1 = f32[3] parameter(1)"], ["p0", "p1"]
    for k in range(n):
        if draw(st.booleans()):
            op = draw(st.sampled_from(_UNARY))
            lines.append(f"  v{k} = f32[3] {op}({draw(st.sampled_from(names))})")
        else:
            op = draw(st.sampled_from(_BINARY))
            lines.append(f"  v{k} = f32[3] {op}({draw(st.sampled_from(names))}, {draw(st.sampled_from(names))})")
        names.append(f"v{k}")
    lines.append(f"  ROOT r = (f32[3], f32[3]) tuple({names[-1]}, {draw(st.sampled_from(names))})")
    return "HloModule m\nENTRY e {\n" + "\n".join(lines) + "\n}\n"


@settings(max_examples=25, deadline=None)
@given(_programs(), st.integers(0, 2 ** 16))
def test_a_module_against_itself_agrees_everywhere(text, seed):
    m = hlo_cli.parse(text)
    rng = np.random.default_rng(seed)
    args = [rng.standard_normal(3).astype(np.float32) for _ in range(2)]
    r = diff_modules(m, hlo_cli.parse(text), args)
    assert r.verdict == "agree"
    assert not r.only_in_a and not r.only_in_b
    for s in r.states.values():
        assert s.status == "agree" and s.a == s.b
        assert s.how in ("name", "parameter")


# ----------------------------------------------------------------------------- devices

SPMD = ROOT / "samples" / "spmd"


def test_devices_before_and_after_partitioning(hlo):
    """A module before SPMD partitioning (global values) against the partitioned one (one value per
    device): the same global inputs, the results compared as global arrays (B's reassembled by A's
    ROOT sharding); values held differently are not compared, never compared after a reshape."""
    res = hlo("diff", SPMD / "mlp_train_step_2x4.hlo", SPMD / "mlp_train_step_2x4.opt.hlo",
              "--inputs", SPMD / "mlp_train_step_2x4.inputs.npz", "--format", "json")
    assert res.exit_code == 0, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    assert doc["results_agree"] and len(doc["results"]) == 5
    assert all("global values" in r["note"] for r in doc["results"] if r.get("note"))
    assert doc["summary"]["differing"] == 0
    skipped = [p for p in doc["pairs"] if p["status"] == "skipped"]
    assert skipped and all("A's value is one for all devices, B's" in p["note"] for p in skipped)


def test_edited_constant_is_named_first(tmp_path):
    """A copy of model.hlo whose loop-body constant 0.9 became 0.8: the constant is named first (a
    constant matched by name with another value, confirmed by its user)."""
    text = (DIFF / "model.hlo").read_text()
    edited = text.replace("constant.6 = f32[] constant(0.9)", "constant.6 = f32[] constant(0.8)")
    assert edited != text
    (tmp_path / "edited.hlo").write_text(edited)
    r = _diff(DIFF / "model.hlo", tmp_path / "edited.hlo", DIFF / "inputs.npz")
    first = r.to_json()["first_differences"]
    assert [(e["a"], e["b"], e["a_value"], e["b_value"]) for e in first] == [("constant.6", "constant.6", "0.9", "0.8")]


def test_matching_by_value_extends_the_matching():
    """XLA's rewrites that keep values (max(x, -inf) -> x, degenerate broadcasts...) break the
    structure; values equal bit for bit anchor the matching again, and what follows them is
    matched by structure and compared (a second run): more matched, everything agrees."""
    a = hlo_cli.parse_file(str(JAX / "mlp_train_step.hlo"))
    b = hlo_cli.parse_file(str(JAX / "mlp_train_step.opt.hlo"))
    args = _args(JAX / "mlp_train_step.inputs.npz", a)
    plain = diff_modules(a, b, args, anchor_values=False)
    anchored = diff_modules(a, b, args)
    assert anchored.summary()["matched"] > plain.summary()["matched"]
    assert len(anchored.only_in_b) < len(plain.only_in_b)
    assert anchored.summary()["matched_by"].get("value", 0) > 0
    assert anchored.summary()["differing"] == 0 and anchored.summary()["skipped"] == 0
    assert anchored.results_agree


def test_cli_usage_and_check_errors(hlo, tmp_path):
    res = hlo("diff", "-", "-", "--random-inputs", input="HloModule m\n")
    assert res.exit_code == 2 and "only one of A and B can be standard input" in res.stderr
    (tmp_path / "bad.hlo").write_text("HloModule m\nENTRY e {\n  x = f32[3] parameter(0)\n  ROOT n = f32[4] negate(x)\n}\n")
    res = hlo("diff", "bad.hlo", DIFF / "model.hlo", "--random-inputs")
    assert res.exit_code == 1 and "found by the checker" in res.stderr
    res = hlo("diff", DIFF / "model.hlo", DIFF / "model.opt.hlo", "--random-inputs", "--keep-memory", "lots")
    assert res.exit_code == 2 and "is not a size" in res.stderr


def test_executions_limit(hlo):
    """--executions 1: the loop body's instructions are compared at their first execution only; the
    edited multiply of model.opt.broken.hlo is still found (it differs at once)."""
    res = hlo("diff", DIFF / "model.hlo", DIFF / "model.opt.broken.hlo", "--inputs", DIFF / "inputs.npz",
              "--executions", "1", "--format", "json")
    assert res.exit_code == 1
    doc = json.loads(res.stdout)
    e = doc["first_differences"][0]
    assert e["opcode_b"] == "add" and e["executions"] == 3 and e["compared_executions"] == 1


@pytest.mark.slow
def test_live_jax_pair(tmp_path):
    """A pair JAX makes now (XLA CPU): a small attention-like step with a scan, before vs after
    XLA's optimizations: the results agree with XLA's own, every matched value agrees, nothing is
    left uncompared; a broken copy of the optimized text is found inside its fusion."""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy

    def f(q, k, v):
        s = jax.nn.softmax(q @ k.T / 4.0, axis=-1)
        o = s @ v

        def body(c, x):
            c = jnp.tanh(c + x)
            return c, c.sum()
        c, ys = jax.lax.scan(body, o[0], o)
        return c, ys, jnp.max(o, axis=0)

    rng = np.random.default_rng(1)
    args = [rng.standard_normal((6, 4)).astype(np.float32) for _ in range(3)]
    lowered = jax.jit(f).lower(*args)
    a = hlo_cli.parse(lowered.as_text("hlo"))
    opt = lowered.compile().as_text()
    b = hlo_cli.parse(opt)
    r = diff_modules(a, b, args)
    assert r.results_agree and r.summary()["differing"] == 0 and r.summary()["skipped"] == 0, format_text(r)
    want = jax.jit(f)(*args)
    got = hlo_cli.run(b, *args)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-6, atol=1e-6)
    m = re.search(r"(%(\w+\.\d+) = f32\[[\d,]*\]\{[\d,]*\} )tanh\(", opt)
    assert m, "no tanh in the optimized text"
    broken = hlo_cli.parse(opt.replace(m.group(0), m.group(1) + "sine(", 1))
    r = diff_modules(a, broken, args)
    first = r.to_json()["first_differences"]
    assert first and first[0]["b"] == m.group(2) and first[0]["opcode_b"] == "sine"


def test_results_both_modules_fill_with_nan_agree_and_say_so(hlo, tmp_path):
    """A NaN hunt: the same NaN in both results agrees, and the report says the result holds it."""
    (tmp_path / "m.hlo").write_text("HloModule m\nENTRY e {\n  x = f32[4] parameter(0)\n  l = f32[4] log(x)\n"
                                    "  ROOT r = (f32[4], f32[4]) tuple(l, x)\n}\n")
    np.save(tmp_path / "x.npy", np.array([1, -1, 2, -3], np.float32))
    res = hlo("diff", "m.hlo", "m.hlo", "--input", "x.npy")
    assert res.exit_code == 0, res.stderr
    assert "out0: agree (max |diff| 0; both hold NaN/Inf in 2 of 4 elements)" in res.stdout
    assert "note: out0 holds NaN or Inf in both modules" in res.stdout
    res = hlo("diff", "m.hlo", "m.hlo", "--input", "x.npy", "--format", "json")
    rows = json.loads(res.stdout)["results"]
    assert rows[0]["nonfinite"] == 2 and "nonfinite" not in rows[1]


def test_two_stages_of_a_dump_directory(hlo):
    """`hlo diff DIR DIR --stage-a X --stage-b Y`: two stages of an XLA pass dump, by name."""
    d = Path(__file__).resolve().parents[2] / "samples" / "dumps" / "passes"
    res = hlo("diff", d, d, "--module-a", "jit_step", "--module-b", "jit_step", "--stage-a", "before_optimizations",
              "--stage-b", "cse", "--random-inputs")
    assert res.exit_code == 0, res.stderr
    assert "before_optimizations" in res.stdout and ".after_cse." in res.stdout
    res = hlo("diff", d, DIFF / "model.hlo", "--random-inputs")
    assert res.exit_code == 2 and "--module-a NAME --stage-a" in res.stderr and "Traceback" not in res.stderr
    res = hlo("diff", DIFF / "model.hlo", DIFF / "model.hlo", "--stage-b", "cse", "--random-inputs")
    assert res.exit_code == 2 and "--stage-b picks a stage of an XLA dump directory" in res.stderr


def test_output_sharding_when_neither_root_says_how_devices_make_the_results(hlo, tmp_path):
    """A JAX function leaves its output sharding to XLA: the text before optimization has none on its
    ROOT and the partitioned one holds per-device results. --output-sharding says how they go
    together; without it the results are not compared, and the message says what to give."""
    d = Path(__file__).resolve().parents[2] / "samples" / "dumps" / "sharded"
    text = (d / "module_0010.jit_f.before_optimizations.txt").read_text()
    root = ", sharding={{replicated}, {devices=[4,2]<=[8]}}"
    assert root in text
    (tmp_path / "a.hlo").write_text(text.replace(root, ""))
    b = d / "module_0010.jit_f.cpu_after_optimizations.txt"
    res = hlo("diff", "a.hlo", b, "--random-inputs")
    assert res.exit_code == 1 and "NOT COMPARED" in res.stdout and "--output-sharding" in res.stdout
    res = hlo("diff", "a.hlo", b, "--random-inputs", "--output-sharding", "{{replicated}, {devices=[4,2]<=[8]}}")
    assert res.exit_code == 0, res.stdout + res.stderr
    assert "out1: agree" in res.stdout
    res = hlo("diff", "a.hlo", b, "--random-inputs", "--output-sharding", "{garbage")
    assert res.exit_code == 2 and "not an HLO sharding" in res.stderr and "Traceback" not in res.stderr
