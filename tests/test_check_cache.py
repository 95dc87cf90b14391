"""`hlo check`'s verdict cached with the module (cache.load_derived / store_derived): a repeat gives
the same diagnostics, exit code and JSON without parsing or checking; options are part of the key;
a damaged entry is a miss; --no-cache neither reads nor writes."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from hlo_cli.sources import cache
from hlo_cli.cli import main

BAD = """HloModule bad

ENTRY main {
  x = f32[2,3] parameter(0)
  y = f32[3] parameter(1)
  a = f32[2,3] add(x, y)
  ROOT n = f32[3,2] negate(x)
}
"""

WARN = """HloModule warn

ENTRY main {
  x = f32[4] parameter(0)
  unused = f32[4] negate(x)
  ROOT s = f32[4] add(x, x)
}
"""


@pytest.fixture()
def run(monkeypatch, tmp_path):
    monkeypatch.setenv("HLO_CACHE_DIR", str(tmp_path / "cache"))

    def _run(*args):
        r = CliRunner().invoke(main, ["check", *map(str, args)], catch_exceptions=False)
        assert "Traceback" not in r.output
        return r
    return _run


def _no_work(monkeypatch):
    """Parsing or checking now fails the test: a hit must need neither."""
    def boom(*a, **k):
        raise AssertionError("parsed or checked on a cache hit")
    import hlo_cli.checker
    import hlo_cli.sources
    monkeypatch.setattr(hlo_cli.sources, "parse_module", boom)
    monkeypatch.setattr(hlo_cli.checker, "check_module", boom)


@pytest.mark.parametrize("text, code", [(BAD, 1), (WARN, 0)])
def test_a_repeat_gives_the_same_verdict_without_parsing(run, tmp_path, monkeypatch, text, code):
    f = tmp_path / "m.hlo"
    f.write_text(text)
    first = run(f)
    first_json = run("--format", "json", f)
    assert first.exit_code == code
    _no_work(monkeypatch)
    again = run(f)
    assert (again.exit_code, again.output) == (first.exit_code, first.output)
    again_json = run("--format", "json", f)
    assert json.loads(again_json.stdout) == json.loads(first_json.stdout)


def test_options_are_part_of_the_key(run, tmp_path):
    f = tmp_path / "w.hlo"
    f.write_text(WARN)
    assert "never used" in run(f).output
    assert "never used" not in run("--no-warnings", f).output
    assert "never used" in run(f).output


def test_a_damaged_entry_is_a_miss(run, tmp_path):
    f = tmp_path / "b.hlo"
    f.write_text(BAD)
    first = run(f)
    key = cache._derived_key(BAD, str(f), json.dumps(["check", False, True, None, None]))
    entry = cache._entry_path(tmp_path / "cache", key)
    assert entry.exists()
    entry.write_bytes(entry.read_bytes()[:-3])               # truncated
    again = run(f)
    assert (again.exit_code, again.output) == (first.exit_code, first.output)


def test_no_cache_neither_reads_nor_writes(run, tmp_path, monkeypatch):
    f = tmp_path / "b.hlo"
    f.write_text(BAD)
    run("--no-cache", f)
    assert not list((tmp_path / "cache").glob("*")) if (tmp_path / "cache").exists() else True
    run(f)
    _no_work(monkeypatch)
    assert run("--no-cache", f).exit_code == 3            # it parsed: the stand-in failed


def test_store_and_load_derived_round_trip(monkeypatch, tmp_path):
    monkeypatch.setenv("HLO_CACHE_DIR", str(tmp_path))
    assert cache.load_derived("text", "n", "what") is None
    assert cache.store_derived("text", "n", "what", {"a": [1, "b", None]})
    assert cache.load_derived("text", "n", "what") == {"a": [1, "b", None]}
    assert cache.load_derived("text", "n", "other") is None
    assert cache.load_derived("text2", "n", "what") is None
    monkeypatch.setenv("HLO_CACHE_DIR", "off")
    assert cache.load_derived("text", "n", "what") is None
    assert not cache.store_derived("text", "n", "what", 1)


def test_info_summary_is_cached_too(tmp_path, monkeypatch):
    """`hlo info`'s summary (counts, memory estimate, devices) is read back on a repeat, the same in
    text and JSON, without a parse."""
    monkeypatch.setenv("HLO_CACHE_DIR", str(tmp_path / "cache"))
    f = tmp_path / "w.hlo"
    f.write_text(WARN)

    def info(*a):
        r = CliRunner().invoke(main, ["info", *a, str(f)], catch_exceptions=False)
        assert r.exit_code == 0 and "Traceback" not in r.output
        return r.output
    first, first_json = info(), info("--format", "json")
    _no_work(monkeypatch)
    assert info() == first
    assert json.loads(info("--format", "json")) == json.loads(first_json)


@pytest.mark.parametrize("opts", [[], ["--no-percent", "--no-metadata"], ["--operand-shapes"]])
def test_fmt_text_is_cached_too(tmp_path, monkeypatch, opts):
    """`hlo fmt`'s text is read back on a repeat, per option set, without a parse; --check too."""
    monkeypatch.setenv("HLO_CACHE_DIR", str(tmp_path / "cache"))
    f = tmp_path / "w.hlo"
    f.write_text(WARN)

    def fmt(*a):
        r = CliRunner().invoke(main, ["fmt", *a, str(f)], catch_exceptions=False)
        assert "Traceback" not in r.output
        return r
    first = fmt(*opts)
    assert first.exit_code == 0
    check = fmt("--check")
    _no_work(monkeypatch)
    again = fmt(*opts)
    assert (again.exit_code, again.stdout) == (first.exit_code, first.stdout)
    assert fmt("--check").exit_code == check.exit_code
