"""`hlo run`'s verdicts before running (the checker's errors, custom calls, elided constants, the
numerics report, the memory estimate) kept in the on-disk cache with the module (pipeline/verdicts.py):
a repeat gives the same exit code, messages and JSON without checking or estimating again; a changed
text or option, a damaged entry, --no-cache and HLO_CACHE_DIR=off all compute afresh."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from hlo_cli.cli import main
from hlo_cli.interpreter.memory import MemoryEstimate, Where, estimate
from hlo_cli.parser import parse

BAD = """HloModule bad

ENTRY main {
  x = f32[2,3] parameter(0)
  y = f32[4] parameter(1)
  ROOT m = f32[2,3] multiply(x, y)
}
"""

GOOD = """HloModule good

ENTRY main {
  x = f32[64,64] parameter(0)
  e = f32[64,64] exponential(x)
  ROOT s = f32[64,64] add(e, x)
}
"""

TRITON = """HloModule k

ENTRY main {
  x = f32[4] parameter(0)
  ROOT c = f32[4] custom-call(x), custom_call_target="__gpu$xla.gpu.triton"
}
"""

ELIDED = """HloModule e

ENTRY main {
  x = f32[4] parameter(0)
  c = f32[4] constant({...})
  ROOT s = f32[4] add(x, c)
}
"""


@pytest.fixture()
def hlo(monkeypatch, tmp_path):
    monkeypatch.setenv("HLO_CACHE_DIR", str(tmp_path / "cache"))

    def _run(*args):
        r = CliRunner().invoke(main, ["run", *map(str, args)], catch_exceptions=False)
        assert "Traceback" not in r.output
        return r
    return _run


@pytest.fixture()
def calls(monkeypatch):
    """How often the checker and the memory walk ran."""
    import hlo_cli.checker
    import hlo_cli.interpreter.memory as memory
    counts = {"check": 0, "estimate": 0}
    check, walker = hlo_cli.checker.check_module, memory._Estimator

    def counting_check(*a, **k):
        counts["check"] += 1
        return check(*a, **k)

    class CountingWalk(walker):
        def run(self, devices):
            counts["estimate"] += 1
            return super().run(devices)
    monkeypatch.setattr(hlo_cli.checker, "check_module", counting_check)
    monkeypatch.setattr(memory, "_Estimator", CountingWalk)
    return counts


def _doc(r) -> dict:
    doc = json.loads(r.stdout)
    doc.pop("timings", None)
    return doc


def test_a_repeat_refuses_a_wrong_module_without_checking(hlo, calls, tmp_path):
    f = tmp_path / "bad.hlo"
    f.write_text(BAD)
    first = hlo(f, "--random-inputs")
    assert first.exit_code == 1 and "not running the module" in first.output and calls["check"] == 1
    again = hlo(f, "--random-inputs")
    assert (again.exit_code, again.output) == (first.exit_code, first.output)
    first_json, again_json = hlo(f, "--random-inputs", "--format", "json"), hlo(f, "--random-inputs", "--format", "json")
    assert _doc(first_json) == _doc(again_json) and again_json.exit_code == 1
    assert calls["check"] == 1


def test_a_repeat_refuses_the_memory_without_estimating(hlo, calls, tmp_path):
    f = tmp_path / "good.hlo"
    f.write_text(GOOD)
    first = hlo(f, "--random-inputs", "--max-memory", "1", "--format", "json")
    assert first.exit_code == 5 and calls == {"check": 1, "estimate": 1}
    again = hlo(f, "--random-inputs", "--max-memory", "1", "--format", "json")
    assert again.exit_code == 5 and _doc(again) == _doc(first)
    text = hlo(f, "--random-inputs", "--max-memory", "1")
    assert text.exit_code == 5 and "more than the limit (--max-memory)" in text.output
    assert f"{f}:6:8:" in text.output                       # located at the peak's instruction
    assert calls == {"check": 1, "estimate": 1}
    # the limit is compared on every run: a larger one runs, on the cached estimate
    ok = hlo(f, "--random-inputs", "--max-memory", "1GB", "--format", "json")
    assert ok.exit_code == 0 and calls == {"check": 1, "estimate": 1}


def test_a_run_gives_the_same_values_from_the_cache(hlo, calls, tmp_path):
    f = tmp_path / "good.hlo"
    f.write_text(GOOD)
    first = hlo(f, "--random-inputs", "--seed", "3", "--format", "json")
    again = hlo(f, "--random-inputs", "--seed", "3", "--format", "json")
    assert first.exit_code == again.exit_code == 0 and _doc(first) == _doc(again)
    assert calls == {"check": 1, "estimate": 1}


def test_a_changed_text_is_checked_again(hlo, calls, tmp_path):
    f = tmp_path / "m.hlo"
    f.write_text(BAD)
    assert hlo(f, "--random-inputs").exit_code == 1
    f.write_text(GOOD)
    assert hlo(f, "--random-inputs").exit_code == 0
    f.write_text(BAD)
    assert hlo(f, "--random-inputs").exit_code == 1
    assert calls["check"] == 2          # BAD's verdict came back from the cache the second time
    g = tmp_path / "other.hlo"          # the file name is part of the key: every location names it
    g.write_text(BAD)
    r = hlo(g, "--random-inputs")
    assert r.exit_code == 1 and "other.hlo:6:" in r.output and calls["check"] == 3


def test_options_are_part_of_the_key(hlo, calls, tmp_path):
    f = tmp_path / "g.hlo"
    f.write_text(GOOD)
    cpu = _doc(hlo(f, "--random-inputs", "--format", "json"))
    gpu = _doc(hlo(f, "--random-inputs", "--numerics", "gpu", "--format", "json"))
    assert cpu["numerics"]["mode"] == "cpu" and gpu["numerics"]["mode"] == "gpu"
    assert _doc(hlo(f, "--random-inputs", "--numerics", "gpu", "--format", "json"))["numerics"] == gpu["numerics"]
    assert _doc(hlo(f, "--random-inputs", "--format", "json"))["numerics"] == cpu["numerics"]
    assert calls["check"] == 1
    # the devices' options are in the key: the checker asks about them
    assert hlo(f, "--random-inputs", "--replicas", "1").exit_code == 0 and calls["check"] == 2
    # --no-check does not look at the verdict, and does not store one
    f.write_text(BAD)
    r = hlo(f, "--random-inputs", "--no-check")
    assert "not running the module" not in r.output and calls["check"] == 2
    assert hlo(f, "--random-inputs").exit_code == 1 and calls["check"] == 3


def test_a_damaged_entry_is_a_miss(hlo, calls, tmp_path):
    f = tmp_path / "bad.hlo"
    f.write_text(BAD)
    first = hlo(f, "--random-inputs")
    for entry in (tmp_path / "cache").iterdir():
        data = bytearray(entry.read_bytes())
        data[-3] ^= 0xFF
        entry.write_bytes(bytes(data))
    again = hlo(f, "--random-inputs")
    assert (again.exit_code, again.output) == (first.exit_code, first.output) and calls["check"] == 2
    assert hlo(f, "--random-inputs").output == first.output and calls["check"] == 2   # stored again


def test_an_entry_of_the_wrong_form_is_recomputed(hlo, calls, tmp_path):
    from hlo_cli.pipeline.verdicts import RunVerdicts
    f = tmp_path / "bad.hlo"
    f.write_text(BAD)
    first = hlo(f, "--random-inputs", "--max-memory", "1")
    v = RunVerdicts(BAD, str(f), None, None)
    assert v.fields["check_errors"] and "memory_estimate" not in v.fields     # the check failed first
    v.fields.update(check_errors=[{"no such": "field"}], custom_calls="yes")
    v.dirty = True
    v.save()
    again = hlo(f, "--random-inputs", "--max-memory", "1")
    assert (again.exit_code, again.output) == (first.exit_code, first.output) and calls["check"] == 2


@pytest.mark.parametrize("how", ["--no-cache", "off"])
def test_no_cache_neither_reads_nor_writes(hlo, calls, tmp_path, monkeypatch, how):
    f = tmp_path / "bad.hlo"
    f.write_text(BAD)
    opts = ["--no-cache"] if how == "--no-cache" else []
    if how == "off":
        monkeypatch.setenv("HLO_CACHE_DIR", "off")
    outs = {hlo(f, "--random-inputs", *opts).output for _ in range(2)}
    assert len(outs) == 1 and calls["check"] == 2
    assert not (tmp_path / "cache").exists()


def test_custom_calls_hlo_cannot_run_are_refused_on_every_run(hlo, tmp_path):
    f = tmp_path / "k.hlo"
    f.write_text(TRITON)
    first = hlo(f, "--random-inputs")
    assert first.exit_code == 7 and "Triton" in first.output
    again = hlo(f, "--random-inputs")
    assert (again.exit_code, again.output) == (first.exit_code, first.output)


def test_elided_constants_are_refused_on_every_run(hlo, tmp_path):
    f = tmp_path / "e.hlo"
    f.write_text(ELIDED)
    first = hlo(f, "--random-inputs")
    assert first.exit_code != 0 and "elided" in first.output
    again = hlo(f, "--random-inputs")
    assert (again.exit_code, again.output) == (first.exit_code, first.output)
    assert hlo(f, "--random-inputs", "--allow-elided-constants", "zeros").exit_code == 0


def test_an_estimate_reads_back_equal():
    m = parse(GOOD.replace("ROOT s = f32[64,64] add(e, x)", "d = f32[64,64] dot(e, x), lhs_contracting_dims={1}, "
                                                             "rhs_contracting_dims={0}\n  ROOT s = f32[64,64] add(d, x)"))
    est = estimate(m)
    back = MemoryEstimate.from_record(json.loads(json.dumps(est.to_record())))
    assert back == est and isinstance(back.peak_at, Where)
    noted = MemoryEstimate(1, 2, 3, None, 4, None, 5, 6, est.peak_at, 1, ("a note",))
    assert MemoryEstimate.from_record(json.loads(json.dumps(noted.to_record()))) == noted
    for bad in ({}, {"parameters": "1"}, dict(est.to_record(), total="many"), dict(est.to_record(), peak_at=3)):
        with pytest.raises((TypeError, KeyError, ValueError)):
            MemoryEstimate.from_record(bad)


TWO = """HloModule two, replica_count=2

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = f32[4] parameter(0)
  r = u32[] replica-id()
  c = f32[] convert(r)
  b = f32[4] broadcast(c), dimensions={}
  y = f32[4] add(x, b)
  ROOT s = f32[4] all-reduce(y), replica_groups={{0,1}}, to_apply=add
}
"""


def test_the_devices_of_a_repeat_are_the_first_runs(hlo, calls, tmp_path):
    f = tmp_path / "two.hlo"
    f.write_text(TWO)
    first = hlo(f, "--random-inputs", "--format", "json")
    again = hlo(f, "--random-inputs", "--format", "json")
    assert first.exit_code == again.exit_code == 0 and _doc(first) == _doc(again)
    assert _doc(again)["devices"] == {"replicas": 2, "partitions": 1} and calls["check"] == 1
    one = hlo(f, "--random-inputs", "--replicas", "1")         # another key: checked against 1 replica
    assert calls["check"] == 2 and one.exit_code == 1 and "replica" in one.output
    assert (hlo(f, "--random-inputs", "--replicas", "1").output, calls["check"]) == (one.output, 2)
    assert hlo(f, "--random-inputs", "--replicas", "1", "--no-cache").output == one.output


def test_preflight_facts_spare_the_walk_and_keep_its_answers(monkeypatch):
    import hlo_cli.interpreter.memory as memory
    from hlo_cli.errors import HloResourceError
    text = GOOD.replace("ROOT s = f32[64,64] add(e, x)", "b = f32[64,64,64] broadcast(e), dimensions={0,1}\n"
                                                         "  ROOT s = f32[64,64] add(e, x)")
    facts = memory.preflight_facts(parse(text))
    assert facts == (64 ** 3 * 4, 3)
    monkeypatch.setattr(memory, "memory_limit", lambda: 10 ** 9)
    walks = []
    walk = memory._preflight
    monkeypatch.setattr(memory, "_preflight", lambda *a: walks.append(a) or walk(*a))
    fits = parse(text)
    memory.remember_preflight_facts(fits, facts)
    memory.preflight(fits)
    assert walks == []                                   # the facts say it fits: no walk
    monkeypatch.setattr(memory, "memory_limit", lambda: 64 ** 3 * 4 - 1)
    errors = []
    for remembered in (True, False):                     # over the limit: the same error either way
        m = parse(text)
        if remembered:
            memory.remember_preflight_facts(m, facts)
        with pytest.raises(HloResourceError) as e:
            memory.preflight(m)
        errors.append((str(e.value), [d.location for d in e.value.diagnostics]))
    assert errors[0] == errors[1] and "b" in errors[0][0] and len(walks) == 2


def test_a_cached_run_passes_the_preflight_without_a_walk(hlo, tmp_path, monkeypatch):
    import hlo_cli.interpreter.memory as memory
    f = tmp_path / "good.hlo"
    f.write_text(GOOD)
    first = hlo(f, "--random-inputs", "--format", "json")
    walk = memory._preflight

    def counted(*a):
        counted.n += 1
        return walk(*a)
    counted.n = 0
    monkeypatch.setattr(memory, "_preflight", counted)
    again = hlo(f, "--random-inputs", "--format", "json")
    assert again.exit_code == first.exit_code == 0 and _doc(again) == _doc(first) and counted.n == 0


def test_other_sources_of_hlo_are_a_miss(hlo, calls, tmp_path, monkeypatch):
    f = tmp_path / "bad.hlo"
    f.write_text(BAD)
    first = hlo(f, "--random-inputs")
    assert hlo(f, "--random-inputs").output == first.output and calls["check"] == 1
    # an edit of any source file of hlo changes the fingerprint the derived results are keyed by
    monkeypatch.setattr("hlo_cli.sources.cache._package_fingerprint", b"another version of hlo's sources")
    assert hlo(f, "--random-inputs").output == first.output and calls["check"] == 2
