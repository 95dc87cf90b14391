"""Every command on files with several modules and on dump directories (click's CliRunner): `info`
lists the modules, `check` and `fmt` do all of them, `run`/`info`/`fmt` take --module N|NAME, and a
missing or wrong choice is a usage error (exit 2) that lists the modules.  Never a traceback."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from hlo_cli.cli import main

ROOT = Path(__file__).resolve().parent.parent
MULTI = ROOT / "samples" / "multi"
LIT = MULTI / "lit_three_modules.hlo"
SAVED = MULTI / "saved_graphs.txt"
DUMP = MULTI / "dump"

BAD_SECOND = """HloModule good

ENTRY main {
  x = f32[2] parameter(0)
  ROOT y = f32[2] negate(x)
}

// -----

HloModule bad

ENTRY main {
  x = f32[2] parameter(0)
  y = f32[3] parameter(1)
  ROOT z = f32[2] add(x, y)
}
"""

SYNTAX_SECOND = BAD_SECOND.replace("ROOT z = f32[2] add(x, y)", "ROOT z = f32[2] frobnicate(x, y)")


@pytest.fixture()
def run(monkeypatch, tmp_path):
    monkeypatch.setenv("HLO_CACHE_DIR", str(tmp_path / "cache"))

    def _run(*args, input=None):
        r = CliRunner().invoke(main, [str(a) for a in args], input=input, catch_exceptions=False)
        for stream in (r.stdout, r.stderr):
            assert "Traceback" not in stream, stream
            assert "internal error" not in stream, stream
        return r
    return _run


def _rows(out: str) -> dict:
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in re.split(r"[│┃|]", line)]
        if len(cells) == 5 and ("#" in cells[0] or cells[0].endswith((".hlo", ".txt"))):
            rows[cells[0]] = cells[1:]
    return rows


# ----------------------------------------------------------------------------- info

def test_info_lists_the_modules_of_a_lit_test(run):
    r = run("info", LIT)
    assert r.exit_code == 0, r.stderr
    assert "3 modules: modules separated by '// -----'" in r.stdout
    for name, line in (("add_vectors", 6), ("scale_and_shift", 18), ("pick_max", 34)):
        assert re.search(rf"│ {name}\s+│\s+{line} │", r.stdout), r.stdout


def test_info_json_lists_modules_and_skipped_graphs(run):
    r = run("info", SAVED, "--format", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["layout"] == "saved-graphs" and doc["file"] == str(SAVED)
    assert [(m["index"], m["module"], m["line"], m["status"]) for m in doc["modules"]] == [
        (0, "IrToHlo.6", 24, "ok"), (1, "IrToHlo.11", 44, "ok")]
    assert doc["modules"][1]["opcodes"] == {"parameter": 2, "dot": 1, "tuple": 1}
    assert doc["modules"][1]["signature"] == "(p0.1: f32[2,2], p1.2: f32[2,2]) -> (f32[2,2])"
    assert len(doc["skipped_graphs"]) == 1 and doc["skipped_graphs"][0]["line"] == 8
    assert "lazy-tensor IR" in doc["skipped_graphs"][0]["kind"]


def test_info_module_option_summarizes_one(run):
    r = run("info", LIT, "--module", "pick_max", "--format", "json")
    assert r.exit_code == 0, r.stderr
    s = json.loads(r.stdout)
    assert (s["module"], s["index"], s["line"], s["computations"]) == ("pick_max", 2, 34, 2)
    r = run("info", LIT, "-m", "1")
    assert r.exit_code == 0 and "scale_and_shift" in r.stdout and "module #1 at line 18" in r.stdout


@pytest.mark.parametrize("which", ["7", "no_such_module"])
def test_wrong_module_choice_is_a_usage_error(run, which):
    for cmd in ("info", "fmt", "run"):
        r = run(cmd, LIT, "--module", which)
        assert r.exit_code == 2, (cmd, r.output)
        assert f"--module {which}: no module" in r.stderr
        assert "#1 scale_and_shift (line 18)" in r.stderr


def test_info_with_a_bad_module_lists_the_others_and_exits_1(run, tmp_path):
    f = tmp_path / "two.hlo"
    f.write_text(SYNTAX_SECOND)
    r = run("info", f, "--format", "json")
    assert r.exit_code == 1
    doc = json.loads(r.stdout)
    assert [m["status"] for m in doc["modules"]] == ["ok", "error"]
    bad = doc["modules"][1]
    line = SYNTAX_SECOND.split("\n").index("  ROOT z = f32[2] frobnicate(x, y)") + 1
    assert bad["diagnostics"][0]["line"] == line and "frobnicate" in bad["diagnostics"][0]["message"]
    assert f"{f}:{line}:" in r.stderr


# ----------------------------------------------------------------------------- check

def test_check_does_every_module_with_file_positions(run, tmp_path):
    f = tmp_path / "two.hlo"
    f.write_text(BAD_SECOND)
    r = run("check", f)
    assert r.exit_code == 1
    line = BAD_SECOND.split("\n").index("  ROOT z = f32[2] add(x, y)") + 1
    assert f"{f}:{line}:" in r.stderr and "%z: add:" in r.stderr
    assert "  ROOT z = f32[2] add(x, y)" in r.stderr          # the source line under the message
    rows = _rows(r.stdout)
    assert rows[f"{f} #0 good"][:2] == ["ok", "0"]
    assert rows[f"{f} #1 bad"][:2] == ["errors", "1"]
    assert "2 modules in 1 file: 1 ok, 1 with errors" in r.stdout


def test_check_json_has_an_entry_per_module(run):
    r = run("check", "--format", "json", LIT, SAVED)
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [(Path(e["file"]).name, e["index"], e["module"], e["status"]) for e in doc["files"]] == [
        ("lit_three_modules.hlo", 0, "add_vectors", "ok"), ("lit_three_modules.hlo", 1, "scale_and_shift", "ok"),
        ("lit_three_modules.hlo", 2, "pick_max", "ok"), ("saved_graphs.txt", 0, "IrToHlo.6", "ok"),
        ("saved_graphs.txt", 1, "IrToHlo.11", "ok")]
    assert doc["files"][1]["warnings"] == 3 and len(doc["files"][1]["diagnostics"]) == 3   # JSON lists them all
    assert doc["summary"]["files"] == 2 and doc["summary"]["modules"] == 5
    assert doc["skipped"] == [{"file": str(SAVED), "line": 8,
                               "reason": "a saved graph in lazy-tensor IR text (XLA_SAVE_TENSORS_FMT=text)"}]


def test_check_dump_directory_skips_other_files(run, tmp_path):
    r = run("check", DUMP)
    assert r.exit_code == 0, r.stderr
    assert r.stderr == ""
    rows = _rows(r.stdout)
    assert sorted(Path(k).name for k in rows) == ["module_0002.jit__lambda.before_optimizations.txt",
                                                  "module_0002.jit__lambda.cpu_after_optimizations.txt"]
    assert ("2 files: 2 ok, 0 with errors; 5 other files skipped (4 reports, 1 config) (--verbose lists them)"
            in r.stdout)
    r = run("check", "--verbose", DUMP)
    assert r.exit_code == 0
    assert re.search(r"live-range\.txt: skipped: XLA's live ranges", r.stderr)
    assert re.search(r"debug_options: skipped: the XLA flags that differ from their defaults", r.stderr)
    r = run("check", "--format", "json", DUMP)
    doc = json.loads(r.stdout)
    assert len(doc["files"]) == 2 and doc["summary"]["skipped"] == 5 and len(doc["skipped"]) == 5


def test_check_directory_without_modules_is_unusable(run, tmp_path):
    shutil.copy(DUMP / "module_0002.jit__lambda.cpu_after_optimizations-live-range.txt", tmp_path / "lr.txt")
    r = run("check", tmp_path)
    assert r.exit_code == 2
    assert "no HLO module text in this directory" in r.stderr
    assert "1 other file skipped" in r.stdout


def test_check_saved_graphs_file_without_hlo_graphs(run, tmp_path):
    f = tmp_path / "ir.txt"
    f.write_text("[SyncTensorsGraph]\n\n## BEGIN_GRAPH\nIR {\n  %0 = f32[] prim::Constant()\n}\n\n## END_GRAPH\n")
    for cmd in (["check"], ["info"], ["fmt"], ["run", "--random-inputs"]):
        r = run(*cmd, f)
        assert r.exit_code == 2, (cmd, r.output)
        assert "no HLO module here" in r.stderr and "XLA_SAVE_TENSORS_FMT=hlo" in r.stderr


def test_check_reads_a_lit_test_from_stdin(run):
    r = run("check", "-", input=BAD_SECOND)
    assert r.exit_code == 1
    assert "<stdin> #1 bad" in r.stdout and "<stdin>:15:" in r.stderr


# ----------------------------------------------------------------------------- fmt

def test_fmt_prints_every_module_with_its_separator(run, tmp_path):
    r = run("fmt", LIT)
    assert r.exit_code == 0, r.stderr
    out = r.stdout
    assert out.count("\n// -----\n") == 2 and "CHECK" not in out
    f = tmp_path / "canon.hlo"
    f.write_text(out)
    r2 = run("fmt", "--check", f)
    assert r2.exit_code == 0 and r2.stderr == ""
    assert run("fmt", f).stdout == out                          # idempotent
    r3 = run("info", f, "--format", "json")
    assert [m["module"] for m in json.loads(r3.stdout)["modules"]] == ["add_vectors", "scale_and_shift", "pick_max"]


def test_fmt_check_names_the_modules_out_of_form(run, tmp_path):
    r = run("fmt", "--check", LIT)
    assert r.exit_code == 1 and r.stdout == ""
    assert "not in canonical form (modules #0 add_vectors (line 6), #1 scale_and_shift (line 18)" in r.stderr
    canon = run("fmt", LIT).stdout
    f = tmp_path / "spaced.hlo"
    f.write_text(canon.replace("\n// -----\n\n", "\n\n// -----\n\n"))
    r = run("fmt", "--check", f)
    assert r.exit_code == 1 and "(the text between its modules)" in r.stderr


def test_fmt_saved_graphs_and_one_module(run):
    r = run("fmt", SAVED)
    assert r.exit_code == 0, r.stderr
    assert r.stdout.startswith("## BEGIN_GRAPH\nHloModule IrToHlo.6")
    assert r.stdout.count("## BEGIN_GRAPH\n") == 2 and r.stdout.endswith("## END_GRAPH\n")
    assert "IR {" not in r.stdout and "Hashes" not in r.stdout
    r = run("fmt", SAVED, "--module", "1")
    assert r.stdout.startswith("HloModule IrToHlo.11") and "BEGIN_GRAPH" not in r.stdout


def test_fmt_prints_nothing_when_a_module_has_errors(run, tmp_path):
    f = tmp_path / "two.hlo"
    f.write_text(SYNTAX_SECOND)
    r = run("fmt", f)
    assert r.exit_code == 1 and r.stdout == ""
    assert "frobnicate" in r.stderr
    r = run("fmt", f, "-m", "good")
    assert r.exit_code == 0 and r.stdout.startswith("HloModule good")


# ----------------------------------------------------------------------------- run

def test_run_asks_which_module(run):
    r = run("run", LIT, "--random-inputs")
    assert r.exit_code == 2
    assert "holds 3 HLO modules; choose one with --module N (0-based) or --module NAME" in r.stderr
    for entry in ("#0 add_vectors (line 6)", "#1 scale_and_shift (line 18)", "#2 pick_max (line 34)"):
        assert entry in r.stderr
    r = run("run", LIT, "--random-inputs", "--format", "json")
    assert r.exit_code == 2
    doc = json.loads(r.stdout)
    assert doc["status"] == "error" and doc["diagnostics"][0]["code"] == "E081"


@pytest.mark.parametrize("which", ["2", "pick_max"])
def test_run_one_module_of_a_lit_test(run, tmp_path, which):
    v = np.array([1.5, -3.0, 7.25, 0.0, 2.0], np.float32)
    np.save(tmp_path / "v.npy", v)
    r = run("run", LIT, "--module", which, "-i", tmp_path / "v.npy", "-o", tmp_path / "out.npz", "--format", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["module"] == "pick_max"
    assert np.load(tmp_path / "out.npz")["out0"] == np.float32(7.25)


def test_run_a_saved_graph(run, tmp_path):
    a = np.arange(4, dtype=np.float32).reshape(2, 2)
    b = np.array([[1, 2], [3, 4]], np.float32)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    r = run("run", SAVED, "-m", "IrToHlo.11", "-i", tmp_path / "a.npy", "-i", tmp_path / "b.npy",
            "-o", tmp_path / "out.npz")
    assert r.exit_code == 0, r.output
    assert np.array_equal(np.load(tmp_path / "out.npz")["out0"], a @ b)
