"""The new tools (bisect, graph overlays, ...) used as a JAX user would, on files none of us wrote.

data/shardy_dump: four stages of a JAX (0.10, Shardy) dump made on this machine with
XLA_FLAGS="--xla_force_host_platform_device_count=8 --xla_dump_to=DIR --xla_dump_hlo_pass_re=.*
--xla_dump_hlo_as_proto" of

    mesh = Mesh(np.array(jax.devices()).reshape(4, 2), ("a", "b"))
    f = jax.jit(lambda x, w: jnp.sum(jnp.tanh(x @ w), axis=0))
    f(device_put(ones((16, 8)), P("a", None)), device_put(ones((8, 4)) * 0.1, P(None, "b")))

JAX leaves the output sharding to XLA: the module before optimizations has no sharding on its ROOT;
the shardy-xla stage is the first with one, and the programs after SPMD partitioning have none.
data/nan_conv: a JAX convnet step whose log makes a NaN (conv, relu, log(y - 1), sum), dumped with
--xla_dump_hlo_as_proto --xla_dump_hlo_snapshots: the module before and after optimizations and the
snapshot of its execution (the optimized module, its arguments and its NaN result).

Every test asserts the exit code, a fragment, and that no traceback appears."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from hlo_cli.cli import main

HERE = Path(__file__).resolve().parent
SHARDY = HERE / "data" / "shardy_dump"
SHARDY_STAGES = [SHARDY / n for n in (
    "module_0012.jit_f.before_optimizations.hlo.pb",
    "module_0012.jit_f.0003.spmd-partitioner.after_shardy-xla.before_spmd-partitioning.hlo.pb",
    "module_0012.jit_f.0006.spmd-partitioner.after_spmd-partitioning.before_control-dep-rewriter.hlo.pb",
    "module_0012.jit_f.cpu_after_optimizations.hlo.pb")]


@pytest.fixture()
def run(monkeypatch, tmp_path):
    monkeypatch.setenv("HLO_CACHE_DIR", str(tmp_path / "cache"))

    def _run(*args):
        r = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
        for stream in (r.stdout, r.stderr):
            assert "Traceback" not in stream, stream
            assert "internal error" not in stream, stream
        return r
    return _run


def test_bisect_through_shardy_partitioning_takes_the_root_sharding_of_a_later_stage(run):
    """The partitioned programs' results are put together by the sharding the first stage that has
    one gives the ROOT (shardy-xla), not refused because the first stage has none."""
    r = run("bisect", *SHARDY_STAGES, "--random-inputs")
    assert r.exit_code == 0, r.output
    assert "cannot run" not in r.output and "skipped" not in r.output, r.output
    assert "every stage agrees" in r.output


def test_bisect_notices_a_broken_partitioned_stage(run, tmp_path):
    """The same dump with the partitioned program's tanh made a negate: bisect names spmd-partitioning."""
    from hlo_cli.sources import load
    from hlo_cli.ir.printer import format_module
    files = []
    for k, p in enumerate(SHARDY_STAGES):
        mod, _ = load(str(p), None, False)
        text = format_module(mod)
        if k >= 2:
            assert " tanh(" in text
            text = text.replace(" tanh(", " negate(")
        dest = tmp_path / p.name.replace(".hlo.pb", ".txt")
        dest.write_text(text)
        files.append(dest)
    r = run("bisect", *files, "--random-inputs")
    assert r.exit_code == 1, r.output
    assert "spmd-partitioning" in r.output


def _nan_dump(run, tmp_path):
    """An `hlo run --dump-dir` of a module whose log makes a NaN, and a second text of that module
    (its instructions renamed, as XLA's passes do) that shares only its parameters' names."""
    a = tmp_path / "a.hlo"
    a.write_text("HloModule m\n\nENTRY main {\n  x = f32[4] parameter(0)\n  c = f32[] constant(-1)\n"
                 "  b = f32[4] broadcast(c), dimensions={}\n  s = f32[4] add(x, b)\n"
                 "  ROOT l = f32[4] log(s)\n}\n")
    b = tmp_path / "b.hlo"
    b.write_text("HloModule m\n\nENTRY main {\n  x = f32[4] parameter(0)\n  c.1 = f32[] constant(-1)\n"
                 "  b.1 = f32[4] broadcast(c.1), dimensions={}\n  s.1 = f32[4] add(x, b.1)\n"
                 "  ROOT l.1 = f32[4] log(s.1)\n}\n")
    np.save(tmp_path / "x.npy", np.zeros(4, np.float32))
    r = run("run", a, "-i", tmp_path / "x.npy", "--dump-dir", tmp_path / "dump")
    assert r.exit_code in (0, 1), r.output
    return a, b, tmp_path / "dump"


def test_overlay_of_the_modules_own_run_marks_the_nan(run, tmp_path):
    a, _, dump = _nan_dump(run, tmp_path)
    r = run("graph", a, "-o", tmp_path / "g.dot", "--overlay", dump)
    assert r.exit_code == 0, r.output
    assert "first non-finite value: l" in r.stderr
    assert "warning" not in r.stderr


def test_overlay_of_another_text_says_what_it_left_out(run, tmp_path):
    """A dump of another text of the module (names that differ) overlays only the instructions it
    shares: say how many it left out, and never call the run finite when its NaN is among them."""
    _, b, dump = _nan_dump(run, tmp_path)
    r = run("graph", b, "-o", tmp_path / "g.dot", "--overlay", dump)
    assert r.exit_code == 0, r.output
    assert "warning: --overlay" in r.stderr, r.stderr
    assert "of its 5 instructions" in r.stderr and "not in module m" in r.stderr, r.stderr
    assert "first non-finite value (l)" in r.stderr, r.stderr
    dot = (tmp_path / "g.dot").read_text()
    assert "every value finite" not in dot


PASSES = HERE.parents[1] / "samples" / "dumps" / "passes"


def test_graph_draws_a_stage_of_a_dump_directory(run, tmp_path):
    """`hlo graph DIR --module NAME --stage PASS` as `hlo fmt/run/check/info` take it; without --stage
    the directory is a usage error that says how to choose."""
    r = run("graph", PASSES, "--module", "jit_step", "--stage", "after_optimizations", "-o", tmp_path / "g.dot")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "g.dot").read_text().startswith("digraph")
    r = run("graph", PASSES, "-o", tmp_path / "h.dot")
    assert r.exit_code == 2
    assert "--stage" in r.stderr and "hlo info" in r.stderr


def test_bisect_of_files_of_two_modules_is_a_usage_error(run, tmp_path):
    """Two files that are not stages of one module (their entries take different numbers of
    parameters) are refused as hlo diff refuses them, not reported as 'every stage agrees'."""
    a = tmp_path / "a.hlo"
    a.write_text("HloModule a\n\nENTRY main {\n  x = f32[4] parameter(0)\n  ROOT n = f32[4] negate(x)\n}\n")
    b = tmp_path / "b.hlo"
    b.write_text("HloModule b\n\nENTRY main {\n  x = f32[4] parameter(0)\n  y = f32[4] parameter(1)\n"
                 "  ROOT n = f32[4] add(x, y)\n}\n")
    r = run("bisect", a, b, "--random-inputs")
    assert r.exit_code == 2, r.output
    assert "parameters" in r.stderr and str(b) in r.stderr, r.stderr
    assert "agrees" not in r.output


NAN_CONV = HERE / "data" / "nan_conv"
CONV_BEFORE = NAN_CONV / "module_0008.jit_f.before_optimizations.hlo.pb"
CONV_AFTER = NAN_CONV / "module_0008.jit_f.cpu_after_optimizations.hlo.pb"
CONV_SNAPSHOT = NAN_CONV / "module_0008.jit_f.snapshot.496375750.pb"


def test_inputs_from_a_snapshot_for_the_module_before_optimizations(run, tmp_path):
    """The failing execution's arguments (the snapshot holds the optimized module) given to the module
    before optimizations and to a diff of the two: --inputs SNAPSHOT.pb."""
    r = run("run", CONV_BEFORE, "--inputs", CONV_SNAPSHOT, "-o", tmp_path / "out.npz")
    assert r.exit_code == 0, r.output
    out = np.load(tmp_path / "out.npz")
    assert np.isnan(out["out0"]).all()
    r = run("diff", CONV_BEFORE, CONV_AFTER, "--inputs", CONV_SNAPSHOT, "--format", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["results_agree"] is True
    r = run("run", CONV_BEFORE, "--inputs", CONV_BEFORE)
    assert r.exit_code == 2
    assert "holds no arguments" in r.stderr


def test_reference_hint_for_a_snapshot_names_its_arguments(tmp_path):
    """XLA refusing a snapshot's optimized module: the hint to run the module before optimizations
    gives the snapshot's arguments with --inputs, a command that can be run as printed."""
    import shutil

    from hlo_cli.ir.printer import format_module
    from hlo_cli.tools.reference import reference_report
    from hlo_cli.sources import load
    for p in (CONV_BEFORE, CONV_SNAPSHOT):
        shutil.copy(p, tmp_path / p.name)
    snap = str(tmp_path / CONV_SNAPSHOT.name)
    text = format_module(load(str(CONV_AFTER), None, False)[0])
    doc = reference_report(text, [], "single", None, [], 1e-3, 1e-3, source=snap, refused="refused for the test")
    assert doc["status"] == "error"
    assert f"--inputs {snap} --reference xla" in doc["message"], doc["message"]


@pytest.mark.parametrize("cmd", ["diff", "bisect", "run"])
def test_a_nan_tolerance_is_a_usage_error(run, cmd, tmp_path):
    """--atol nan made every value differ (diff) or was printed as 'nan + 0.001 * |reference|'."""
    args = {"diff": ["diff", CONV_BEFORE, CONV_AFTER, "--inputs", CONV_SNAPSHOT],
            "bisect": ["bisect", CONV_BEFORE, CONV_AFTER, "--inputs", CONV_SNAPSHOT],
            "run": ["run", CONV_SNAPSHOT]}[cmd]
    for opt in ("--atol", "--rtol"):
        r = run(*args, opt, "nan")
        assert r.exit_code == 2, r.output
        assert "--rtol and --atol" in r.stderr, r.stderr


UNOPT_TEXT = HERE / "data" / "unopt_text" / "module_0004.jit_multiply.execution_0000.hlo_unoptimized_snapshot.txt"


def test_an_unoptimized_snapshot_in_text_form_runs_on_its_arguments(run, tmp_path):
    """XLA_FLAGS="--xla_dump_hlo_unoptimized_snapshots --xla_dump_hlo_as_text" writes the snapshot in
    protobuf's text format as *.hlo_unoptimized_snapshot.txt (JAX, jnp.ones((8, 16)) * 0.1): it runs on
    its arguments as its .pb form does, and gives them to --inputs."""
    r = run("run", UNOPT_TEXT, "-o", tmp_path / "out.npz")
    assert r.exit_code == 0, r.output
    out = np.load(tmp_path / "out.npz")["out0"]
    assert out.shape == (8, 16) and np.allclose(out, 0.1)
    text = tmp_path / "m.hlo"
    r = run("fmt", UNOPT_TEXT)
    text.write_text(r.stdout)
    r = run("run", text, "--inputs", UNOPT_TEXT, "-o", tmp_path / "out2.npz")
    assert r.exit_code == 0, r.output
    assert np.array_equal(np.load(tmp_path / "out2.npz")["out0"], out)


def test_diff_names_its_own_module_options(run):
    """A PyTorch/XLA saved-graphs file holds several modules: hlo diff asks for --module-a/--module-b
    (it has no --module)."""
    saved = HERE.parents[1] / "samples" / "multi" / "saved_graphs.txt"
    r = run("diff", saved, saved, "--random-inputs", "--module-a", "0")
    assert r.exit_code == 2
    assert "--module-b N" in r.stderr and "--module N" not in r.stderr, r.stderr
    r = run("diff", saved, saved, "--random-inputs", "--module-a", "7", "--module-b", "0")
    assert r.exit_code == 2
    assert "--module-a 7: no module #7" in r.stderr, r.stderr


def test_a_directory_of_unoptimized_snapshots_says_what_it_holds(run, tmp_path):
    """--xla_dump_hlo_unoptimized_snapshots dumps the snapshots alone (no module stages): hlo info DIR
    names them and how to run one, instead of '13 other files'."""
    import shutil
    shutil.copy(UNOPT_TEXT, tmp_path / UNOPT_TEXT.name)
    r = run("info", tmp_path)
    assert r.exit_code == 2
    assert "1 of them HloUnoptimizedSnapshots" in r.stderr and "hlo run FILE" in r.stderr, r.stderr


def test_profile_overlay_of_another_text_says_what_it_left_out(run, tmp_path):
    """A profile of another text of the module (a JAX step's optimized run on its text before
    optimizations matched 1 of 50 rows, silently)."""
    a, b, _ = _nan_dump(run, tmp_path)
    r = run("run", a, "-i", tmp_path / "x.npy", "--profile", "--format", "json")
    assert r.exit_code in (0, 1), r.output
    (tmp_path / "p.json").write_text(r.stdout)
    b.write_text(a.read_text().replace("ROOT l = f32[4] log(s)", "ROOT l.1 = f32[4] log(s)"))
    r = run("graph", b, "-o", tmp_path / "g.dot", "--overlay", tmp_path / "p.json")
    assert r.exit_code == 0, r.output
    assert "warning: --overlay" in r.stderr and "not in module m" in r.stderr, r.stderr
    r = run("graph", a, "-o", tmp_path / "h.dot", "--overlay", tmp_path / "p.json")
    assert r.exit_code == 0, r.output
    assert "warning" not in r.stderr, r.stderr


def test_random_inputs_too_big_together_says_so(monkeypatch, tmp_path):
    """XLA's llama benchmark: 'parameter 255 (f32[4096,14336]) needs 224.00 MiB, more than this machine
    can ever hold: 23.54 GiB' -- the parameters together were, the message now says so."""
    from hlo_cli.errors import HloResourceError
    from hlo_cli.interpreter import memory
    from hlo_cli.interpreter.inputs import random_inputs
    from hlo_cli.sources import load
    m = tmp_path / "m.hlo"
    m.write_text("HloModule m\n\nENTRY main {\n  a = f32[100] parameter(0)\n  b = f32[100] parameter(1)\n"
                 "  c = f32[100] parameter(2)\n  s = f32[100] add(a, b)\n  ROOT t = f32[100] add(s, c)\n}\n")
    module, _ = load(str(m), None, False)
    monkeypatch.setattr(memory, "memory_limit", lambda: 1900)
    with pytest.raises(HloResourceError) as e:
        random_inputs(module.entry_computation.parameters)
    msg = str(e.value)
    assert "parameter 2 'c'" in msg and "with the 2 parameters before it" in msg and "in all" in msg, msg


def test_diff_with_a_snapshot_runs_on_its_arguments(run):
    """`hlo diff BEFORE.hlo.pb SNAPSHOT.pb` (no inputs given): the snapshot's arguments, as `hlo run
    SNAPSHOT.pb` takes them, with a note saying so."""
    r = run("diff", CONV_BEFORE, CONV_SNAPSHOT)
    assert r.exit_code == 0, r.output
    assert f"the arguments recorded in {CONV_SNAPSHOT}" in r.stderr, r.stderr
    assert "verdict: the results agree" in r.stdout


def test_diff_says_when_the_place_shown_is_a_nan_in_one_only(run, tmp_path):
    """log vs abs on [-1, 2, -3, 4]: the place shown is a NaN in A (the worst kind of difference) while
    the max |diff| is over the finite differences elsewhere: the report says so."""
    a = tmp_path / "a.hlo"
    a.write_text("HloModule m\n\nENTRY main {\n  x = f32[4] parameter(0)\n  ROOT l = f32[4] log(x)\n}\n")
    b = tmp_path / "b.hlo"
    b.write_text("HloModule m\n\nENTRY main {\n  x = f32[4] parameter(0)\n  ROOT l = f32[4] abs(x)\n}\n")
    np.save(tmp_path / "x.npy", np.array([-1, 2, -3, 4], np.float32))
    r = run("diff", a, b, "-i", tmp_path / "x.npy")
    assert r.exit_code == 1, r.output
    assert "NaN or Inf in one of the two at [0]" in r.stdout, r.stdout
