"""The command line: exit codes, messages on stderr, no tracebacks."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from hlo_cli import __version__
from hlo_cli.cli import main

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "samples" / "jax" / "mlp_train_step.opt.hlo"


@pytest.fixture()
def run(monkeypatch, tmp_path):
    monkeypatch.setenv("HLO_CACHE_DIR", str(tmp_path / "cache"))

    def _run(*args, input=None):
        runner = CliRunner()
        result = runner.invoke(main, [str(a) for a in args], input=input, catch_exceptions=False)
        assert "Traceback" not in result.output
        assert "Traceback" not in (result.stderr or "")
        return result
    return _run


def test_version(run):
    r = run("--version")
    assert r.exit_code == 0 and __version__ in r.stdout


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_help_lists_commands_and_exit_codes(run, flag):
    r = run(flag)
    assert r.exit_code == 0
    for cmd in ("fmt", "info"):
        assert cmd in r.stdout
    assert "Exit codes" in r.stdout


def test_info_text(run):
    r = run("info", SAMPLE)
    assert r.exit_code == 0, r.stderr
    assert "jit_train_step" in r.stdout
    assert "opcodes" in r.stdout and "fusion" in r.stdout
    assert "scripts/gen_samples.py" in r.stdout        # the source file named by the stack frames


def test_info_json(run):
    r = run("info", SAMPLE, "--format", "json")
    assert r.exit_code == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["module"] == "jit_train_step"
    assert s["entry"].startswith("main")
    assert s["instructions"] == sum(s["opcodes"].values())
    assert s["opcodes"]["fusion"] > 0
    assert [p["number"] for p in s["parameters"]] == list(range(len(s["parameters"])))
    assert any(src["file"] == "scripts/gen_samples.py" and src["instructions"] > 0 for src in s["sources"])


def test_info_stdin(run):
    r = run("info", "-", "--format", "json", input=SAMPLE.read_text())
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["file"] == "<stdin>"


def test_info_no_cache(run):
    r = run("info", SAMPLE, "--no-cache", "--format", "json")
    assert r.exit_code == 0


@pytest.mark.parametrize("content,fragment", [
    (b"", "empty"),
    (b"   \n\n", "empty"),
    (b"\x00\x01\x02HloModule", "binary"),
    (b"HloModule m\n\xff\xfe ENTRY", "not UTF-8"),
])
def test_unusable_files_exit_2(run, tmp_path, content, fragment):
    f = tmp_path / "bad.hlo"
    f.write_bytes(content)
    r = run("info", f)
    assert r.exit_code == 2
    assert fragment in r.stderr
    assert str(f) in r.stderr


def test_missing_file_exit_2(run, tmp_path):
    r = run("info", tmp_path / "nope.hlo")
    assert r.exit_code == 2 and "no such file" in r.stderr


def test_directory_exit_2(run, tmp_path):
    r = run("info", tmp_path)
    assert r.exit_code == 2 and "directory" in r.stderr


def test_empty_stdin_exit_2(run):
    r = run("info", "-", input="")
    assert r.exit_code == 2 and "standard input is empty" in r.stderr


def test_syntax_error_is_located_with_caret(run, tmp_path):
    f = tmp_path / "bad.hlo"
    f.write_text("HloModule m\n\nENTRY e {\n  p = f32[4] parameter(0)\n  ROOT a = f32[4] add(p p)\n}\n")
    r = run("info", f)
    assert r.exit_code == 1
    first = r.stderr.splitlines()[0]
    assert first.startswith(f"{f}:5:")
    assert "error:" in first
    lines = r.stderr.splitlines()
    assert "add(p p)" in lines[1]
    assert lines[2].strip() == "^"


def test_info_json_error_object_for_a_parse_error(run, tmp_path):
    f = tmp_path / "bad.hlo"
    f.write_text("HloModule m\n\nENTRY e {\n  p = f32[4] parameter(0)\n  ROOT a = f32[4] add(p p)\n}\n")
    r = run("info", f, "--format", "json")
    assert r.exit_code == 1
    doc = json.loads(r.stdout)
    assert (doc["file"], doc["module"], doc["status"], doc["exit_code"]) == (str(f), None, "error", 1)
    d = doc["diagnostics"][0]
    assert (d["file"], d["line"], d["severity"]) == (str(f), 5, "error")
    assert set(d) == {"file", "line", "column", "severity", "code", "instruction", "message"}
    assert f"{f}:5:" in r.stderr                     # the located message still goes to stderr


@pytest.mark.parametrize("kind", ["missing", "directory", "empty"])
def test_info_json_error_object_for_unusable_input(run, tmp_path, kind):
    path = {"missing": tmp_path / "missing.hlo", "directory": tmp_path, "empty": tmp_path / "e.hlo"}[kind]
    if kind == "empty":
        path.write_text("")
    r = run("info", path, "--format", "json")
    assert r.exit_code == 2
    doc = json.loads(r.stdout)
    assert doc["status"] == "error" and doc["exit_code"] == 2 and doc["module"] is None
    assert doc["diagnostics"] and doc["diagnostics"][0]["file"] == str(path)


def test_semantic_errors_all_reported(run, tmp_path):
    f = tmp_path / "bad.hlo"
    f.write_text("HloModule m\n\nENTRY e {\n  p = f32[4] parameter(0)\n  a = f32[4] add(p, q)\n"
                 "  ROOT b = f32[4] frobnicate(a)\n}\n")
    r = run("info", f)
    assert r.exit_code == 1
    assert f"{f}:5:" in r.stderr and "'q'" in r.stderr
    assert f"{f}:6:" in r.stderr and "unknown opcode 'frobnicate'" in r.stderr


def test_unknown_command_is_usage_error(run):
    r = run("frobnicate")
    assert r.exit_code == 2
