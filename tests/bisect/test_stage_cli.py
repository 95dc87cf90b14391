"""`hlo run/check/info/fmt DIR --module NAME --stage S` on an XLA pass dump (samples/dumps/passes), and
`hlo info DIR` listing its modules and stages.  Files keep their meaning of --module; a dump
directory without --stage is a usage error that says how to choose.  Never a traceback."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from hlo_cli.cli import main

ROOT = Path(__file__).resolve().parents[2]
PASSES = ROOT / "samples" / "dumps" / "passes"
CSE = PASSES / ("module_0008.jit_step.0026.HLO_passes_through_layout_assignment.after_cse."
                "before_cse_barrier_expander.txt")


@pytest.fixture()
def run(monkeypatch, tmp_path):
    monkeypatch.setenv("HLO_CACHE_DIR", str(tmp_path / "cache"))

    def _run(*args):
        r = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
        for stream in (r.stdout, r.stderr):
            assert "Traceback" not in stream, stream
            assert "internal error" not in stream, stream
        return r
    return _run


def test_info_lists_the_modules_then_the_stages(run):
    r = run("info", PASSES)
    assert r.exit_code == 0, r.output
    assert "an XLA dump: 2 modules" in r.stdout
    assert re.search(r"module_0008\s+│\s+jit_step\s+│\s+47\s+│\s+45", r.stdout)
    r = run("info", PASSES, "--module", "jit_step")
    assert r.exit_code == 0
    assert "47 in pass order, 26 with a new text" in r.stdout
    assert re.search(r"27 │ 0026 │ HLO_passes_through_layout_… │ cse\s+│ yes\s+│ cse", r.stdout) or \
        re.search(r"27 │ 0026 │ HLO_passes_through_layout_assignment\s+│ cse\s+│ yes\s+│ cse", r.stdout), r.stdout
    doc = json.loads(run("info", PASSES, "--module", "8", "--format", "json").stdout)
    assert doc["kind"] == "xla-dump" and doc["module"]["name"] == "jit_step"
    stages = doc["stages"]
    assert len(stages) == 47 and sum(s["changed"] for s in stages) == 26
    assert stages[27]["selector"] == "cse" and stages[27]["file"] == str(CSE)
    assert stages[9]["selector"] == "algsimp#1"
    doc = json.loads(run("info", PASSES, "--format", "json").stdout)
    assert [m["name"] for m in doc["modules"]] == ["jit_convert_element_type", "jit_step"]


def test_info_of_a_stage(run):
    r = run("info", PASSES, "--module", "jit_step", "--stage", "cse", "--format", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["file"] == str(CSE) and doc["module"] == "jit_step"


def test_run_a_stage(run, tmp_path):
    r = run("run", PASSES, "--module", "jit_step", "--stage", "fusion", "--random-inputs", "--format", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["module_file"].endswith("after_fusion.before_fusion-wrapper.txt")
    before = json.loads(run("run", PASSES, "--module", "jit_step", "--stage", "before_optimizations",
                            "--random-inputs", "--format", "json").stdout)
    assert [x["mean"] for x in before["results"]] == pytest.approx([x["mean"] for x in doc["results"]], rel=1e-6)


def test_a_pass_that_ran_several_times(run):
    """A pass name that names several stages is never a silent choice: the matches are listed."""
    r = run("fmt", PASSES, "--module", "jit_step", "--stage", "algsimp")
    assert r.exit_code == 2 and r.stdout == ""
    assert "--stage algsimp: 5 stages of module_0008 jit_step match; choose one" in r.stderr
    assert "algsimp#1  0008 simplification: after algsimp" in r.stderr
    assert "algsimp#5  0022 simplification: after algsimp" in r.stderr
    assert "Traceback" not in r.output
    r2 = run("fmt", PASSES, "--module", "jit_step", "--stage", "algsimp#1")
    assert r2.exit_code == 0 and r2.stdout.startswith("HloModule jit_step") and "note" not in r2.stderr
    r = r2
    r3 = run("fmt", PASSES, "--module", "jit_step", "--stage", "simplification:algsimp#last")
    assert r3.exit_code == 0 and r3.stdout != r.stdout


def test_check_a_stage_and_a_module(run):
    r = run("check", PASSES, "--module", "jit_step", "--stage", "after_optimizations")
    assert r.exit_code == 0, r.output
    assert "jit_step.cpu_after_optimizations.txt: ok" in r.stdout
    r = run("check", PASSES, "--module", "jit_convert_element_type", "--format", "json")
    assert r.exit_code == 0
    doc = json.loads(r.stdout)
    assert doc["summary"]["modules"] == 2 and all("jit_convert_element_type" in f["file"] for f in doc["files"])
    # the whole directory, as before: every file that holds a module
    doc = json.loads(run("check", PASSES, "--format", "json").stdout)
    assert doc["summary"]["modules"] == 49 and doc["summary"]["skipped"] == 4


def test_module_keeps_its_meaning_for_files(run):
    lit = ROOT / "samples" / "multi" / "lit_three_modules.hlo"
    r = run("check", lit, "--module", "1", "--format", "json")
    assert r.exit_code == 0
    doc = json.loads(r.stdout)
    assert [f["index"] for f in doc["files"]] == [1]
    r = run("info", lit, "--module", "1", "--format", "json")
    assert json.loads(r.stdout)["index"] == 1


@pytest.mark.parametrize("args, fragment", [
    (["run", PASSES, "--random-inputs"], "an XLA dump directory (2 modules); choose a stage with --module NAME"),
    (["fmt", PASSES, "--module", "jit_step"], "choose a stage with --module NAME --stage"),
    (["run", CSE, "--stage", "cse", "--random-inputs"], "--stage picks a stage of an XLA dump directory"),
    (["info", PASSES, "--stage", "cse"], "holds 2 modules; choose one with --module"),
    (["info", PASSES, "--module", "jit_step", "--stage", "nope"], "--stage nope: no stage of this name"),
    (["check", PASSES, "--module", "jit_step", "--stage", "algsimp#7"], "algsimp occurs 5 times"),
    (["info", PASSES, "--module", "jit_nope"], "--module jit_nope: no module of this name"),
])
def test_usage_errors(run, args, fragment):
    r = run(*args)
    assert r.exit_code == 2, r.output
    assert fragment in r.stderr, r.stderr


PROTOS = ROOT / "samples" / "dumps" / "protos"


def test_a_dump_of_module_protos(run):
    """--xla_dump_hlo_as_proto: every stage an HloModuleProto (*.hlo.pb), read as text dumps are."""
    doc = json.loads(run("info", PROTOS, "--format", "json").stdout)
    assert doc["module"]["name"] == "jit_small" and len(doc["module"]["snapshots"]) == 1
    assert "(executions' arguments: hlo bisect uses them)" in run("info", PROTOS).stdout
    stages = doc["stages"]
    assert len(stages) == 22 and all(s["file"].endswith(".hlo.pb") for s in stages)
    assert stages[0]["kind"] == "before_optimizations" and stages[-1]["kind"] == "after_optimizations"
    r = run("run", PROTOS, "--stage", "fusion", "--random-inputs", "--format", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["module_file"].endswith(".after_fusion.before_fusion-wrapper.hlo.pb")
    r = run("bisect", PROTOS, "--random-inputs", "--all", "--format", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["status"] == "agree" and doc["runs"] == doc["distinct_texts"] == 4


def test_bisect_takes_the_inputs_of_the_module_s_snapshot(run, tmp_path):
    """--xla_dump_hlo_snapshots: the arguments of the execution XLA recorded are the inputs."""
    snap = next(PROTOS.glob("module_0004.jit_small.snapshot.*.pb"))
    r = run("bisect", PROTOS, "--format", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["inputs"] == {"snapshot": str(snap)} and doc["status"] == "agree"
    r = run("bisect", PROTOS, "--snapshot", snap)
    assert r.exit_code == 0 and f"inputs: the arguments recorded in {snap}" in r.stdout
    r = run("bisect", PROTOS, "--snapshot", snap, "--random-inputs")
    assert r.exit_code == 2 and "--random-inputs and --snapshot cannot be combined" in r.stderr
    only = tmp_path / "only"
    only.mkdir()
    (only / snap.name).write_bytes(snap.read_bytes())
    r = run("bisect", only, "--random-inputs")
    assert r.exit_code == 2 and "1 of them HloSnapshots (hlo run SNAPSHOT.pb replays one" in r.stderr
