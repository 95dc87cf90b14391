"""`hlo check` on two cores (checker/pieces.py) reports exactly what the one-process check reports:
the same findings (message, code, file:line:col, source line) in the same order, the same status,
module name and instruction count, for every HLO file of the repository, valid and invalid, with
the size threshold lowered to nothing so that every file is cut in two where it can be."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from hlo_cli.checker import pieces
from hlo_cli.parser import parallel
from hlo_cli.tools.check import check_file

ROOT = Path(__file__).resolve().parent.parent
FILES = sorted(str(p.relative_to(ROOT)) for base in ("tests", "samples") for p in (ROOT / base).rglob("*")
               if p.suffix in (".hlo", ".txt") and p.is_file())
# a quick share of them in the ordinary run: the invalid examples, and every 15th file
QUICK = [f for k, f in enumerate(FILES) if "invalid" in f or k % 15 == 0]

needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="the two-core check forks")


def _results(path: str, monkeypatch, two: bool, **options):
    if two:
        monkeypatch.delenv("HLO_NO_PARALLEL", raising=False)
        monkeypatch.setenv("HLO_PARALLEL", "1")
        monkeypatch.setenv("HLO_PARALLEL_MIN_BYTES", "0")
    else:
        monkeypatch.delenv("HLO_PARALLEL", raising=False)
        monkeypatch.setenv("HLO_NO_PARALLEL", "1")
    out = check_file(str(ROOT / path), False, options.get("layout_sensitive", False),
                     options.get("warnings", True), options.get("devices", (None, None)))
    return [(r.label, r.status, r.name, r.instructions, r.diags) for r in out]


def _compare(files, monkeypatch, **options) -> int:
    """Check each file both ways; the number of modules the two-core check did check in two parts."""
    used = []
    real = pieces.check_text

    def counted(*a, **k):
        found = real(*a, **k)
        used.append(found is not None)
        return found
    monkeypatch.setattr(pieces, "check_text", counted)
    for path in files:
        two = _results(path, monkeypatch, True, **options)
        one = _results(path, monkeypatch, False, **options)
        assert two == one, path
    return sum(used)


@needs_fork
def test_quick_share_of_the_files_checks_the_same_on_two_cores(monkeypatch):
    n = _compare(QUICK, monkeypatch)
    assert n >= len(QUICK) // 10        # (most of the files with two computations or more to cut between)


@needs_fork
def test_options_reach_both_parts(monkeypatch):
    files = QUICK[::3] + ["samples/convnets/resnet_tiny.opt.hlo"]
    assert _compare(files, monkeypatch, layout_sensitive=True, warnings=False, devices=(2, None)) >= 10


@pytest.mark.slow
@needs_fork
def test_every_file_checks_the_same_on_two_cores(monkeypatch):
    assert _compare(FILES, monkeypatch) >= len(FILES) // 10


def test_a_tail_keeps_the_positions_of_the_whole_text():
    text = ("HloModule m, is_scheduled=true\n\n%a (p: f32[2]) -> f32[2] {\n  ROOT %p = f32[2] parameter(0)\n}\n\n"
            "ENTRY %e (x: f32[2]) -> f32[2] {\n  %x = f32[2] parameter(0)\n  ROOT %c = f32[2] call(%x), to_apply=%a\n}\n")
    head, tail = parallel.split(text, 0.5)
    assert head.endswith("}\n") and "ENTRY" not in head
    assert tail.splitlines()[0] == "HloModule m, is_scheduled=true"
    assert tail.splitlines()[6] == text.splitlines()[6] == "ENTRY %e (x: f32[2]) -> f32[2] {"
    # the entry computation stays in the tail: no cut after its start
    first = "ENTRY %e {\n  ROOT %x = f32[2] parameter(0)\n}\n\n%a {\n  ROOT %p = f32[2] parameter(0)\n}\n"
    assert parallel.split(first, 0.9) is None
    assert parallel.split("%z {\n}\n\n" + first, 0.9)[0] == "%z {\n}\n"


def test_the_tail_reads_the_heads_declared_signatures():
    text = ("%a (p: f32[2], q: (s32[], f32[3])) -> (f32[2], s32[]) {\n  %q = (s32[], f32[3]{0}) parameter(1)\n"
            "  %p = f32[2]{0} parameter(0)\n  %e = s32[] get-tuple-element(%q), index=0\n"
            "  ROOT %t = (f32[2]{0}, s32[]) tuple(%p, %e)\n}\n\n"
            "b.1 {\n  ROOT p = bf16[4,2]{0,1} parameter(0)\n}\n\nc {\n  ROOT s = add(x, y)\n}\n")
    sig = pieces.declared_signatures(text, {"a", "b.1"})
    assert [str(s) for s in sig["a"][0]] == ["f32[2]{0}", "(s32[], f32[3]{0})"]
    assert str(sig["a"][1]) == "(f32[2]{0}, s32[])"
    assert str(sig["b.1"][0][0]) == str(sig["b.1"][1]) == "bf16[4,2]{0,1}"      # the body's layouts
    assert pieces.declared_signatures(text, {"d"}) is None          # not there: check in one process
    assert pieces.declared_signatures(text, {"c"}) is None          # a shape left out


@needs_fork
def test_a_verdict_found_on_two_cores_is_cached(monkeypatch, tmp_path):
    monkeypatch.setenv("HLO_CACHE_DIR", str(tmp_path))
    path = "samples/convnets/resnet_tiny.opt.hlo"
    calls = []
    real = pieces.check_text
    monkeypatch.setattr(pieces, "check_text", lambda *a, **k: calls.append(1) or real(*a, **k))
    first = _results_cached(path, monkeypatch)
    assert calls and first == _results_cached(path, monkeypatch)     # the repeat reads the verdict
    assert len(calls) == 1
    monkeypatch.setenv("HLO_NO_PARALLEL", "1")
    monkeypatch.setenv("HLO_CACHE_DIR", str(tmp_path / "other"))
    assert first == _results_cached(path, monkeypatch)


def _results_cached(path, monkeypatch):
    monkeypatch.setenv("HLO_PARALLEL", "1")
    monkeypatch.setenv("HLO_PARALLEL_MIN_BYTES", "0")
    return [(r.status, r.name, r.instructions, r.diags) for r in check_file(str(ROOT / path), True, False, True)]


@needs_fork
def test_no_fork_in_a_process_running_a_threaded_runtime(monkeypatch):
    import sys
    monkeypatch.delenv("HLO_NO_PARALLEL", raising=False)
    monkeypatch.delenv("HLO_PARALLEL", raising=False)
    monkeypatch.setattr(parallel, "cores", lambda: 2)
    monkeypatch.setattr(parallel, "others_running", lambda: 0)
    for name in parallel.THREADED_RUNTIMES:
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert parallel.usable()
    monkeypatch.setitem(sys.modules, "jax", sys)
    assert not parallel.usable()
    monkeypatch.setenv("HLO_PARALLEL", "1")            # forced: for measuring and these tests
    assert parallel.usable()


@needs_fork
def test_a_module_in_the_parse_cache_is_loaded_not_parsed_on_two_cores(monkeypatch, tmp_path):
    from hlo_cli.sources import load
    monkeypatch.setenv("HLO_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("HLO_NO_PARALLEL", "1")
    path = str(ROOT / "samples/convnets/resnet_tiny.opt.hlo")
    load(path)                                          # (what `hlo info` leaves in the cache)
    monkeypatch.delenv("HLO_NO_PARALLEL")
    monkeypatch.setenv("HLO_PARALLEL", "1")
    monkeypatch.setenv("HLO_PARALLEL_MIN_BYTES", "0")
    calls = []
    monkeypatch.setattr(pieces, "check_text", lambda *a, **k: calls.append(1))
    one = [(r.status, r.instructions, r.diags) for r in check_file(path, True, False, True)]
    assert not calls and one[0][0] == "ok"


@needs_fork
def test_a_check_on_two_cores_leaves_the_module_in_the_parse_cache(monkeypatch, tmp_path):
    """With the cache on, the tail's IR comes back and the joined module is cached as a one-process
    check leaves it: a later command loads it, and it is the module one process parses."""
    from hlo_cli.parser import parse
    from hlo_cli.sources import load
    from hlo_cli.sources.cache import holds_module
    monkeypatch.setenv("HLO_CACHE_DIR", str(tmp_path))
    path = str(ROOT / "samples/convnets/resnet_tiny.opt.hlo")
    text = Path(path).read_text()
    calls = []
    real = pieces.check_text
    monkeypatch.setattr(pieces, "check_text", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert not holds_module(text, path)
    assert _results_cached("samples/convnets/resnet_tiny.opt.hlo", monkeypatch)[0][0] == "ok"
    assert calls and holds_module(text, path)
    monkeypatch.setenv("HLO_NO_PARALLEL", "1")
    cached, _ = load(path)
    assert cached == parse(text, path)
    # --no-cache: nothing is stored
    other = tmp_path / "other"
    monkeypatch.setenv("HLO_CACHE_DIR", str(other))
    monkeypatch.delenv("HLO_NO_PARALLEL")
    monkeypatch.setenv("HLO_PARALLEL", "1")
    monkeypatch.setenv("HLO_PARALLEL_MIN_BYTES", "0")
    check_file(path, False, False, True)
    assert not holds_module(text, path)
