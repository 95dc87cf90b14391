"""`hlo check` on the command line (click's CliRunner): exit codes 0/1/2, the located message with
its source line and caret, JSON for CI, several files and directories summarized in a table,
unreadable files among good ones, --layout-sensitive, broadcasting notes, warnings and
--no-warnings, and never a traceback."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from hlo_cli.cli import main

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
GOOD = SAMPLES / "jax" / "mlp_train_step.opt.hlo"

# FILE:LINE:COL: error: %name: <opcode>: <what> must <constraint>, got <actual> for <operand shapes>
LOCATED = re.compile(r"^(?P<file>.+?):(?P<line>\d+):(?P<col>\d+): (?P<sev>error|warning): "
                     r"%(?P<name>[^:\s]+): (?P<op>[a-z][a-z0-9-]*): (?P<rest>.*)$")
TEMPLATE = re.compile(r"\S.* must .+, got .+ for \(.*\)$")

BAD = """HloModule bad

ENTRY main {
  x = f32[2,3] parameter(0)
  y = f32[3] parameter(1)
  a = f32[2,3] add(x, y)
  n = f32[3,2] negate(x)
  ROOT t = (f32[2,3], f32[3,2]) tuple(a, n)
}
"""

WARN = """HloModule warn

ENTRY main {
  x = f32[4] parameter(0)
  k = f32[4] constant({...})
  unused = f32[4] negate(x)
  ROOT s = f32[4] add(x, k)
}
"""

LAYOUT = """HloModule layout

ENTRY main {
  x = f32[2,3]{1,0} parameter(0)
  ROOT n = f32[2,3]{0,1} negate(x)
}
"""


@pytest.fixture()
def run(monkeypatch, tmp_path):
    monkeypatch.setenv("HLO_CACHE_DIR", str(tmp_path / "cache"))

    def _run(*args, input=None):
        result = CliRunner().invoke(main, ["check", *map(str, args)], input=input, catch_exceptions=False)
        for stream in (result.output, result.stdout, result.stderr):
            assert "Traceback" not in stream, stream
        return result
    return _run


@pytest.fixture()
def files(tmp_path):
    def _write(name: str, text: str | bytes) -> Path:
        p = tmp_path / name
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            p.write_bytes(text)
        else:
            p.write_text(text)
        return p
    return _write


# ----------------------------------------------------------------------------- exit codes

def test_clean_module_exits_0(run):
    r = run(GOOD)
    assert r.exit_code == 0, r.stderr
    assert re.search(r"mlp_train_step\.opt\.hlo: ok \(\d+ instructions checked\)", r.stdout)
    assert r.stderr == ""


def test_module_with_errors_exits_1(run, files):
    r = run(files("bad.hlo", BAD))
    assert r.exit_code == 1
    assert r.stdout == ""


@pytest.mark.parametrize("args", [
    ["does-not-exist.hlo"],
    ["--format", "yaml", str(GOOD)],
    ["--no-such-option", str(GOOD)],
    [],
])
def test_usage_errors_and_missing_files_exit_2(run, args):
    r = run(*args)
    assert r.exit_code == 2, r.output


def test_unreadable_inputs_exit_2(run, files, tmp_path):
    empty = files("empty.hlo", "")
    binary = files("blob.hlo", b"\x08\x01\x12\x00\x00\xff\x00binary\x00")
    (tmp_path / "nothing_here").mkdir()
    for p in (empty, binary, tmp_path / "nothing_here"):
        r = run(p)
        assert r.exit_code == 2, (p, r.output)
        assert r.stderr.strip(), p


def test_syntax_errors_exit_1_with_location(run):
    path = SAMPLES / "invalid" / "syntax_missing_equals.hlo"
    r = run(path)
    assert r.exit_code == 1
    assert re.search(rf"{re.escape(str(path))}:5:10: error: ", r.stderr)


# ----------------------------------------------------------------------------- the message

def test_message_format_with_source_line_and_caret(run, files):
    path = files("bad.hlo", BAD)
    r = run(path)
    lines = r.stderr.splitlines()
    heads = [k for k, line in enumerate(lines) if LOCATED.match(line)]
    assert len(heads) == 2, r.stderr              # every problem, not just the first
    got = []
    for k in heads:
        m = LOCATED.match(lines[k])
        assert m["file"] == str(path) and m["sev"] == "error"
        assert TEMPLATE.match(m["rest"]), lines[k]
        line, col = int(m["line"]), int(m["col"])
        src = BAD.splitlines()[line - 1]
        # the instruction's line, then a caret under the column
        assert lines[k + 1] == "  " + src
        assert lines[k + 2] == "  " + " " * (col - 1) + "^"
        got.append((m["name"], m["op"], line, col))
    assert got == [("a", "add", 6, 16), ("n", "negate", 7, 7)]
    # the declared shape against the inferred one, in HLO notation
    assert "the declared shape must equal the inferred shape f32[2,3], got f32[3,2] for (f32[2,3])" in r.stderr


def test_broadcasting_suggestion(run, files):
    r = run(files("bad.hlo", BAD))
    text = r.stderr
    assert "HLO has no implicit broadcasting" in text
    assert "would broadcast to [2,3] under XLA's client rules" in text
    assert "%y becomes f32[2,3] broadcast(%y), dimensions={1}" in text
    # the note comes after the caret of its diagnostic
    lines = text.splitlines()
    k = next(i for i, line in enumerate(lines) if line.startswith("  note:"))
    assert lines[k - 1].strip() == "^" and LOCATED.match(lines[k - 3])


def test_broadcasting_impossible(run, files):
    r = run(files("nb.hlo", BAD.replace("y = f32[3] parameter(1)", "y = f32[4] parameter(1)")))
    assert r.exit_code == 1
    assert "would not broadcast under XLA's client rules either" in r.stderr


def test_warnings_and_no_warnings(run, files):
    path = files("warn.hlo", WARN)
    r = run(path)
    assert r.exit_code == 0
    assert re.search(r"warn\.hlo:5:\d+: warning: %k: constant: .*elided", r.stderr)
    assert re.search(r"warn\.hlo:6:3: warning: %unused: negate: the result is never used", r.stderr)
    assert "ok (4 instructions checked, 2 warnings)" in r.stdout
    r = run("--no-warnings", path)
    assert r.exit_code == 0 and r.stderr == ""
    assert "ok (4 instructions checked)" in r.stdout


def test_unused_results_are_one_line_unless_verbose(run, files):
    dead = WARN.replace("  unused = f32[4] negate(x)\n",
                        "".join(f"  unused.{k} = f32[4] negate(x)\n" for k in range(5)))
    path = files("dead.hlo", dead)
    r = run(path)
    assert r.exit_code == 0
    assert f"{path}: warning: 5 instructions' results are never used; --verbose lists them" in r.stderr
    assert "the result is never used" not in r.stderr
    assert "%k: constant:" in r.stderr                # other warnings are still listed one by one
    assert "ok (8 instructions checked, 6 warnings)" in r.stdout
    r = run("--verbose", path)
    listed = re.findall(r"dead\.hlo:(\d+):3: warning: %unused\.(\d): negate: the result is never used", r.stderr)
    assert listed == [(str(6 + k), str(k)) for k in range(5)]
    assert "--verbose lists them" not in r.stderr
    r = run("--no-warnings", path)
    assert r.stderr == ""


def test_while_true_warning(run, files):
    text = """HloModule loop
cond {
  c = s32[] parameter(0)
  ROOT t = pred[] constant(true)
}
body {
  b = s32[] parameter(0)
  one = s32[] constant(1)
  ROOT n = s32[] add(b, one)
}
ENTRY main {
  z = s32[] constant(0)
  ROOT w = s32[] while(z), condition=cond, body=body
}
"""
    r = run(files("loop.hlo", text))
    assert r.exit_code == 0
    assert "warning: %w: while: the condition 'cond' is the constant true" in r.stderr


def test_layout_sensitive(run, files):
    path = files("layout.hlo", LAYOUT)
    r = run(path)
    assert r.exit_code == 0, r.stderr
    r = run("--layout-sensitive", path)
    assert r.exit_code == 1
    assert re.search(r"layout\.hlo:5:12: error: %n: negate: the result layout must be operand 0's layout \{1,0\} "
                     r"\(negate cannot change layout\), got \{0,1\}", r.stderr), r.stderr


# ----------------------------------------------------------------------------- JSON

def _diagnostics(doc):
    return [d for entry in doc["files"] for d in entry["diagnostics"]]


def test_json_output(run, files):
    bad = files("bad.hlo", BAD)
    warn = files("warn.hlo", WARN)
    r = run("--format", "json", bad, warn, GOOD)
    assert r.exit_code == 1
    doc = json.loads(r.stdout)
    assert r.stderr == ""
    assert doc["status"] == "errors" and doc["exit_code"] == 1
    # an entry for every file, the clean one included
    assert [(Path(e["file"]).name, e["status"], e["errors"], e["warnings"]) for e in doc["files"]] == [
        ("bad.hlo", "errors", 2, 0), ("warn.hlo", "ok", 0, 2), ("mlp_train_step.opt.hlo", "ok", 0, 0)]
    assert [e["module"] for e in doc["files"]] == ["bad", "warn", "jit_train_step"]
    assert all(isinstance(e["instructions"], int) and e["instructions"] > 0 for e in doc["files"])
    assert doc["summary"] == {"files": 3, "modules": 3, "ok": 2, "with_errors": 1, "unreadable": 0,
                              "internal_errors": 0, "skipped": 0}
    items = _diagnostics(doc)
    fields = {"file", "line", "column", "severity", "code", "instruction", "message"}
    assert all(set(d) == fields for d in items)
    errs = [d for d in items if d["severity"] == "error"]
    assert [(Path(d["file"]).name, d["line"], d["column"], d["instruction"], d["code"]) for d in errs] == [
        ("bad.hlo", 6, 16, "a", "C100"), ("bad.hlo", 7, 7, "n", "C101")]
    assert all(isinstance(d["line"], int) and isinstance(d["column"], int) for d in items)
    warns = [d for d in items if d["severity"] == "warning"]
    assert {(d["instruction"], d["code"]) for d in warns} == {("k", "W200"), ("unused", "W201")}
    assert all(d["message"].startswith("%" + d["instruction"] + ": ") for d in items)
    # clean: an entry without diagnostics, exit 0; warnings can be switched off
    r = run("--format", "json", "--no-warnings", warn)
    assert r.exit_code == 0
    doc = json.loads(r.stdout)
    assert doc["status"] == "ok" and doc["exit_code"] == 0
    assert [(e["status"], e["diagnostics"]) for e in doc["files"]] == [("ok", [])]


def test_json_output_for_unreadable_and_syntax_errors(run, tmp_path):
    r = run("--format", "json", tmp_path / "missing.hlo", SAMPLES / "invalid" / "two_roots.hlo")
    assert r.exit_code == 2
    doc = json.loads(r.stdout)
    assert doc["status"] == "unreadable" and doc["exit_code"] == 2
    assert [(Path(e["file"]).name, e["status"]) for e in doc["files"]] == [("missing.hlo", "unreadable"),
                                                                           ("two_roots.hlo", "errors")]
    assert doc["files"][0]["module"] is None and doc["files"][0]["instructions"] is None
    items = _diagnostics(doc)
    assert [Path(d["file"]).name for d in items] == ["missing.hlo", "two_roots.hlo"]
    assert items[0]["severity"] == "error" and items[1]["line"] == 6


# ----------------------------------------------------------------------------- several files

def test_directory_and_files_summary_table(run, files, tmp_path):
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    for name in ("cnn.hlo", "cnn.opt.hlo", "scan_loop.hlo"):
        shutil.copy(SAMPLES / "jax" / name, dumps / name)
    (dumps / "notes.md").write_text("not HLO")
    (dumps / "nested").mkdir()
    shutil.copy(SAMPLES / "ops" / "add.hlo", dumps / "nested" / "add.hlo")
    bad = files("bad.hlo", BAD)
    r = run(dumps, bad)
    assert r.exit_code == 1
    out = r.stdout
    assert "hlo check" in out
    for col in ("file", "status", "errors", "warnings", "instructions"):
        assert col in out
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in re.split(r"[│┃|]", line)]
        if len(cells) == 5 and cells[0].endswith(".hlo"):
            rows[Path(cells[0]).name] = cells[1:]
    assert set(rows) == {"cnn.hlo", "cnn.opt.hlo", "scan_loop.hlo", "add.hlo", "bad.hlo"}, out
    assert rows["bad.hlo"][:2] == ["errors", "2"]
    assert rows["cnn.opt.hlo"][:2] == ["ok", "0"]
    assert int(rows["scan_loop.hlo"][2]) > 0          # its unused get-tuple-elements
    assert int(rows["cnn.hlo"][3]) > 10
    assert "5 files: 4 ok, 1 with errors" in out
    # the diagnostics themselves still go to stderr
    assert "bad.hlo:6:16: error" in r.stderr


def test_unreadable_files_mixed_with_good_ones(run, files, tmp_path):
    empty = files("empty.hlo", "   \n")
    r = run(GOOD, tmp_path / "missing.hlo", empty, SAMPLES / "ops" / "add.hlo")
    assert r.exit_code == 2
    rows = {}
    for line in r.stdout.splitlines():
        cells = [c.strip() for c in re.split(r"[│┃|]", line)]
        if len(cells) == 5 and cells[0].endswith(".hlo"):
            rows[Path(cells[0]).name] = cells[1]
    assert rows == {"mlp_train_step.opt.hlo": "ok", "missing.hlo": "unreadable", "empty.hlo": "unreadable",
                    "add.hlo": "ok"}
    assert "missing.hlo: error: no such file" in r.stderr
    assert "2 unreadable" in r.stdout


def test_stdin(run):
    r = run("-", input=BAD)
    assert r.exit_code == 1
    assert "<stdin>:6:16: error: %a: add:" in r.stderr
    r = run("-", input=GOOD.read_text())
    assert r.exit_code == 0


# ----------------------------------------------------------------------------- never a traceback

NASTY = [
    b"",
    b"\xff\xfe\x00\x01",
    b"HloModule",
    b"HloModule m\nENTRY e {\n  ROOT x = f32[2 parameter(0)\n}\n",
    b"HloModule m\nENTRY e {\n  ROOT x = f32[2]{5,5,5} parameter(0)\n}\n",
    b"HloModule m\nENTRY e {\n  x = f32[2] parameter(0)\n  ROOT y = f32[2] reduce(x, x), dimensions={7}, to_apply=e\n}\n",
    b"HloModule m\nENTRY e {\n  x = (f32[2], s32[]) parameter(0)\n  ROOT y = f32[2] get-tuple-element(x), index=9\n}\n",
    b"HloModule m\nENTRY e {\n  x = f32[2] parameter(0)\n  ROOT y = f32[2] add(x)\n}\n",
    b"HloModule m\nENTRY e {\n  x = f32[2] parameter(0)\n  ROOT y = f32[2] slice(x), slice={[5:1:-1]}\n}\n",
    b"HloModule m\nENTRY e {\n  x = f32[2,2] parameter(0)\n  ROOT y = f32[2,2] transpose(x), dimensions={0,0}\n}\n",
    b"HloModule m, input_output_alias={ {9,9}: (7, {3}, must-alias) }\nENTRY e {\n  ROOT x = f32[2] parameter(0)\n}\n",
    b"HloModule m, entry_computation_layout={()->f32[]}\nENTRY e {\n  ROOT x = f32[2] parameter(0)\n}\n",
    "HloModule m\nENTRY e {\n  ROOT x = f32[2] parameter(0), metadata={op_name=\"\u00e9\u4e2d\"}\n}\n".encode(),
]


@pytest.mark.parametrize("k", range(len(NASTY)))
def test_nasty_inputs_never_trace_back(run, files, k):
    path = files(f"nasty{k}.hlo", NASTY[k])
    for args in ([path], ["--format", "json", path], ["--layout-sensitive", path]):
        r = run(*args)
        assert r.exit_code in (0, 1, 2), r.output
        assert "internal error" not in r.output, r.output


def test_every_invalid_sample_is_reported_without_traceback(run):
    paths = sorted((SAMPLES / "invalid").rglob("*.hlo"))
    r = run("--no-warnings", *paths)
    assert r.exit_code in (1, 2)
    assert "internal error" not in r.output
    # one row per file, none of them ok
    statuses = []
    for line in r.stdout.splitlines():
        cells = [c.strip() for c in re.split(r"[│┃|]", line)]
        if len(cells) == 5 and cells[0].endswith(".hlo"):
            statuses.append(cells[1])
    assert len(statuses) == len(paths)
    assert "ok" not in statuses
