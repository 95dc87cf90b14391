"""The memory estimate before a run (hlo_cli/interpreter/memory.py: estimate, check_budget,
parse_size) and `hlo info`'s part of it.

The estimate follows the evaluator's schedule and liveness (schedule.Plan: each value freed after
its last use); views (broadcast, transpose, reshape, tuple, get-tuple-element...) share their
operand's buffer; a called computation adds its own peak while it runs; a while holds its previous
state during an iteration.  The numbers below are worked out by hand from those rules.
"""
from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest
from click.testing import CliRunner

import hlo_cli
from hlo_cli.cli import main
from hlo_cli.errors import ExitCode, HloMemoryLimitError, HloResourceError
from hlo_cli.interpreter import memory
from hlo_cli.interpreter.memory import check_budget, estimate, parse_size

CHAIN = """HloModule chain
ENTRY e {
  a = f32[1000] parameter(0)
  b = f32[1000] negate(a)
  c = f32[1000] add(b, a)
  d = f32[1000] multiply(c, c)
  ROOT r = f32[1000] add(d, b)
}
"""

VIEWS = """HloModule views
ENTRY e {
  x = f32[] parameter(0)
  y = f32[500,400] parameter(1)
  b = f32[400,500] broadcast(x), dimensions={}
  t = f32[500,400] transpose(b), dimensions={1,0}
  s = f32[500,400] add(t, y)
  r = f32[200000] reshape(s)
  ROOT n = f32[200000] negate(r)
}
"""

WHILE = """HloModule loop
cond {
  p = (s32[], f32[1000], f32[5000]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(10)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], f32[1000], f32[5000]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[1000] get-tuple-element(p), index=1
  big = f32[5000] get-tuple-element(p), index=2
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  x2 = f32[1000] multiply(x, x)
  ROOT t = (s32[], f32[1000], f32[5000]) tuple(i1, x2, big)
}
ENTRY e {
  x = f32[1000] parameter(0)
  big = f32[5000] parameter(1)
  c0 = s32[] constant(0)
  t = (s32[], f32[1000], f32[5000]) tuple(c0, x, big)
  w = (s32[], f32[1000], f32[5000]) while(t), condition=cond, body=body
  ROOT r = f32[1000] get-tuple-element(w), index=1
}
"""

FUSION = """HloModule fused
fused {
  a = f32[1000] parameter(0)
  b = f32[1000] parameter(1)
  m = f32[1000] multiply(a, b)
  n = f32[1000] negate(m)
  ROOT s = f32[1000] add(n, a)
}
ENTRY e {
  x = f32[1000] parameter(0)
  y = f32[1000] parameter(1)
  z = f32[1000] add(x, y)
  f = f32[1000] fusion(z, y), kind=kLoop, calls=fused
  ROOT r = f32[1000] subtract(f, z)
}
"""


def test_a_chain_of_adds():
    """a (param, 4000 held) -> b, c live (8000) -> d while c, b live (12000, the peak) -> r; an f32
    result has one more copy of scratch (|x| for the flush to zero)."""
    e = estimate(hlo_cli.parse(CHAIN))
    assert (e.parameters, e.peak_live, e.largest, e.temporaries, e.constants) == (4000, 16000, 4000, 4000, 0)
    assert e.total == 20000 and e.devices == 1 and not e.notes
    assert (e.peak_at.name, e.peak_at.opcode, e.peak_at.computation, e.peak_at.line) == ("d", "multiply", "e", 6)
    assert e.largest_at.name == "b"


def test_views_allocate_nothing():
    """The broadcast, the transpose and the reshape of a contiguous array are views: only s and n
    are allocated (800,000 bytes each)."""
    e = estimate(hlo_cli.parse(VIEWS))
    assert e.parameters == 4 + 800_000
    assert e.peak_live == e.parameters + 2 * 800_000 and e.peak_at.name == "n"


def test_a_reshape_of_a_strided_view_copies():
    text = VIEWS.replace("s = f32[500,400] add(t, y)\n  r = f32[200000] reshape(s)",
                         "s = f32[500,400] add(y, y)\n  u = f32[400,500] transpose(s), dimensions={1,0}\n"
                         "  r = f32[200000] reshape(u)")
    e = estimate(hlo_cli.parse(text))
    # s, then r (a copy of the transposed s) while s lives, then n while r lives
    assert e.peak_live == e.parameters + 2 * 800_000


def test_a_while_loop_holds_its_state_and_its_body_once():
    """The body allocates i1 (4) and x2 (4000); the pass-through `big` stays the caller's buffer.
    During an iteration the previous state's own leaves (4 + 4000) are held too: 4000 + 20000
    (parameters) + 4004 + 4004."""
    e = estimate(hlo_cli.parse(WHILE))
    assert e.parameters == 24000
    assert e.peak_live == 24000 + 4004 + 4004
    assert (e.peak_at.name, e.peak_at.computation) == ("x2", "body")
    assert e.constants == 12                    # three s32 constants


def test_a_fusion_adds_its_own_peak_to_its_callers_live_set():
    """z (4000) is live while the fused computation holds m and n (8000), then n and s."""
    e = estimate(hlo_cli.parse(FUSION))
    assert e.parameters == 8000 and e.peak_live == 8000 + 4000 + 8000
    assert (e.peak_at.name, e.peak_at.computation) == ("n", "fused")


def test_a_dot_has_a_scratch_allowance():
    text = """HloModule d
ENTRY e {
  x = bf16[64,32] parameter(0)
  y = bf16[32,16] parameter(1)
  ROOT d = bf16[64,16] dot(x, y), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""
    e = estimate(hlo_cli.parse(text))
    # operands converted to f32 (4 bytes an element) and the result computed in f32
    assert e.temporaries == 4 * (64 * 32 + 32 * 16) + 4 * 64 * 16
    assert e.total == e.peak_live + e.temporaries


def test_devices_multiply_what_each_device_holds():
    m = hlo_cli.parse(CHAIN)
    one, four = estimate(m), estimate(m, devices=4)
    assert four.total == 4 * one.total and four.peak_live == one.peak_live and four.per_device
    assert "x 4 devices" in "\n".join(four.describe())


def test_the_estimate_is_cached_per_module():
    m = hlo_cli.parse(CHAIN)
    assert estimate(m) is estimate(m)


def test_the_schedule_is_the_evaluators():
    """The estimate walks the instructions schedule.Plan runs, in its order."""
    from hlo_cli.interpreter.schedule import Plan
    m = hlo_cli.parse(WHILE.replace("  c0 = s32[] constant(0)\n", "  c0 = s32[] constant(0)\n"
                                    "  dead = f32[1000] negate(x)\n"))
    est = memory._Estimator(m)
    for comp in m.computations:
        assert [i.name for i in est._schedule(comp)] == [i.name for i in Plan(comp).insts]


def test_a_hostile_module_is_estimated_without_allocating():
    text = """HloModule huge
ENTRY e {
  x = f32[9223372036854775807,4] parameter(0)
  b = (f32[100000,100000,1000], s8[9223372036854775807]) parameter(1)
  g = f32[100000,100000,1000] get-tuple-element(b), index=0
  n = f32[100000,100000,1000] negate(g)
  ROOT t = (f32[9223372036854775807,4], f32[100000,100000,1000]) tuple(x, n)
}
"""
    tracemalloc.start()
    try:
        e = estimate(hlo_cli.parse(text))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 50_000_000
    assert e.parameters == 4 * 4 * 9223372036854775807 + 4 * 10**13 + 9223372036854775807
    assert e.largest == 4 * 10**13 and e.largest_at.name == "n"
    assert e.peak_live == e.parameters + 4 * 10**13


def test_unbounded_shapes_are_noted():
    text = """HloModule dyn
ENTRY e {
  x = f32[?,4] parameter(0)
  ROOT n = f32[?,4] negate(x)
}
"""
    e = estimate(hlo_cli.parse(text))
    assert e.peak_live == 0 and any("unbounded" in n for n in e.notes)


@pytest.mark.parametrize("text,value", [
    ("123", 123), ("16G", 16 * 10**9), ("16GB", 16 * 10**9), ("16gb", 16 * 10**9), ("512M", 512 * 10**6),
    ("512MB", 512 * 10**6), ("1.5GiB", 1536 * 1024**2), ("2e9", 2 * 10**9), ("64KiB", 65536),
    ("1 TB", 10**12), ("4096B", 4096), ("none", None), ("None", None), ("auto", "auto"),
])
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "lots", "16Q", "-5", "0", "1e999", "0.1", "G", "1.2.3GB"])
def test_parse_size_refuses_what_is_not_a_size(text):
    with pytest.raises(ValueError, match="size"):
        parse_size(text)


def test_check_budget_refuses_with_exit_code_5():
    m = hlo_cli.parse(CHAIN)
    assert check_budget(m, None) is None
    assert check_budget(m, 20000).total == 20000
    with pytest.raises(HloMemoryLimitError) as info:
        check_budget(m, 19999)
    e = info.value
    assert isinstance(e, HloResourceError) and e.exit_code == ExitCode.MEMORY_LIMIT == 5
    assert (e.total, e.limit, e.instruction) == (20000, 19999, "d") and e.estimate.peak_live == 16000
    msg = str(e)
    assert "the run needs an estimated 20,000 bytes" in msg and "the limit (--max-memory): 19,999 bytes" in msg
    assert "parameters: 4,000 bytes" in msg and "peak live set: 16,000 bytes" in msg and "<string>:6" in msg
    assert "--max-memory SIZE" in msg and "--max-memory none" in msg
    assert e.diagnostics and e.diagnostics[0].line == 6 and e.diagnostics[0].code == "R015"


def test_check_budget_counts_inputs_larger_than_the_parameters():
    m = hlo_cli.parse(CHAIN)
    assert check_budget(m, 20000, inputs_bytes=4000) is not None
    with pytest.raises(HloMemoryLimitError, match="inputs as given: 9,000 bytes"):
        check_budget(m, 24000, inputs_bytes=9000)


def test_check_budget_auto_is_what_the_machine_has(monkeypatch):
    m = hlo_cli.parse(CHAIN)
    monkeypatch.setattr(memory, "memory_limit", lambda: 10_000)
    with pytest.raises(HloMemoryLimitError, match="more than what this machine can ever hold"):
        check_budget(m, "auto")
    monkeypatch.setattr(memory, "memory_limit", lambda: None)
    assert check_budget(m, "auto") is None


def test_check_budget_auto_leaves_a_single_impossible_value_to_the_runs_own_check(monkeypatch):
    """A result larger than the machine is the preflight's (exit code 4, naming it) under "auto";
    an explicit limit refuses it with exit code 5."""
    text = CHAIN.replace("f32[1000]", "f32[100000000000]")
    m = hlo_cli.parse(text)
    monkeypatch.setattr(memory, "memory_limit", lambda: 10**9)
    assert check_budget(m, "auto") is not None
    with pytest.raises(HloResourceError) as info:
        memory.preflight(m)
    assert info.value.exit_code == 4
    with pytest.raises(HloMemoryLimitError):
        check_budget(m, 10**9)


def test_the_estimate_follows_a_real_run(tmp_path):
    """Peak bytes NumPy allocates while the generic loop runs (tracemalloc) against the estimate:
    arrays of a megabyte, so Python's own objects do not count."""
    text = """HloModule big
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[512,512] parameter(0)
  y = f32[512,512] parameter(1)
  a = f32[512,512] exponential(x)
  b = f32[512,512] transpose(a), dimensions={1,0}
  c = f32[512,512] add(b, y)
  z = f32[] constant(0)
  s = f32[512] reduce(c, z), dimensions={1}, to_apply=add
  sb = f32[512,512] broadcast(s), dimensions={0}
  m = f32[512,512] multiply(sb, a)
  ROOT r = f32[512,512] subtract(m, c)
}
"""
    from hlo_cli.interpreter.evaluator import run_module
    m = hlo_cli.parse(text)
    args = [np.full((512, 512), 0.5, np.float32), np.ones((512, 512), np.float32)]
    run_module(m, args, compiled=False)
    tracemalloc.start()
    try:
        run_module(m, args, compiled=False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    real = peak + 2 * 512 * 512 * 4
    e = estimate(m)
    assert real / 1.5 <= e.peak_live <= real * 1.5, (e.peak_live, real)


# ----------------------------------------------------------------------------- hlo info

def _info(tmp_path, text, *args):
    path = tmp_path / "m.hlo"
    path.write_text(text)
    return CliRunner().invoke(main, ["info", "--no-cache", *args, str(path)])


def test_info_prints_the_estimate_and_the_input_size(tmp_path):
    r = _info(tmp_path, WHILE)
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert "inputs" in out and "24,000 bytes (23.44 KiB) in 2 parameters" in out
    assert "memory" in out and "36,020 bytes (35.18 KiB)" in out and "--max-memory" in out
    assert "peak live" in out and "32,008 bytes" in out and "at x2 (multiply f32[1000] in body, line 15)" in out
    assert "largest value" in out and "Traceback" not in r.output


def test_info_json_has_the_estimate(tmp_path):
    r = _info(tmp_path, FUSION, "--format", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["inputs_bytes"] == 8000
    mem = doc["memory"]
    assert mem["peak_live_bytes"] == 20000 and mem["total_bytes"] == 24000 and mem["parameters_bytes"] == 8000
    assert mem["peak_at"] == {"instruction": "n", "opcode": "negate", "computation": "fused", "shape": "f32[1000]",
                              "file": str(tmp_path / "m.hlo"), "line": 6, "column": 3}
    assert mem["largest_at"]["instruction"] == "z" and mem["devices"] == 1 and mem["notes"] == []


def test_deeply_nested_calls_are_estimated_with_a_note():
    depth = 400
    comps = ["k0 {\n  p = f32[10] parameter(0)\n  ROOT n = f32[10] negate(p)\n}\n"]
    for k in range(1, depth):
        comps.append(f"k{k} {{\n  p = f32[10] parameter(0)\n  ROOT c = f32[10] call(p), to_apply=k{k - 1}\n}}\n")
    text = "HloModule deep\n" + "".join(comps) + (f"ENTRY e {{\n  x = f32[10] parameter(0)\n"
                                                   f"  ROOT c = f32[10] call(x), to_apply=k{depth - 1}\n}}\n")
    e = estimate(hlo_cli.parse(text))
    assert e.parameters == 40 and any("deep" in n for n in e.notes)



def test_info_of_a_per_device_module_estimates_every_device(tmp_path):
    text = """HloModule ar, replica_count=4
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[1000] parameter(0)
  ROOT r = f32[1000] all-reduce(x), replica_groups={}, to_apply=add
}
"""
    r = _info(tmp_path, text, "--format", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["inputs_bytes"] == 4000 and doc["memory"]["devices"] == 4
    one = estimate(hlo_cli.parse(text))
    assert doc["memory"]["total_bytes"] == 4 * one.total
    r = _info(tmp_path, text)
    assert "4,000 bytes (3.91 KiB) in 1 parameter on each device" in r.stdout and "x 4 devices" in r.stdout
