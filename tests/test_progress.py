"""The progress display (hlo_cli/cli/progress.py): the sampler reads where a running module is from
what the runners publish (hlo_cli/interpreter/hooks.py) on every path the evaluator takes -- the
compiled step loop (tier 1), the generated code of hot computations (tier 2), the generic loop
(hooks, compiled=False) -- and from the frames of the multi-device walk, and never disturbs the run.

A custom-call target registered for these tests ("hlo.test.block") blocks the run inside a known
instruction until the test has looked, so every assertion is about a known position, without
timing.  The names the sampler still reads in the device walk's frames are checked too, so that
renaming one of them fails here rather than silently blanking the display.
"""
from __future__ import annotations

import io
import threading
import types

import numpy as np
import pytest

import hlo_cli
from hlo_cli.cli import progress
from hlo_cli.interpreter import run_module
from run_harness import hlo  # noqa: F401  (the fixture)

BLOCK = "hlo.test.block"

FLAT = f"""HloModule flat
ENTRY main {{
  x = f32[4] parameter(0)
  a = f32[4] add(x, x)
  b = f32[4] multiply(a, x)
  blocked = f32[4] custom-call(b), custom_call_target="{BLOCK}"
  ROOT d = f32[4] subtract(blocked, x)
}}
"""

LOOP = f"""HloModule loop
cond {{
  s = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(10)
  ROOT lt = pred[] compare(i, n), direction=LT
}}
body {{
  s = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  v = f32[4] get-tuple-element(s), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  w = f32[4] add(v, v)
  inner = f32[4] custom-call(w), custom_call_target="{BLOCK}"
  ROOT t = (s32[], f32[4]) tuple(j, inner)
}}
ENTRY main {{
  x = f32[4] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[4]) tuple(zero, x)
  loop = (s32[], f32[4]) while(init), condition=cond, body=body
  ROOT out = f32[4] get-tuple-element(loop), index=1
}}
"""

DEVICES = f"""HloModule on_devices, replica_count=2
ENTRY main {{
  x = f32[4] parameter(0)
  r = u32[] replica-id()
  rf = f32[] convert(r)
  rb = f32[4] broadcast(rf), dimensions={{}}
  a = f32[4] add(x, rb)
  per_device = f32[4] custom-call(a), custom_call_target="{BLOCK}"
  ROOT d = f32[4] multiply(per_device, x)
}}
"""

X = np.arange(4, dtype=np.float32)


@pytest.fixture()
def gate(monkeypatch):
    """The blocking custom call: its `at`-th call waits (inside the instruction) until `release`."""
    from hlo_cli.interpreter.ops import custom_call
    g = types.SimpleNamespace(entered=threading.Event(), release=threading.Event(), calls=0, at=1)

    def block(inst, args, ec):
        g.calls += 1
        if g.calls == g.at:
            g.entered.set()
            g.release.wait(20)
        return np.array(args[0], copy=True)
    monkeypatch.setitem(custom_call.TARGETS, BLOCK, block)
    yield g
    g.release.set()


def _start(fn):
    """Run fn() in a thread; returns (thread, box) with box["value"] or box["error"] afterwards."""
    box: dict = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as e:      # noqa: BLE001 -- the test reports it
            box["error"] = e
    th = threading.Thread(target=target, daemon=True)
    th.start()
    return th, box


def _blocked_sample(gate, fn):
    """Start fn in a thread, wait until it blocks in the custom call, sample it, let it finish."""
    th, box = _start(fn)
    try:
        assert gate.entered.wait(20), box
        smp = progress.sample(th.ident)
        frames = []
        f = __import__("sys")._current_frames()[th.ident]
        while f is not None:
            frames.append(f.f_code.co_filename)
            f = f.f_back
    finally:
        gate.release.set()
        th.join(20)
    assert "error" not in box, box.get("error")
    return smp, frames


def test_tier1_step_loop(gate):
    m = hlo_cli.parse(FLAT)
    smp, _ = _blocked_sample(gate, lambda: run_module(m, [X]))
    assert smp is not None and len(smp.levels) == 1
    lv = smp.levels[0]
    assert lv.computation == "main" and lv.count == 5 and lv.index == 4
    assert lv.instruction.name == "blocked" and lv.instruction.opcode == "custom-call"
    line = progress.describe(smp, 3.0)
    assert "main 4/5: blocked custom-call f32[4]" in line and "3 s" in line


def test_tier2_generated_code_in_a_loop(gate):
    gate.at = 8                          # the body runs as generated code after HOT_CALLS calls
    from hlo_cli.interpreter.compiler import HOT_CALLS
    assert gate.at > HOT_CALLS + 1
    m = hlo_cli.parse(LOOP)
    smp, frames = _blocked_sample(gate, lambda: run_module(m, [X]))
    assert any(f.startswith("<hlo computation body") for f in frames), frames    # tier 2 was running
    assert [lv.computation for lv in smp.levels] == ["main", "body"]
    outer, inner = smp.levels
    assert outer.instruction.opcode == "while" and outer.index == 4 and outer.count == 5
    assert inner.instruction.name == "inner" and inner.count == 8 and inner.index == 7
    assert smp.loop_iterations == 7 and outer.iteration == 8 and outer.trips is None
    line = progress.describe(smp, 65)
    assert "main 4/5 (iteration 8) > body 7/8: inner custom-call f32[4]" in line
    assert "loop iterations" not in line and line.endswith("(1 min 05 s)")     # the loop's own count says it
    smp.levels[0].iteration = None
    assert progress.describe(smp, 65).endswith("(7 loop iterations, 1 min 05 s)")


@pytest.mark.parametrize("how", ["compiled=False", "hook"])
def test_generic_loop(gate, how):
    gate.at = 3
    m = hlo_cli.parse(LOOP)
    kw = {"compiled": False} if how == "compiled=False" else {"hook": lambda ev: None}
    smp, frames = _blocked_sample(gate, lambda: run_module(m, [X], **kw))
    assert not any(f.startswith("<hlo computation") for f in frames)
    assert [lv.computation for lv in smp.levels] == ["main", "body"]
    assert smp.levels[0].instruction.name == "loop"
    assert smp.levels[1].instruction.name == "inner" and smp.levels[1].index == 7
    assert smp.loop_iterations == 2 and smp.executed > 0 and smp.levels[0].iteration == 3


def test_a_known_trip_count_is_shown(gate):
    gate.at = 2
    m = hlo_cli.parse(LOOP.replace("condition=cond, body=body",
                                   'condition=cond, body=body, backend_config={"known_trip_count":{"n":"10"}}'))
    smp, _ = _blocked_sample(gate, lambda: run_module(m, [X]))
    assert (smp.levels[0].iteration, smp.levels[0].trips) == (2, 10)
    assert "main 4/5 (iteration 2/10) > body 7/8" in progress.describe(smp, 1)


def test_profiled_steps(gate):
    from hlo_cli.interpreter import RunOptions
    from hlo_cli.interpreter.profiling import Profile
    m = hlo_cli.parse(FLAT)
    smp, _ = _blocked_sample(gate, lambda: run_module(m, [X], RunOptions(profile=Profile())))
    assert smp.levels[-1].instruction.name == "blocked" and smp.levels[-1].index == 4


def test_multi_device_walk(gate):
    from hlo_cli.devices import run_devices
    m = hlo_cli.parse(DEVICES)
    smp, _ = _blocked_sample(gate, lambda: run_devices(m, [X]))
    assert smp.devices == 2
    lv = smp.levels[0]
    assert lv.computation == "main" and lv.devices == 2 and lv.instruction.name == "per_device"
    assert "2 devices" in progress.describe(smp, 1)


def test_sampler_never_raises(monkeypatch):
    assert progress.sample(-12345) is None                      # no such thread
    assert progress.sample(threading.get_ident()) is None      # a thread running no module

    def broken():
        raise RuntimeError("boom")
    from hlo_cli.interpreter import hooks
    monkeypatch.setattr(hooks, "snapshot", broken)
    assert progress.sample(threading.get_ident()) is None
    assert progress.describe(None, 2.0) == "running... (2 s)"
    assert progress.describe(None, 75.0, phase="parsing big.hlo") == "parsing big.hlo... (1 min 15 s)"


def test_display_shows_the_position_and_survives_a_broken_sampler(gate, monkeypatch):
    from rich.console import Console
    buf = io.StringIO()
    m = hlo_cli.parse(FLAT)
    th, box = _start(lambda: run_module(m, [X]))
    assert gate.entered.wait(20)
    d = progress.Display(th.ident, interval=0.01, delay=0.0,
                         console=Console(file=buf, force_terminal=True, width=120))
    d.start()
    for _ in range(2000):
        if d.updates >= 2:
            break
        threading.Event().wait(0.005)
    d.stop()
    assert "main 4/5: blocked custom-call f32[4]" in buf.getvalue()

    def broken(*a, **k):
        raise RuntimeError("boom")
    monkeypatch.setattr(progress, "sample", broken)    # anything unexpected ends the display, not the run
    d2 = progress.Display(th.ident, interval=0.01, delay=0.0, console=Console(file=io.StringIO()))
    d2.start()
    d2._thread.join(5)
    assert not d2._thread.is_alive()
    d2.stop()
    gate.release.set()
    th.join(20)
    assert "error" not in box and box["value"].tolist() == [0.0, 1.0, 6.0, 15.0]      # 2x*x - x


def test_the_multi_device_walk_publishes_and_takes_its_levels_away(gate):
    """The walk over devices (devices/spmd.py) reports through the hooks like the other runners:
    nothing is read from its frames, and its levels are gone when it returns."""
    from hlo_cli.devices import run_devices
    from hlo_cli.interpreter import hooks
    smp, _ = _blocked_sample(gate, lambda: run_devices(hlo_cli.parse(DEVICES), [X]))
    assert smp.executed >= 1 and smp.levels[0].index == 6
    gate.at = 0
    run_devices(hlo_cli.parse(DEVICES), [X])
    assert hooks.track().levels == []


def test_the_runners_leave_the_track_as_they_found_it(gate):
    """Every level a runner publishes (hooks.py) is taken away when it returns or raises."""
    from hlo_cli.errors import HloEvalError
    from hlo_cli.interpreter import hooks
    gate.at = 0
    t = hooks.track()
    for kw in ({}, {"compiled": False}):
        run_module(hlo_cli.parse(LOOP), [X], **kw)
        assert t.levels == []

    def fail(inst, args, ec):
        raise HloEvalError("stop")
    from hlo_cli.interpreter.ops import custom_call
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(custom_call.TARGETS, BLOCK, fail)
        with pytest.raises(HloEvalError):
            run_module(hlo_cli.parse(LOOP), [X])
    assert t.levels == [] and progress.sample(threading.get_ident()) is None


def test_no_display_when_stderr_is_not_a_terminal(hlo, tmp_path, monkeypatch):
    made = []

    class Spy:
        def __init__(self, *a, **k):
            made.append(1)

        def start(self):
            return self

        def stop(self):
            pass
    monkeypatch.setattr(progress, "Display", Spy)
    (tmp_path / "m.hlo").write_text(FLAT.replace(f'custom-call(b), custom_call_target="{BLOCK}"', "negate(b)"))
    r = hlo("run", tmp_path / "m.hlo", "--random-inputs")
    assert r.exit_code == 0 and made == [] and r.stderr == ""


def test_display_on_a_terminal_unless_no_progress_or_json(hlo, tmp_path, monkeypatch):
    from hlo_cli.cli import run as run_cmd
    made = []

    class Spy:
        def __init__(self, *a, **k):
            made.append("made")

        def start(self):
            return self

        def stop(self):
            made.append("stopped")

        @property
        def phase(self):
            return made[-1]

        @phase.setter
        def phase(self, text):
            made.append(text.split()[0])
    monkeypatch.setattr(progress, "Display", Spy)
    monkeypatch.setattr(run_cmd, "stderr_is_terminal", lambda: True)
    (tmp_path / "m.hlo").write_text(FLAT.replace(f'custom-call(b), custom_call_target="{BLOCK}"', "negate(b)"))
    phases = ["made", "parsing", "checking", "estimating", "reading", "preparing", "stopped"]
    for extra, want in (([], phases), (["--no-progress"], []), (["--format", "json"], [])):
        made.clear()
        r = hlo("run", tmp_path / "m.hlo", "--random-inputs", *extra)
        assert r.exit_code == 0 and _once(made) == want, (extra, made)
    made.clear()
    r = hlo("run", tmp_path / "m.hlo")                 # an error before the run: the line goes away
    assert r.exit_code == 2 and _once(made) == phases[:5] + ["stopped"]


def _once(events):
    """stop() may be called again after the line is gone (it is idempotent)."""
    return events[:-1] if events[-2:] == ["stopped", "stopped"] else events


def test_stderr_is_terminal_survives_odd_streams(monkeypatch):
    from hlo_cli.cli import run as run_cmd

    class Closed:
        def isatty(self):
            raise ValueError("I/O operation on closed file")
    monkeypatch.setattr(run_cmd.sys, "stderr", Closed())
    assert run_cmd.stderr_is_terminal() is False


def test_hold_takes_the_line_away_for_a_note():
    from rich.console import Console
    buf = io.StringIO()
    d = progress.Display(interval=0.01, delay=0.0, console=Console(file=buf, force_terminal=True, width=80))
    d.phase = "reading inputs"
    d.start()
    for _ in range(2000):
        if d.updates >= 1:
            break
        threading.Event().wait(0.005)
    with d.hold():
        assert d._live is None                       # the line is gone while the note is written
        buf.write("note: something\n")
    d.stop()
    out = buf.getvalue()
    assert "reading inputs... (0 s)" in out and "note: something\n" in out


def test_describe_keeps_the_outermost_position_when_narrow():
    m = hlo_cli.parse("HloModule m\nENTRY e {\n"
                      "  ROOT some_long_instruction_name.123 = f32[1024,1024,3] parameter(0)\n}\n")
    inst = m.entry_computation.instructions[0]
    smp = progress.Sample([progress.Level("main.923", 1000, 6438), progress.Level("body.12", 5, 40),
                           progress.Level("region.1", 3, 9), progress.Level("fused.3249", 4, 12, inst)], 345)
    wide = progress.describe(smp, 33, 300)
    assert wide == ("main.923 1,000/6,438 > body.12 5/40 > region.1 3/9 > fused.3249 4/12: "
                    "some_long_instruction_name.123 parameter f32[1024,1024,3]  (345 loop iterations, 33 s)")
    for width in (120, 100, 80, 60):
        line = progress.describe(smp, 33, width)
        assert len(line) <= width and line.startswith("main.923 1,000/6,438") and line.endswith("33 s)"), line
    assert "fused.3249 4/12" in progress.describe(smp, 33, 120)
