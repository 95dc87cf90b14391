"""`hlo run --profile` (hlo_cli/interpreter/profiling.py): the same bits with and without it, the
slow instruction on top, self and total time of nested computations, fused groups named with their
members, runs with hooks and on several devices, the JSON document's keys, exit codes.  No timing
assertion beyond "the one instruction that does nearly all the work comes first"."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import hlo_cli
from hlo_cli.interpreter import RunOptions, run_module
from hlo_cli.interpreter.profiling import Profile
from run_harness import hlo  # noqa: F401  (the fixture)

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples" / "jax"

# one 512x512x512 product (~134M multiply-adds) among a few operations on 4 elements
DOMINATED = """HloModule dominated
ENTRY main {
  a = f32[512,512] parameter(0)
  b = f32[512,512] parameter(1)
  x = f32[4] parameter(2)
  y = f32[4] add(x, x)
  z = f32[4] multiply(y, x)
  big = f32[512,512] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  w = f32[4] negate(z)
  v = f32[4] subtract(w, x)
  ROOT t = (f32[512,512], f32[4]) tuple(big, v)
}
"""

LOOP = """HloModule loop
cond {
  s = (s32[], f32[64,64]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(6)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  s = (s32[], f32[64,64]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  v = f32[64,64] get-tuple-element(s), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  d = f32[64,64] dot(v, v), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  t = f32[64,64] tanh(d)
  ROOT out = (s32[], f32[64,64]) tuple(j, t)
}
ENTRY main {
  x = f32[64,64] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[64,64]) tuple(zero, x)
  loop = (s32[], f32[64,64]) while(init), condition=cond, body=body
  ROOT r = f32[64,64] get-tuple-element(loop), index=1
}
"""

DEVICES = """HloModule on_devices, replica_count=2
sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
fused {
  p = f32[64,64] parameter(0)
  ROOT d = f32[64,64] dot(p, p), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
ENTRY main {
  x = f32[64,64] parameter(0)
  r = u32[] replica-id()
  rf = f32[] convert(r)
  rb = f32[64,64] broadcast(rf), dimensions={}
  y = f32[64,64] add(x, rb)
  f = f32[64,64] fusion(y), kind=kLoop, calls=fused
  ROOT ar = f32[64,64] all-reduce(f), replica_groups={}, to_apply=sum
}
"""


def _leaves(v):
    if isinstance(v, tuple):
        return [x for e in v for x in _leaves(e)]
    return [np.asarray(v)]


def _same_bits(a, b):
    la, lb = _leaves(a), _leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb):
        assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


@pytest.mark.parametrize("name", ["cnn", "attention", "cond_switch"])
def test_profile_gives_the_same_bits(name):
    m = hlo_cli.parse_file(str(SAMPLES / f"{name}.hlo"))
    z = np.load(SAMPLES / f"{name}.inputs.npz")
    args = [z[k] for k in z.files]
    p = Profile()
    _same_bits(run_module(m, args), run_module(m, args, RunOptions(profile=p)))
    rows = p.rows()
    assert rows and all(r.calls > 0 for r in rows)


def test_self_and_total_time_of_a_loop():
    m = hlo_cli.parse(LOOP)
    x = (np.arange(64 * 64, dtype=np.float32).reshape(64, 64) % 7) / 50
    p = Profile()
    _same_bits(run_module(m, [x]), run_module(m, [x], RunOptions(profile=p)))
    by = {(r.computation, r.inst.name): r for r in p.rows()}
    loop, dot = by[("main", "loop")], by[("body", "d")]
    assert loop.calls == 1 and dot.calls == 6 and by[("cond", "lt")].calls == 7
    assert loop.total_s >= dot.total_s + by[("body", "t")].total_s       # the body is inside the loop's total
    assert loop.self_s <= loop.total_s - dot.total_s
    s = p.summary(sum(r.self_s for r in p.rows()))
    assert abs(sum(o["percent"] for o in s["opcodes"]) - 100) < 1.0        # self times add up to the run


def test_fused_group_is_named_with_its_members(monkeypatch):
    from hlo_cli.interpreter import compiler
    monkeypatch.setattr(compiler, "FUSE_MIN", 16)
    text = """HloModule fused
ENTRY main {
  x = f32[64,64] parameter(0)
  a = f32[64,64] add(x, x)
  b = f32[64,64] multiply(a, x)
  ROOT c = f32[64,64] maximum(b, a)
}
"""
    m = hlo_cli.parse(text)
    x = np.linspace(-1, 1, 64 * 64, dtype=np.float32).reshape(64, 64)
    want = run_module(hlo_cli.parse(text), [x], compiled=False)
    p = Profile()
    _same_bits(want, run_module(m, [x], RunOptions(profile=p)))
    s = p.summary(1.0)
    fused = [r for r in s["top_instructions"] if r["opcode"] == "fused elementwise"]
    assert len(fused) == 1 and fused[0]["members"] == ["a", "b", "c"] and fused[0]["instruction"] == "c"


def _write_dominated(tmp_path):
    (tmp_path / "m.hlo").write_text(DOMINATED)
    rng = np.random.default_rng(0)
    np.save(tmp_path / "a.npy", rng.standard_normal((512, 512), dtype=np.float32))
    np.save(tmp_path / "b.npy", rng.standard_normal((512, 512), dtype=np.float32))
    np.save(tmp_path / "x.npy", np.arange(4, dtype=np.float32))
    return ["m.hlo", "-i", "a.npy", "-i", "b.npy", "-i", "x.npy"]


def test_cli_table_lists_the_slow_instruction_first(hlo, tmp_path):
    args = _write_dominated(tmp_path)
    r = hlo("run", *args, "--profile", "-o", "p.npz")
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert "results of dominated" in out and "profile:" in out and "profile by opcode" in out
    lines = out.splitlines()
    head = next(n for n, line in enumerate(lines) if line.lstrip().startswith("instruction"))
    first = lines[head + 2]                                 # after the header's rule
    assert first.split()[0] == "big" and "dot" in first and "f32[512,512]" in first and "main" in first
    r2 = hlo("run", *args, "-o", "q.npz")
    assert r2.exit_code == 0 and "profile" not in r2.stdout
    a, b = np.load(tmp_path / "p.npz"), np.load(tmp_path / "q.npz")
    for k in a.files:
        assert a[k].tobytes() == b[k].tobytes()


def test_cli_json_profile(hlo, tmp_path):
    args = _write_dominated(tmp_path)
    r = hlo("run", *args, "--profile", "--format", "json")
    assert r.exit_code == 0
    doc = json.loads(r.stdout)
    prof = doc["profile"]
    assert set(prof) == {"mode", "run_ms", "timed_ms", "untimed_ms", "preparing_ms", "preparing_top",
                         "instructions_timed", "top_instructions", "opcodes"}
    assert prof["mode"] == "steps" and prof["instructions_timed"] >= 6
    top = prof["top_instructions"][0]
    assert set(top) == {"computation", "instruction", "opcode", "shape", "calls", "self_ms", "total_ms", "percent"}
    assert (top["instruction"], top["opcode"], top["shape"], top["computation"], top["calls"]) == \
        ("big", "dot", "f32[512,512]", "main", 1)
    assert prof["opcodes"][0]["opcode"] == "dot"
    assert set(prof["opcodes"][0]) == {"opcode", "instructions", "calls", "self_ms", "percent"}
    assert "profile" not in json.loads(hlo("run", *args, "--format", "json").stdout)


def test_cli_profile_with_hooks_times_between_events(hlo, tmp_path):
    args = _write_dominated(tmp_path)
    r = hlo("run", *args, "--profile", "--check-finite", "--dump-dir", "d", "--format", "json")
    assert r.exit_code == 0, r.stdout
    prof = json.loads(r.stdout)["profile"]
    assert prof["mode"] == "hook events"
    assert prof["top_instructions"][0]["instruction"] == "big"
    assert (tmp_path / "d" / "manifest.json").exists()


def test_cli_profile_on_several_devices(hlo, tmp_path):
    (tmp_path / "m.hlo").write_text(DEVICES)
    np.save(tmp_path / "x.npy", np.ones((64, 64), np.float32))
    r = hlo("run", "m.hlo", "-i", "x.npy", "--profile", "--format", "json", "-o", "p.npz")
    assert r.exit_code == 0, r.stdout
    prof = json.loads(r.stdout)["profile"]
    assert "device walk" in prof["mode"]
    assert any(o["opcode"] == "dot" for o in prof["opcodes"])         # timed in each device's context
    dots = [i for i in prof["top_instructions"] if i["instruction"] == "d"]
    assert dots and dots[0]["calls"] == 2 and dots[0]["computation"] == "fused"
    r2 = hlo("run", "m.hlo", "-i", "x.npy", "-o", "q.npz")
    assert r2.exit_code == 0
    assert np.load(tmp_path / "p.npz")["out0"].tobytes() == np.load(tmp_path / "q.npz")["out0"].tobytes()
    text = hlo("run", "m.hlo", "-i", "x.npy", "--profile")
    assert text.exit_code == 0 and "device walk" in text.stdout


def test_cli_profile_exit_codes(hlo, tmp_path):
    (tmp_path / "bad.hlo").write_text("""HloModule bad
ENTRY main {
  x = s32[4] parameter(0)
  i = s32[] constant(7)
  ROOT d = s32[1] dynamic-slice(x, i), dynamic_slice_sizes={1}
}
""")
    (tmp_path / "loop.hlo").write_text(LOOP.replace("constant(6)", "constant(1000000)"))
    np.save(tmp_path / "x.npy", np.zeros((64, 64), np.float32))
    r = hlo("run", "loop.hlo", "-i", "x.npy", "--profile", "--max-iterations", "3")
    assert r.exit_code == 1 and "--max-iterations" in r.stderr
    r = hlo("run", "loop.hlo", "-i", "x.npy", "--profile", "--max-iterations", "3", "--format", "json")
    assert r.exit_code == 1 and json.loads(r.stdout)["status"] == "error"
    assert hlo("run", "bad.hlo", "--random-inputs", "--profile").exit_code == 0      # clamped start index
    assert hlo("run", "nothing.hlo", "--profile").exit_code == 2


def test_the_device_walk_is_sampled(monkeypatch):
    """An instruction the multi-device walk runs itself (here a custom call that takes 0.2 s per
    device) is found by the sampler and charged to that instruction."""
    import threading
    import time

    from hlo_cli.devices import run_devices
    from hlo_cli.interpreter.ops import custom_call

    def slow(inst, args, ec):
        time.sleep(0.1)
        return np.array(args[0], copy=True)
    monkeypatch.setitem(custom_call.TARGETS, "hlo.test.slow", slow)
    m = hlo_cli.parse(DEVICES.replace("fusion(y), kind=kLoop, calls=fused",
                                      'custom-call(y), custom_call_target="hlo.test.slow"'))
    x = np.ones((64, 64), np.float32)
    p = Profile()
    p.start_sampling(threading.get_ident(), interval=0.005)
    try:
        got = run_devices(m, [x], options=RunOptions(profile=p))
    finally:
        p.stop_sampling()
    _same_bits(got.value.value, run_devices(m, [x]).value.value)
    s = p.summary(1.0)
    row = next(r for r in s["top_instructions"] if r["instruction"] == "f")
    assert row["calls"] is None and row["samples"] >= 1 and row["opcode"] == "custom-call"
    assert p._sampler is None


COND = """HloModule cond
yes {
  p = f32[64,64] parameter(0)
  ROOT d = f32[64,64] dot(p, p), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
no {
  ROOT q = f32[64,64] parameter(0)
}
ENTRY main {
  x = f32[64,64] parameter(0)
  t = pred[] constant(true)
  ROOT pick = f32[64,64] conditional(t, x, x), true_computation=yes, false_computation=no
}
"""


def test_preparing_a_computation_is_not_charged_to_its_caller(monkeypatch):
    """A computation prepared on its first call (here a conditional's branch, made to take 0.3 s)
    is prepared inside the calling step; the sampler finds that and takes it off the step."""
    import threading
    import time

    from hlo_cli.interpreter import compiler
    real = compiler.prepare

    def slow_prepare(inst, *a, **k):
        if inst.name == "d":                        # the branch's dot
            time.sleep(0.3)
        return real(inst, *a, **k)
    monkeypatch.setattr(compiler, "prepare", slow_prepare)
    m = hlo_cli.parse(COND)
    x = np.ones((64, 64), np.float32) / 64
    p = Profile()
    p.start_sampling(threading.get_ident(), interval=0.005)
    try:
        got = run_module(m, [x], RunOptions(profile=p))
    finally:
        p.stop_sampling()
    _same_bits(got, run_module(hlo_cli.parse(COND), [x]))
    raw = sum(r.self_s for r in p._rows.values() if r.inst.name == "pick")    # as the step measured it
    assert raw >= 0.3
    found = p._prep.get(("main", "pick"), 0.0)         # sampled: how much depends on the machine's load
    assert found > 0 and p.preparing_s >= found
    pick = next(r for r in p.rows() if r.inst.name == "pick")
    assert pick.self_s == pytest.approx(raw - min(found, raw))
    s = p.summary(1.0)
    assert s["preparing_ms"] > 0 and s["preparing_top"][0]["computation"] == "yes"


def test_a_run_that_stops_keeps_its_profile(hlo, tmp_path):
    """An error (here --max-iterations) or ^C: the profile until then, with the step that was
    running; in the JSON error document too."""
    (tmp_path / "loop.hlo").write_text(LOOP.replace("constant(6)", "constant(1000000)"))
    np.save(tmp_path / "x.npy", np.zeros((64, 64), np.float32))
    r = hlo("run", "loop.hlo", "-i", "x.npy", "--profile", "--max-iterations", "3")
    assert r.exit_code == 1 and "until the run stopped" in r.stdout and "--max-iterations" in r.stderr
    doc = json.loads(hlo("run", "loop.hlo", "-i", "x.npy", "--profile", "--max-iterations", "3",
                         "--format", "json").stdout)
    assert doc["status"] == "error" and doc["profile"]["stopped"] is True
    rows = {r["instruction"]: r for r in doc["profile"]["top_instructions"]}
    assert rows["d"]["calls"] == 3 and rows["loop"]["calls"] == 1      # the loop that stopped is counted


def test_an_interrupted_step_keeps_its_time(monkeypatch):
    from hlo_cli.interpreter.ops import custom_call

    def interrupt(inst, args, ec):
        raise KeyboardInterrupt
    monkeypatch.setitem(custom_call.TARGETS, "hlo.test.interrupt", interrupt)
    m = hlo_cli.parse(LOOP.replace("t = f32[64,64] tanh(d)",
                                   't = f32[64,64] custom-call(d), custom_call_target="hlo.test.interrupt"'))
    p = Profile()
    with pytest.raises(KeyboardInterrupt):
        run_module(m, [np.ones((64, 64), np.float32)], RunOptions(profile=p))
    rows = {r.inst.name: r for r in p.rows()}
    assert rows["t"].calls == 1 and rows["loop"].calls == 1 and rows["loop"].total_s >= rows["t"].total_s
    assert p._stack == []
