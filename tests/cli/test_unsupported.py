"""Tools that degrade honestly when hlo cannot run an instruction (a custom-call target the registry
does not run): `hlo run` refuses before running with exit code 7, naming every such target once with
its location and what to do; `hlo check` warns (W300) per target; `hlo info` lists the custom calls,
runnable or not; `hlo diff` compares every value up to where a module stopped (exit 7 when nothing
differed); `hlo bisect` that could not compare everything never says "agree" (exit 8, undecided).

Cases built here call a target nobody registers (`my_unknown_target`), so they hold whatever GPU
targets hlo learns to run.  Real GPU dumps (samples/gpu/dumps/dir, ../shared/gpu) are checked for the
structure of the answers only: which of their GPU calls run changes as hlo learns them."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from hlo_cli import HloEvalError, HloUnsupportedError, parse, run as run_module
from hlo_cli.cli import main
from hlo_cli.errors import ExitCode
from hlo_cli.pipeline.support import check_runnable, custom_calls, unrunnable
from run_harness import hlo  # noqa: F401  (the fixture: the CLI, never a traceback)

ROOT = Path(__file__).resolve().parents[2]
DIR = ROOT / "samples" / "gpu" / "dumps" / "dir"
CONV = "jit_dump_convnet_step"
SHARED = Path("/work/shared/gpu")

# two unknown targets (one called twice, one inside a called computation), after a few runnable values
UNKNOWN = """HloModule two_unknown, entry_computation_layout={(f32[4]{0})->f32[4]{0}}

helper {
  h = f32[4]{0} parameter(0)
  ROOT k = f32[4]{0} custom-call(h), custom_call_target="my_other_target"
}

ENTRY main {
  x = f32[4]{0} parameter(0)
  two = f32[4]{0} constant({2, 2, 2, 2})
  y = f32[4]{0} multiply(x, two)
  z = f32[4]{0} add(y, x)
  a = f32[4]{0} custom-call(z), custom_call_target="my_unknown_target"
  b = f32[4]{0} custom-call(a), custom_call_target="my_unknown_target"
  c = f32[4]{0} call(b), to_apply=helper
  ROOT r = f32[4]{0} add(c, x)
}
"""

# what an "optimized" text of the same program looks like when hlo cannot run one step of it
A_TEXT = """HloModule prog, entry_computation_layout={(f32[4]{0})->f32[4]{0}}

ENTRY main {
  x = f32[4]{0} parameter(0)
  two = f32[4]{0} constant({2, 2, 2, 2})
  y = f32[4]{0} multiply(x, two)
  z = f32[4]{0} add(y, x)
  w = f32[4]{0} negate(z)
  ROOT r = f32[4]{0} add(w, x)
}
"""
B_TEXT = A_TEXT.replace("w = f32[4]{0} negate(z)",
                        'w = f32[4]{0} custom-call(z), custom_call_target="my_unknown_target"')
B_DIFFERS = B_TEXT.replace("add(y, x)", "subtract(y, x)")


def _file(tmp_path, text, name="m.hlo") -> Path:
    f = tmp_path / name
    f.write_text(text)
    return f


# ----------------------------------------------------------------------------- the library

def test_the_scan_finds_every_target_once_with_its_calls():
    m = parse(UNKNOWN, "u.hlo")
    uses = custom_calls(m)
    assert [(u.target, u.count, u.runnable) for u in uses] == [("my_other_target", 1, False),
                                                               ("my_unknown_target", 2, False)]
    assert [i.name for _, i in uses[1].sites] == ["a", "b"] and uses[1].locations() == ["u.hlo:13:3", "u.hlo:14:3"]
    with pytest.raises(HloUnsupportedError) as e:
        check_runnable(m)
    err = e.value
    assert err.exit_code == ExitCode.UNSUPPORTED == 7 and isinstance(err, HloEvalError)
    assert [d.location for d in err.diagnostics] == ["u.hlo:5:8", "u.hlo:13:3"]
    assert [d.code for d in err.diagnostics] == ["R020", "R020"]
    text = err.format()
    assert text.startswith("u.hlo: error: hlo cannot run this module: 2 custom-call targets (3 calls)")
    assert "u.hlo:13:3: %a and 1 more (b): 'my_unknown_target' is not a target hlo knows" in text
    assert text.count("my_unknown_target") == 1 and "what to do:" in text


def test_registered_targets_are_runnable(monkeypatch):
    """The registry decides: a target registered here (its table entry and its handler, as other
    modules register theirs) runs."""
    from hlo_cli.interpreter import custom_call_targets as table
    from hlo_cli.interpreter.ops import custom_call as cc
    text = UNKNOWN.replace("my_other_target", "hlo.test.identity_for_support")
    assert [u.target for u in unrunnable(parse(text))] == ["hlo.test.identity_for_support", "my_unknown_target"]
    monkeypatch.setattr(table, "NAMES", table.NAMES | {"hlo.test.identity_for_support"})

    @cc.target("hlo.test.identity_for_support")
    def identity(inst, args, ec):
        return args[0]
    try:
        assert [u.target for u in unrunnable(parse(text))] == ["my_unknown_target"]
        only = text.replace('custom_call_target="my_unknown_target"', 'custom_call_target="hlo.test.identity_for_support"')
        assert unrunnable(parse(only)) == []
        got = run_module(only, np.arange(4, dtype=np.float32))
        assert np.allclose(got, np.arange(4) * 4)
        # a handler may refuse one configuration of its target (the table lists it as refusing)
        identity.refuses = lambda inst: "this configuration is not implemented"
        monkeypatch.setattr(table, "REFUSING", table.REFUSING | {"hlo.test.identity_for_support"})
        assert [u.reason for u in unrunnable(parse(only))] == ["this configuration is not implemented"]
        with pytest.raises(HloUnsupportedError) as e:
            check_runnable(parse(only))
        assert "'hlo.test.identity_for_support': this configuration is not implemented" in e.value.format()
    finally:
        cc.TARGETS.pop("hlo.test.identity_for_support", None)


def test_the_interpreter_raises_the_typed_error_too():
    with pytest.raises(HloUnsupportedError) as e:
        run_module(B_TEXT, np.ones(4, np.float32))
    assert e.value.exit_code == 7 and "my_unknown_target" in e.value.format()


# ----------------------------------------------------------------------------- hlo run / check / info

def test_run_refuses_before_running_and_names_every_target(hlo, tmp_path):
    f = _file(tmp_path, UNKNOWN)
    r = hlo("run", f, "--random-inputs")
    assert r.exit_code == 7, r.output
    err = r.stderr
    assert f"{f}: error: hlo cannot run this module: 2 custom-call targets (3 calls)" in err
    assert f"{f}:5:8: %k: 'my_other_target' is not a target hlo knows" in err
    assert f"{f}:13:3: %a and 1 more (b): 'my_unknown_target' is not a target hlo knows" in err
    assert "the module is not wrong" in err and "what to do:" in err and "custom-call registry" in err
    r = hlo("run", f, "--random-inputs", "--format", "json")
    assert r.exit_code == 7
    doc = json.loads(r.stdout)
    assert doc["status"] == "unsupported" and doc["exit_code"] == 7 and doc["hint"].startswith("what to do")
    assert [(u["target"], u["count"], u["locations"]) for u in doc["unsupported"]] == [
        ("my_other_target", 1, [f"{f}:5:8"]), ("my_unknown_target", 2, [f"{f}:13:3", f"{f}:14:3"])]


def test_a_checker_error_comes_first(hlo, tmp_path):
    f = _file(tmp_path, UNKNOWN.replace("ROOT r = f32[4]{0} add(c, x)", "ROOT r = f32[5]{0} add(c, x)"))
    r = hlo("run", f, "--random-inputs")
    assert r.exit_code == 1 and "declared shape" in r.stderr


def test_check_warns_once_per_target(hlo, tmp_path):
    f = _file(tmp_path, UNKNOWN)
    r = hlo("check", f)
    assert r.exit_code == 0, r.output
    warns = [ln for ln in r.stderr.splitlines() if "W300" in ln or "hlo cannot run" in ln]
    assert len(warns) == 2, r.stderr
    assert f"{f}:13:3: warning: %a: 'my_unknown_target' is not a target hlo knows (2 calls), which hlo cannot run" \
        in r.stderr
    assert "exit 7" in r.stderr and "ok (" in r.stdout and "2 warnings" in r.stdout
    doc = json.loads(hlo("check", f, "--format", "json").stdout)
    w = [d for d in doc["files"][0]["diagnostics"] if d["code"] == "W300"]
    assert [(d["line"], d["instruction"]) for d in w] == [(5, "k"), (13, "a")]
    r = hlo("check", f, "--no-warnings")
    assert r.exit_code == 0 and "W300" not in r.stderr and "hlo cannot run" not in r.stderr


def test_info_lists_the_custom_calls(hlo, tmp_path):
    f = _file(tmp_path, UNKNOWN.replace('custom_call_target="my_other_target"', 'custom_call_target="Sharding"'))
    doc = json.loads(hlo("info", f, "--format", "json").stdout)
    assert [(c["target"], c["count"], c["runnable"]) for c in doc["custom_calls"]] == [
        ("Sharding", 1, True), ("my_unknown_target", 2, False)]
    assert doc["custom_calls"][1]["first"] == f"{f}:13:3"
    r = hlo("info", f)
    assert r.exit_code == 0
    rows = {ln.split()[0]: ln for ln in r.stdout.splitlines() if ln.strip().startswith(("Sharding", "my_unknown"))}
    assert re.search(r"\b2\b.*\bno\b", rows["my_unknown_target"]) and re.search(r"\b1\b.*\byes\b", rows["Sharding"])
    assert "hlo cannot run 1 of these targets" in r.stdout


def test_help_lists_the_new_exit_codes():
    r = CliRunner().invoke(main, ["--help"])
    text = " ".join(r.stdout.split())
    assert "7 hlo cannot run the module" in text and "8 hlo bisect undecided" in text


# ----------------------------------------------------------------------------- hlo diff

def test_diff_compares_up_to_where_a_module_stopped(hlo, tmp_path):
    a, b = _file(tmp_path, A_TEXT, "a.hlo"), _file(tmp_path, B_TEXT, "b.hlo")
    r = hlo("diff", a, b, "--random-inputs")
    assert r.exit_code == 7, r.output
    out = r.stdout
    assert f"B STOPPED after 4 instructions, at {b}:8:3: %w: custom-call target 'my_unknown_target'" in out
    assert "out0: NOT COMPARED (not compared: B stopped at %w)" in out
    assert "verdict: incomplete: no value compared differs, up to where B stopped" in out
    doc = json.loads(hlo("diff", a, b, "--random-inputs", "--format", "json").stdout)
    assert doc["verdict"] == "incomplete" and set(doc["stopped"]) == {"b"}
    st = doc["stopped"]["b"]
    assert (st["instruction"], st["location"], st["instructions_run"]) == ("w", f"{b}:8:3", 4)
    assert {p["b"]: p["status"] for p in doc["pairs"]} == {"x": "agree", "two": "agree", "y": "agree", "z": "agree"}


def test_diff_a_difference_before_the_stop_is_a_verdict(hlo, tmp_path):
    a, b = _file(tmp_path, A_TEXT, "a.hlo"), _file(tmp_path, B_DIFFERS, "b.hlo")
    r = hlo("diff", a, b, "--random-inputs", "--format", "json")
    assert r.exit_code == 1, r.output
    doc = json.loads(r.stdout)
    assert doc["verdict"] == "differ" and [e["b"] for e in doc["first_differences"]] == ["z"]
    # A stopping: B's values after it are not compared, and say why
    r = hlo("diff", _file(tmp_path, B_TEXT, "stops.hlo"), a, "--random-inputs", "--format", "json")
    assert r.exit_code == 7
    doc = json.loads(r.stdout)
    assert set(doc["stopped"]) == {"a"}
    notes = {p["b"]: p.get("note") for p in doc["pairs"] if p["status"] == "skipped"}
    assert notes and all("A stopped before" in n and "%w" in n for n in notes.values())


# ----------------------------------------------------------------------------- hlo bisect

def test_bisect_that_compared_nothing_is_undecided(hlo, tmp_path):
    files = [_file(tmp_path, B_TEXT, "s0.hlo"), _file(tmp_path, A_TEXT, "s1.hlo")]
    r = hlo("bisect", *files, "--random-inputs")
    assert r.exit_code == 8, r.output
    assert "no verdict: the first stage, #0 s0.hlo, cannot be run, so nothing was compared" in r.stdout
    assert "hlo cannot run it: 'my_unknown_target' (1 call, first at line 8)" in r.stdout
    doc = json.loads(hlo("bisect", *files, "--random-inputs", "--format", "json").stdout)
    assert doc["status"] == "undecided" and doc["exit_code"] == 8 and doc["runs"] == 1
    assert doc["open"]["could_not_run"][0]["unsupported"] is True


def test_bisect_with_stages_it_cannot_run_is_undecided(hlo, tmp_path):
    files = [_file(tmp_path, A_TEXT, "s0.hlo"), _file(tmp_path, A_TEXT.replace("two = f32", "two  = f32"), "s1.hlo"),
             _file(tmp_path, B_TEXT, "s2.hlo")]
    r = hlo("bisect", *files, "--random-inputs")
    assert r.exit_code == 8, r.output
    assert "no verdict: the stages that could be run agree with the first (#0-#1), but 1 stage could not" in r.stdout
    assert "#2 s2.hlo: hlo cannot run it: 'my_unknown_target'" in r.stdout and "what to do:" in r.stdout
    assert "every stage" not in r.stdout
    doc = json.loads(hlo("bisect", *files, "--random-inputs", "--all", "--format", "json").stdout)
    assert doc["status"] == "undecided" and doc["exit_code"] == 8
    assert [s["index"] for s in doc["open"]["could_not_run"]] == [2] and doc["open"]["agreeing"] == [0, 1]
    assert "(--to s1.hlo bisects the stages up to the last one that ran)" in r.stdout
    r = hlo("bisect", *files, "--random-inputs", "--from", "s1.hlo")
    assert r.exit_code == 8 and "agree with the first (#1)" in r.stdout and "(--to s1.hlo bisects" in r.stdout
    assert hlo("bisect", *files, "--random-inputs", "--to", "s1.hlo").exit_code == 0


# ----------------------------------------------------------------------------- real GPU dumps

def _gpu_stage(tmp_path, which: str) -> Path:
    return next(DIR.glob(f"module_541803.{CONV}.{which}.txt"))


def test_run_a_real_gpu_text_names_what_it_cannot_run(hlo, tmp_path):
    """Structure only: exit 7 with every unrunnable target located, or a run (once hlo runs them all)."""
    f = _gpu_stage(tmp_path, "sm_9.0a_gpu_after_optimizations")
    r = hlo("run", f, "--random-inputs", "--format", "json")
    doc = json.loads(r.stdout)
    assert r.exit_code in (0, 7), r.output
    info = json.loads(hlo("info", f, "--format", "json").stdout)["custom_calls"]
    bad = [c for c in info if not c["runnable"]]
    assert sum(c["count"] for c in info) == 8 and all(c["target"].startswith("__cudnn$conv") for c in info)
    if r.exit_code == 7:
        assert doc["status"] == "unsupported"
        assert [u["target"] for u in doc["unsupported"]] == [c["target"] for c in bad]
        assert all(len(u["locations"]) == u["count"] for u in doc["unsupported"])
        assert len(r.stderr.split("what to do:")) == 2
        w = [d for d in json.loads(hlo("check", f, "--format", "json").stdout)["files"][0]["diagnostics"]
             if d["code"] == "W300"]
        assert len(w) == len(bad)
    else:
        assert not bad


def test_bisect_a_real_gpu_dump_never_agrees_without_comparing(hlo):
    r = hlo("bisect", DIR, "--module", CONV, "--random-inputs", "--format", "json")
    doc = json.loads(r.stdout)
    unrun = [o for o in doc["log"] if o["status"] == "cannot run"]
    if unrun:
        assert r.exit_code == 8 and doc["status"] == "undecided", r.output
        assert all(o.get("unsupported") for o in unrun)
        assert doc["open"]["agreeing"][0] == 0
    else:
        assert r.exit_code in (0, 1) and doc["status"] in ("agree", "differs")


@pytest.mark.slow
@pytest.mark.skipif(not (SHARED / "cases").is_dir(), reason="../shared/gpu/cases is not here")
@pytest.mark.parametrize("case", ["depthwise_conv_grad", "attention_cudnn_bf16", "linalg_f32", "int8_matmul"])
def test_diff_before_and_after_a_gpu_compilation(hlo, case):
    """Each text runs up to the first library call hlo cannot run yet (JAX puts cuDNN attention and
    cuSOLVER calls into the text before optimization already): never a traceback, the verdict says
    where it stopped (or, once hlo runs them all, compares)."""
    c = SHARED / "cases"
    r = hlo("diff", c / f"{case}.pre.hlo", c / f"{case}.post.hlo", "--inputs", c / f"{case}.inputs.npz",
            "--format", "json", "--rtol", "0.05", "--atol", "0.05")
    assert r.exit_code in (0, 1, 7), r.output
    doc = json.loads(r.stdout)
    if r.exit_code == 7:
        assert doc["verdict"] == "incomplete" and doc["stopped"]
        for st in doc["stopped"].values():
            assert re.fullmatch(r".*\.(pre|post)\.hlo:\d+:\d+", st["location"]) and st["instruction"]
