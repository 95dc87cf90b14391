"""`hlo bisect` (hlo_cli/bisect.py, cli/bisect.py) on a real pass dump XLA CPU wrote for a small JAX
step (samples/dumps/passes) and on copies of it with a deliberately broken pass: the loop's constant
0.5 edited to 0.25 in the snapshot after the pass and in every later one, as a wrong pass would
leave it.  Bisect must name that pass and the diff that constant; a bisection runs at most
2 + ceil(log2(distinct texts - 1)) snapshots.  Small lists of files check the search itself
(identical texts, unrunnable stages, contradictions).  Never a traceback."""
from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from hlo_cli.tools.bisect import AGREES, DIFFERS, FAILED, bisect, bisection_bound
from hlo_cli.cli import main
from hlo_cli.sources.dumpdir import read_dump_dir, stages_from_files

ROOT = Path(__file__).resolve().parents[2]
PASSES = ROOT / "samples" / "dumps" / "passes"
LOOP_CONSTANT = re.compile(r'constant\(0\.5\)(, metadata=\{op_name="jit\(step\)/while/body/closed_call")')


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


def broken_copy(tmp_path: Path, number: int) -> Path:
    """The sample with the loop constant changed in stage NUMBER and every later one."""
    d = tmp_path / f"broken_{number}"
    shutil.copytree(PASSES, d)
    edited = 0
    for f in sorted(d.glob("module_0008.jit_step.*.txt")):
        m = re.search(r"\.(\d{4})\.", f.name)
        if (m and int(m.group(1)) >= number) or f.name.endswith(".cpu_after_optimizations.txt"):
            text = f.read_text()
            new, n = LOOP_CONSTANT.subn(r"constant(0.25)\1", text)
            assert n == 1, f.name
            f.write_text(new)
            edited += 1
    assert edited == 45 - number + 1
    return d


def test_every_stage_of_the_real_dump_agrees(run):
    r = run("bisect", PASSES, "--module", "jit_step", "--random-inputs")
    assert r.exit_code == 0, r.output
    assert "every stage agrees" in r.stdout
    assert "ran 2 of 47 stages (26 distinct texts" in r.stdout
    r = run("bisect", PASSES, "--module", "jit_step", "--random-inputs", "--all", "--format", "json")
    assert r.exit_code == 0
    doc = json.loads(r.stdout)
    assert doc["status"] == "agree" and doc["runs"] == 26 and doc["distinct_texts"] == 26
    assert {e["status"] for e in doc["results"]} == {"reference", "agrees"}


@pytest.mark.parametrize("number, pass_name, pipeline", [
    (13, "algsimp", "simplification"),
    (26, "cse", "HLO_passes_through_layout_assignment"),
    (35, "fusion", "HLO_passes_after_layout_assignment"),
])
def test_a_broken_pass_is_named_and_the_diff_names_the_constant(run, tmp_path, number, pass_name, pipeline):
    d = broken_copy(tmp_path, number)
    r = run("bisect", d, "--module", "jit_step", "--random-inputs", "--format", "json")
    assert r.exit_code == 1, r.output
    doc = json.loads(r.stdout)
    assert doc["status"] == "differs" and doc["exit_code"] == 1
    bad, good = doc["first_bad"], doc["last_good"]
    assert (bad["number"], bad["pass"], bad["pipeline"]) == (number, pass_name, pipeline)
    assert good["index"] == bad["index"] - 1
    assert doc["runs"] <= doc["bisection_bound"] == bisection_bound(doc["distinct_texts"])
    assert [e["status"] for e in doc["log"]][:2] == ["reference", "differs"]
    assert not doc["contradictions"]
    first = doc["diff"]["first_differences"]
    # the changed constant, or (once fusion has put it inside a fused computation) its broadcast or
    # the multiply it feeds: halved where 0.5 became 0.25
    changed = [e for e in first if e["opcode_b"] in ("constant", "broadcast", "multiply")
               and float(e["b_value"]) == pytest.approx(float(e["a_value"]) / 2)]
    assert changed, first
    c = changed[0]
    assert c["status"] == "differ"
    assert doc["diff"]["verdict"] == "differ"
    # the text report: the verdict, the files, the log, the diff naming the constant
    r = run("bisect", d, "--module", "jit_step", "--random-inputs")
    assert r.exit_code == 1
    assert f"first bad stage: #{bad['index']} {number:04d} {pipeline}: after {pass_name}" in r.stdout
    assert f"pass {pass_name} in pipeline {pipeline} changed the results" in r.stdout
    assert f"after:  {bad['file']}" in r.stdout and f"before: {good['file']}" in r.stdout
    assert re.search(r"run\s+bad\s+#%d\b" % bad["index"], r.stdout)
    assert f"B {c['b']} " in r.stdout and f"(A {c['a_value']} vs B {c['b_value']})" in r.stdout


def test_exhaustive_runs_every_distinct_text(run, tmp_path):
    d = broken_copy(tmp_path, 26)
    r = run("bisect", d, "--module", "jit_step", "--random-inputs", "--all", "--no-diff", "--format", "json")
    assert r.exit_code == 1
    doc = json.loads(r.stdout)
    assert doc["runs"] == 26 and doc["first_bad"]["pass"] == "cse" and "diff" not in doc


def _files(tmp_path: Path, values, bad_text: dict | None = None) -> list[str]:
    """One tiny module per value (x + {value, 1}); BAD_TEXT[k] replaces stage k's text."""
    out = []
    for k, v in enumerate(values):
        p = tmp_path / f"s{k:03d}.hlo"
        text = (bad_text or {}).get(k) or (
            "HloModule m\n\nENTRY main {\n  x = f32[2] parameter(0)\n"
            f"  c = f32[2] constant({{{v}, 1}})\n  ROOT r = f32[2] add(x, c)\n}}\n")
        p.write_text(text)
        out.append(str(p))
    return out


ARGS = [np.array([1, 2], np.float32)]


@pytest.mark.parametrize("n", [2, 3, 8, 33])
def test_the_number_of_runs_is_logarithmic(tmp_path, n):
    for k in (range(1, n) if n < 10 else (1, 2, 15, 16, 17, 31, 32)):
        # every text different (value k / 1000 stays within the tolerance), the results change at k
        values = [j / 1e6 if j < k else 5 + j / 1e6 for j in range(n)]
        d = tmp_path / f"{n}_{k}"
        d.mkdir()
        report = bisect(stages_from_files(_files(d, values)), ARGS, diff=False, use_cache=False)
        assert report.status == "differs"
        assert report.first_bad.index == k and report.last_good.index == k - 1
        assert report.ran <= 2 + math.ceil(math.log2(n - 1)) == bisection_bound(n)


def test_identical_texts_are_not_run(tmp_path):
    values = [1, 1, 1, 1, 2, 2, 2, 1.0000001, 3, 3]
    report = bisect(stages_from_files(_files(tmp_path, values)), ARGS, diff=False)
    assert report.distinct == 4
    assert report.first_bad.index == 4
    # stages with the text of a stage already run are known
    assert report.ran <= bisection_bound(4)
    assert all(report.outcomes[k].status == AGREES and not report.outcomes[k].ran for k in (1, 2, 3))
    assert report.to_dict()["results"][2]["status"] == "agrees"


def test_a_result_known_from_an_identical_text_can_contradict(tmp_path):
    values = [1, 1, 2, 2, 1, 2, 2, 2, 2]
    report = bisect(stages_from_files(_files(tmp_path, values)), ARGS, diff=False, exhaustive=True)
    assert report.first_bad.index == 2
    assert [o.stage.index for o in report.contradictions] == [4]
    assert report.outcomes[4].status == AGREES and not report.outcomes[4].ran
    assert report.ran == 2                      # two distinct texts


BAD_SHAPE = "HloModule m\n\nENTRY main {\n  x = f32[2] parameter(0)\n  ROOT r = f32[3] add(x, x)\n}\n"


def test_stages_that_cannot_run_are_skipped(tmp_path):
    values = [0, 0, 0, 0, 9, 9, 9, 9]
    files = _files(tmp_path, values, {3: BAD_SHAPE, 2: BAD_SHAPE.replace("f32[3]", "f32[4]")})
    report = bisect(stages_from_files(files), ARGS, diff=False)
    # only unrunnable stages between the last good and the first bad: the range is the verdict
    assert report.status == "undecided"
    lo, hi = report.undecided
    assert (lo.index, hi.index) == (1, 4)
    assert {report.outcomes[k].status for k in (2, 3)} == {FAILED}
    assert "checker" in report.outcomes[3].error


def test_every_runnable_stage_agrees(run, tmp_path):
    """The stages that ran agree, but one could not be run: no verdict (exit 8), never "agree"."""
    files = _files(tmp_path, [0, 0, 0], {2: BAD_SHAPE})
    r = run("bisect", *files, "--random-inputs")
    assert r.exit_code == 8, r.output
    assert ("no verdict: the stages that could be run agree with the first (#0-#1), but 1 stage could not "
            "be run") in r.stdout
    assert "#2 s002.hlo: the checker rejects it" in r.stdout
    assert "(--to s001.hlo bisects the stages up to the last one that ran)" in r.stdout
    doc = json.loads(run("bisect", *files, "--random-inputs", "--format", "json").stdout)
    assert doc["status"] == "undecided" and doc["exit_code"] == 8 and [s["index"] for s in doc["skipped"]] == [2]
    assert doc["open"]["agreeing"] == [0, 1] and [s["index"] for s in doc["open"]["could_not_run"]] == [2]


def test_skipped_stage_then_a_neighbour(tmp_path):
    values = [0, 0, 0, 0, 0, 9, 9, 9]
    files = _files(tmp_path, values, {3: BAD_SHAPE})
    report = bisect(stages_from_files(files), ARGS, diff=False)
    assert report.status == "differs" and report.first_bad.index == 5 and report.last_good.index == 4
    assert report.outcomes.get(3) is None or report.outcomes[3].status == FAILED


def test_the_cli_on_a_list_of_files(run, tmp_path):
    files = _files(tmp_path, [0, 0, 7, 7])
    np.save(tmp_path / "x.npy", ARGS[0])
    r = run("bisect", *files, "--input", tmp_path / "x.npy")
    assert r.exit_code == 1, r.output
    assert "first bad stage: #2 s002.hlo" in r.stdout
    assert "file s002.hlo changed the results" in r.stdout
    assert "c (constant f32[2]" in r.stdout or " c " in r.stdout       # the diff names the constant
    r = run("bisect", *files[:2], "--input", tmp_path / "x.npy", "--format", "json")
    assert r.exit_code == 0 and json.loads(r.stdout)["status"] == "agree"


def test_the_first_stage_must_run(run, tmp_path):
    files = _files(tmp_path, [0, 0, 7], {0: BAD_SHAPE})
    r = run("bisect", *files, "--random-inputs")
    assert r.exit_code == 1
    assert "the first snapshot (s000.hlo) cannot be run" in r.stderr


@pytest.mark.parametrize("case", ["empty", "no dumps", "unknown module", "one file", "no inputs", "one stage",
                                  "unreadable", "dir and files", "module with files", "bad tolerance"])
def test_errors(run, tmp_path, case):
    x = tmp_path / "x"
    x.mkdir()
    args = ["bisect", x, "--random-inputs"]
    want = 2
    if case == "empty":
        fragment = "the directory is empty"
    elif case == "no dumps":
        _files(x, [1])
        fragment = "no XLA module dump here"
    elif case == "unknown module":
        args = ["bisect", PASSES, "--module", "jit_nope", "--random-inputs"]
        fragment = "no module of this name"
    elif case == "one file":
        args = ["bisect", _files(x, [1])[0], "--random-inputs"]
        fragment = "two files or more"
    elif case == "no inputs":
        args = ["bisect", PASSES, "--module", "jit_step"]
        fragment = "pass --input/--inputs, --snapshot, or --random-inputs"
    elif case == "one stage":
        shutil.copy(PASSES / "module_0008.jit_step.before_optimizations.txt", x)
        fragment = "bisecting needs the module dumped after its passes"
    elif case == "unreadable":
        files = _files(x, [0, 0, 1, 1])
        Path(files[2]).write_bytes(b"HloModule m\n\x00\x01")
        args = ["bisect", *files, "--random-inputs", "--all"]
        fragment = "unexpected NUL character"
    elif case == "dir and files":
        args = ["bisect", PASSES, *_files(x, [0]), "--random-inputs"]
        fragment = "a directory among several paths"
    elif case == "module with files":
        args = ["bisect", *_files(x, [0, 1]), "--module", "m", "--random-inputs"]
        fragment = "--module chooses a module of a dump directory"
    else:
        args = ["bisect", *_files(x, [0, 1]), "--random-inputs", "--rtol", "-1"]
        fragment = "must not be negative"
    r = run(*args)
    assert r.exit_code == want, r.output
    assert fragment in r.stderr, r.stderr
    if case in ("empty", "unknown module"):
        r = run(*args, "--format", "json")
        doc = json.loads(r.stdout)
        assert doc["status"] == "error" and doc["exit_code"] == 2 and fragment in doc["message"]


def test_library_outcomes_on_the_real_dump(tmp_path):
    from hlo_cli.interpreter.inputs import random_inputs
    from hlo_cli.sources import load
    m = read_dump_dir(broken_copy(tmp_path, 26)).module("jit_step")
    first, _ = load(m.stages[0].path)
    report = bisect(m, random_inputs(first.entry_computation.parameters, 0))
    assert report.first_bad.pass_name == "cse"
    assert report.outcomes[report.first_bad.index].status == DIFFERS
    assert report.outcomes[report.last_good.index].status in (AGREES, "reference")
    assert report.diff is not None and report.diff.verdict == "differ"
    doc = report.to_dict()
    assert doc["first_bad"]["selector"] == "cse" and doc["runs"] == report.ran


SHARDED = ROOT / "samples" / "dumps" / "sharded"


def test_a_sharded_module_through_spmd_partitioning(run):
    """The stages after SPMD partitioning are per-device programs without shardings: they run on the
    8 devices on the global inputs cut by the reference stage's parameter shardings, and their
    results are put together by its ROOT sharding."""
    r = run("bisect", SHARDED, "--random-inputs", "--all", "--format", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["status"] == "agree" and not doc["skipped"]
    assert doc["runs"] == doc["distinct_texts"] == 9
    passes = [e["stage"] for e in doc["log"]]
    assert "0006 spmd-partitioner: after spmd-partitioning" in passes


def test_a_broken_spmd_partitioning(run, tmp_path):
    d = tmp_path / "sharded"
    shutil.copytree(SHARDED, d)
    for f in d.glob("*.txt"):
        m = re.search(r"\.(\d{4})\.", f.name)
        if (m and int(m.group(1)) >= 6) or f.name.endswith(".cpu_after_optimizations.txt"):
            text = f.read_text()
            assert text.count("constant(0.5)") == 1
            f.write_text(text.replace("constant(0.5)", "constant(0.25)"))
    r = run("bisect", d, "--random-inputs", "--format", "json")
    assert r.exit_code == 1, r.output
    doc = json.loads(r.stdout)
    assert (doc["first_bad"]["pipeline"], doc["first_bad"]["pass"]) == ("spmd-partitioner", "spmd-partitioning")
    assert doc["runs"] <= doc["bisection_bound"]
    row = next(x for x in doc["log"] if x["index"] == doc["first_bad"]["index"])["comparison"][0]
    assert row["status"] == "mismatch" and float(row["want"]) == pytest.approx(2 * float(row["got"]), rel=1e-4)


def test_a_shell_pattern_over_one_module_is_put_in_pass_order(run, tmp_path):
    """`hlo bisect dump/module_0008.*` lists the files alphabetically (before_optimizations after
    step 0044, buffer assignments among them): XLA's names give the order back."""
    d = broken_copy(tmp_path, 26)
    files = sorted(str(f) for f in d.glob("module_0008.*"))
    files.reverse()
    r = run("bisect", *files, "--random-inputs", "--format", "json", "--no-diff")
    assert r.exit_code == 1, r.output
    doc = json.loads(r.stdout)
    assert doc["snapshots"] == 47 and doc["first_bad"]["pass"] == "cse"
    assert doc["log"][0]["stage"] == "before_optimizations"
    assert "4 of the files given are not module stages and are left out" in r.stderr
    m = stages_from_files(files)
    assert [s.index for s in m.stages] == list(range(47)) and m.pass_order and m.name == "jit_step"
    assert not stages_from_files(_files(tmp_path, [1, 2])).pass_order


def test_a_range_of_stages(run, tmp_path):
    d = broken_copy(tmp_path, 26)
    r = run("bisect", d, "--module", "jit_step", "--random-inputs", "--from", "algsimp#5", "--to", "fusion",
            "--format", "json", "--no-diff")
    assert r.exit_code == 1, r.output
    doc = json.loads(r.stdout)
    assert doc["snapshots"] == 14 and doc["log"][0]["index"] == 23 and doc["first_bad"]["index"] == 27
    assert doc["results"][0] == {"stage": "0022 simplification: after algsimp", "index": 23, "status": "reference"}
    # from the broken stage on, every stage agrees with it
    r = run("bisect", d, "--module", "jit_step", "--random-inputs", "--from", "cse")
    assert r.exit_code == 0 and "every stage agrees" in r.stdout
    r = run("bisect", d, "--module", "jit_step", "--random-inputs", "--from", "fusion", "--to", "cse")
    assert r.exit_code == 2 and "--to cse comes before --from fusion" in r.stderr
    r = run("bisect", d, "--module", "jit_step", "--random-inputs", "--from", "nope")
    assert r.exit_code == 2 and "--from nope: no stage of this name" in r.stderr
