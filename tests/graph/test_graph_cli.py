"""`hlo graph`: formats, options, exit codes and messages."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from hlo_cli.cli import main
from hlo_cli.graph import render
from hlo_cli.graph.render import dot_program

ROOT = Path(__file__).resolve().parents[2]
LOOP = str(ROOT / "samples/loops/f8_gemm_loop.hlo")
NAN = str(Path(__file__).parent / "data/nan_in_fusion.hlo")
needs_dot = pytest.mark.skipif(dot_program() is None, reason="Graphviz's dot is not installed")


def hlo(*args):
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert "Traceback" not in r.output + (r.stderr if r.stderr_bytes is not None else "")
    return r


def test_dot_to_stdout_by_default():
    r = hlo("graph", LOOP)
    assert r.exit_code == 0 and r.stdout.startswith('digraph "jit_f8_gemm_loop"')
    assert "wrote" not in r.stderr


def test_format_from_suffix_and_no_overwrite(tmp_path):
    out = tmp_path / "g.dot"
    r = hlo("graph", LOOP, "-o", out)
    assert r.exit_code == 0 and out.read_text().startswith("digraph")
    assert "wrote" in r.stderr and "26 nodes" in r.stderr
    out.write_text("mine")
    r = hlo("graph", LOOP, "-o", out)
    assert r.exit_code == 2 and "exists; refusing to overwrite it (pass --force" in r.stderr
    assert out.read_text() == "mine"
    r = hlo("graph", LOOP, "-o", out, "--force")
    assert r.exit_code == 0 and out.read_text().startswith("digraph")


def test_output_errors(tmp_path):
    r = hlo("graph", LOOP, "-o", tmp_path / "g.png")
    assert r.exit_code == 2 and "cannot tell the format" in r.stderr
    r = hlo("graph", LOOP, "-o", tmp_path / "missing" / "g.dot")
    assert r.exit_code == 2 and "does not exist" in r.stderr
    (tmp_path / "d.dot").mkdir()
    r = hlo("graph", LOOP, "-o", tmp_path / "d.dot", "--force")
    assert r.exit_code == 2 and "not a regular file" in r.stderr
    r = hlo("graph", LOOP, "-o", LOOP, "--format", "dot", "--force")
    assert r.exit_code == 2 and "is the module being drawn" in r.stderr


def test_options_reach_the_graph():
    r = hlo("graph", LOOP, "--around", "dot_general.1", "--depth", "1")
    assert r.exit_code == 0 and r.stdout.count("[label=<") == 4
    r = hlo("graph", LOOP, "--computation", "region_0.2")
    assert r.exit_code == 0 and "cluster_main.4" not in r.stdout and "cluster_region_0.2" in r.stdout
    r = hlo("graph", LOOP, "--show-constants")
    assert r.exit_code == 0 and "constant.5" in r.stdout


@pytest.mark.parametrize("args,fragment", [
    (["--computation", "nope"], "no computation named 'nope'"),
    (["--around", "nope"], "--around nope: the module has no instruction of that name"),
    (["--depth", "-1", "--around", "add.1"], "Invalid value for '--depth'"),
    (["--format", "pdf"], "Invalid value for '--format'"),
])
def test_usage_errors(args, fragment):
    r = hlo("graph", LOOP, *args)
    assert r.exit_code == 2 and fragment in r.stderr


def test_bad_module_and_overlay(tmp_path):
    r = hlo("graph", tmp_path / "none.hlo")
    assert r.exit_code == 2 and "no such file" in r.stderr
    bad = tmp_path / "bad.hlo"
    bad.write_text("HloModule m\nENTRY e {\n  ROOT a = f32[] nonsense(\n}\n")
    r = hlo("graph", bad)
    assert r.exit_code == 1 and "bad.hlo:" in r.stderr
    r = hlo("graph", LOOP, "--overlay", tmp_path / "nowhere")
    assert r.exit_code == 2 and "--overlay" in r.stderr and "no such file" in r.stderr


def test_multi_module_file_needs_module(tmp_path):
    f = tmp_path / "two.hlo"
    text = Path(NAN).read_text()
    f.write_text(text + "\n// -----\n\n" + text.replace("HloModule nan_in_fusion", "HloModule second"))
    r = hlo("graph", f)
    assert r.exit_code == 2 and "--module" in r.stderr
    r = hlo("graph", f, "--module", "second")
    assert r.exit_code == 0 and r.stdout.startswith('digraph "second"')


def test_overlay_from_a_dump(tmp_path):
    d = tmp_path / "dump"
    r = hlo("run", NAN, "--random-inputs", "--dump-dir", d)
    assert r.exit_code == 0
    out = tmp_path / "g.dot"
    r = hlo("graph", NAN, "--overlay", d, "-o", out)
    assert r.exit_code == 0 and "first non-finite value: log (inside f)" in r.stderr
    assert "FIRST NON-FINITE" in out.read_text()


def test_svg_without_dot_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setattr(render, "dot_program", lambda: None)
    out = tmp_path / "g.svg"
    r = hlo("graph", LOOP, "-o", out)
    assert r.exit_code == 2 and "apt-get install graphviz" in r.stderr and not out.exists()
    r = hlo("graph", LOOP, "-o", tmp_path / "g.html")
    assert r.exit_code == 0 and "was not found" in r.stderr
    assert "No layout" in (tmp_path / "g.html").read_text()


@needs_dot
def test_svg_and_html(tmp_path):
    r = hlo("graph", LOOP, "-o", tmp_path / "g.svg")
    assert r.exit_code == 0 and "<svg" in (tmp_path / "g.svg").read_text()
    r = hlo("graph", LOOP, "-o", tmp_path / "g.html")
    page = (tmp_path / "g.html").read_text()
    assert r.exit_code == 0 and "<svg" in page and "hlo-graph-data" in page
    r = hlo("graph", LOOP, "-o", tmp_path / "g2.svg", "--max-nodes", "10")
    assert r.exit_code == 2 and "more than --max-nodes 10" in r.stderr
    r = hlo("graph", LOOP, "-o", tmp_path / "g2.html", "--max-nodes", "10")
    assert r.exit_code == 0 and "No layout" in (tmp_path / "g2.html").read_text()


def test_explorer_format(tmp_path):
    try:
        import hlo_cli.explorer  # noqa: F401
    except ImportError:
        r = hlo("graph", LOOP, "-o", tmp_path / "g.json")
        assert r.exit_code == 2 and "Model Explorer" in r.stderr
        return
    r = hlo("graph", LOOP, "-o", tmp_path / "g.json")
    assert r.exit_code == 0 and isinstance(json.loads((tmp_path / "g.json").read_text()), dict)
