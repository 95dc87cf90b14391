"""`hlo run --reference xla`: the module run on XLA CPU itself (through JAX, in a child process)
with the inputs hlo used, compared as --expect compares.

Fast tests need no JAX: the comparison with crafted result pairs, the manual marking of per-device
programs, XLA's crash lines, the child's environment, JAX missing (a PYTHONPATH shim whose `jax`
fails to import, and an interpreter without it).  The live tests (slow) run XLA: samples that agree
(exit 0, the JSON's `reference` section and XLA's timings), a module where hlo and XLA legitimately
differ (rng's values are implementation-defined: exit 1), texts after XLA's optimizations that XLA
refuses or crashes on (exit 6, hlo survives), and modules on 4 and 8 devices.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hlo_cli.tools import reference as ref
from hlo_cli.pipeline.inputs import snapshot_reference
from hlo_cli.errors import ExitCode, HloReferenceError
from run_harness import hlo  # noqa: F401  (the fixture)

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "samples"

RNG = """HloModule rng_uniform

ENTRY main {
  lo = f32[] constant(0)
  hi = f32[] constant(1)
  ROOT r = f32[16] rng(lo, hi), distribution=rng_uniform
}
"""


def _no_traceback(*texts):
    for t in texts:
        assert "Traceback" not in (t or ""), t


# ----------------------------------------------------------------------------- the comparison (no JAX)

def test_compare_with_xla_agrees_and_differs_as_expect_does():
    got = [np.array([1.0, 2.0, np.nan], np.float32), np.array([1, 2], np.int32)]
    same = ref.XlaRun([np.array([1.0, 2.0005, np.nan], np.float32), np.array([1, 2], np.int32)], {})
    mm = ref.compare_with_xla(got, same, 1e-3, 1e-3)
    assert mm["ok"] and [r["status"] for r in mm["rows"]] == ["ok", "ok"]
    other = ref.XlaRun([np.array([1.0, 2.5, np.nan], np.float32), np.array([1, 3], np.int32)], {})
    mm = ref.compare_with_xla(got, other, 1e-3, 1e-3)
    assert not mm["ok"]
    assert mm["rows"][0]["status"] == "mismatch" and mm["rows"][0]["first_index"] == [1]
    assert mm["rows"][1]["mismatched"] == 1
    # a result XLA did not give, and one XLA gives more
    assert ref.compare_with_xla(got, ref.XlaRun(got[:1], {}), 0, 0)["rows"][1]["status"] == "missing in the reference"
    extra = ref.compare_with_xla(got[:1], ref.XlaRun(got, {}), 0, 0)
    assert not extra["ok"] and extra["rows"][-1]["status"] == "not among the results"


def test_a_dynamic_size_is_read_from_xlas_bounded_buffer():
    """A result f32[<=12] of 6 elements: XLA gives the buffer at its bound, the values first."""
    xla = ref.XlaRun([np.array([1, 2, 3, 0, 0, 0, 0, 0], np.float32), np.arange(24).reshape(12, 2)], {})
    mm = ref.compare_with_xla([np.array([1, 2, 3], np.float32), np.arange(6).reshape(3, 2)], xla, 0, 0)
    assert mm["ok"] and "read at the run's size [3]" in mm["rows"][0]["note"]
    mm = ref.compare_with_xla([np.array([1, 2, 4], np.float32)], xla, 0, 0)
    assert not mm["ok"] and mm["rows"][0]["first_index"] == [2]


def test_reference_report_says_why_xla_gave_nothing(monkeypatch):
    def refuse(*a, **k):
        raise HloReferenceError("XLA could not compile this module: INTERNAL: no", kind="refused", stage="compile")
    monkeypatch.setattr(ref, "run_xla", refuse)
    doc = ref.reference_report("HloModule m", [], "single", None, [], 1e-3, 1e-3, hlo_execute_s=0.5)
    assert doc["status"] == "error" and doc["exit_code"] == ExitCode.REFERENCE_FAILED == 6
    assert doc["kind"] == "refused" and doc["stage"] == "compile" and doc["timings"] == {"hlo_execute_s": 0.5}

    def agree(text, args, **k):
        return ref.XlaRun([np.ones(3, np.float32)], {"parse_s": 0.1, "compile_s": 0.2, "run_s": 0.01},
                          jax_version="9.9")
    monkeypatch.setattr(ref, "run_xla", agree)
    doc = ref.reference_report("HloModule m", [], "single", None, [np.ones(3, np.float32)], 1e-3, 1e-3,
                               hlo_execute_s=0.5)
    assert doc["status"] == "ok" and doc["ok"] and doc["jax_version"] == "9.9"
    assert doc["timings"] == {"xla_parse_s": 0.1, "xla_compile_s": 0.2, "xla_run_s": 0.01, "hlo_execute_s": 0.5}


def test_manual_text_marks_every_unsharded_instruction():
    text = ("HloModule m, num_partitions=2\n\n// a comment = f32[2] add(x)\nENTRY e {\n"
            "  x = f32[2] parameter(0), sharding={replicated}\n"
            "  p = u32[] partition-id()\n"
            "  t = (f32[2], (u32[], token[])) tuple(x, q)\n"
            "  ROOT r = f32[2] add(x, x), metadata={op_name=\"a(b)\"}\n}\n")
    out = ref.manual_text(text).splitlines()
    assert out[2] == "// a comment = f32[2] add(x)"
    assert out[4].endswith("sharding={replicated}") and out[4].count("sharding") == 1
    assert out[5].endswith("partition-id(), sharding={manual}")
    assert out[6].endswith("tuple(x, q), sharding={{manual}, {manual}, {manual}}")
    assert out[7].endswith('metadata={op_name="a(b)"}, sharding={manual}')


def test_crash_line_is_xlas_reason():
    stderr = ("W1127 01:00:00.1 1 x.cc:1] a warning\n"
              "F1127 01:32:17.082066    8394 shape_util.cc:1484] Check failed: input_shape.has_layout() f32[3,3]\n"
              "*** Check failure stack trace: ***\n    @     0x7fc921840634  absl::LogMessage::SendToLog()\n")
    assert ref.crash_line(stderr) == "Check failed: input_shape.has_layout() f32[3,3] (shape_util.cc:1484)"
    stderr = ("E1127 01:39:13.6 5449 common_pjrt_client.cc:1622] ExecutePrepare failed: E0102: Mismatch:\n"
              "Executable expected parameter 0 of size 16\nFatal Python error: Segmentation fault\n")
    assert ref.crash_line(stderr) == ("ExecutePrepare failed: E0102: Mismatch: Executable expected parameter 0 "
                                       "of size 16")


def test_child_environment_has_the_devices(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/x --xla_force_host_platform_device_count=2")
    env = ref.child_env(8)
    assert env["XLA_FLAGS"] == "--xla_dump_to=/tmp/x --xla_force_host_platform_device_count=8"
    assert env["JAX_PLATFORMS"] == "cpu" and env["JAX_ENABLE_X64"] == "1"
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=16")
    assert ref.child_env(8)["XLA_FLAGS"] == "--xla_force_host_platform_device_count=16"
    monkeypatch.setenv("JAX_NUM_CPU_DEVICES", "2")         # (JAX reads it before the flag)
    assert ref.child_env(8)["JAX_NUM_CPU_DEVICES"] == "16"
    # the child imports the hlo_cli this process runs (the checkout, or site-packages when installed)
    here = str(Path(ref.__file__).resolve().parent.parent)
    assert here in ref.child_env(1)["PYTHONPATH"].split(os.pathsep)


def test_the_module_before_optimizations_is_pointed_at(tmp_path):
    for name, before in [("f.opt.hlo", "f.hlo"), ("module_0002.jit_f.cpu_after_optimizations.txt",
                                                   "module_0002.jit_f.before_optimizations.txt"),
                         ("module_0004.jit_mlp.snapshot.-1888735265.pb",
                          "module_0004.jit_mlp.before_optimizations.txt"),
                         ("mlp.snapshot.pb", "mlp.hlo")]:
        (tmp_path / name).write_text("x")
        assert ref.before_optimizations(str(tmp_path / name)) is None        # not there (yet)
        (tmp_path / before).write_text("x")
        assert ref.before_optimizations(str(tmp_path / name)) == str(tmp_path / before)
    assert ref.before_optimizations("-") is None and ref.before_optimizations(str(tmp_path / "f.hlo")) is None
    # an unoptimized snapshot of the module (it holds the arguments) comes first
    un = tmp_path / "module_0004.jit_mlp.execution_0000.hlo_unoptimized_snapshot.pb"
    un.write_text("x")
    assert ref.before_optimizations(str(tmp_path / "module_0004.jit_mlp.snapshot.-1888735265.pb")) == str(un)
    (tmp_path / "mlp.hlo_unoptimized_snapshot.pb").write_text("x")
    assert ref.before_optimizations(str(tmp_path / "mlp.snapshot.pb")) == \
        str(tmp_path / "mlp.hlo_unoptimized_snapshot.pb")


def test_a_token_parameter_is_refused_without_running_xla(hlo, tmp_path, monkeypatch):
    monkeypatch.setattr(ref, "jax_installed", lambda: True)
    monkeypatch.setattr(ref, "run_xla", lambda *a, **k: pytest.fail("XLA must not run"))
    f = tmp_path / "tok.hlo"
    f.write_text("HloModule tok\n\nENTRY main {\n  p = (f32[2], s32[3]) parameter(0)\n  t = token[] parameter(1)\n"
                 "  a = f32[2] get-tuple-element(p), index=0\n  ROOT r = (f32[2], token[]) tuple(a, t)\n}\n")
    r = hlo("run", f, "--random-inputs", "--reference", "xla", "--format", "json")
    doc = json.loads(r.stdout)
    assert r.exit_code == 6 and doc["status"] == "reference-error" and doc["results"]
    assert "cannot be given a token parameter (parameter 1 't': token[])" in doc["reference"]["message"]


def test_snapshot_reference_keys_over_leaves():
    class Snap:
        result = (np.zeros(2), (np.ones(3, np.int8), None))
    r = snapshot_reference(Snap())
    assert list(r) == ["out0", "out1"] and r["out1"].dtype == np.int8


# ----------------------------------------------------------------------------- JAX missing (no JAX needed)

def test_jax_not_installed_is_said_before_running(hlo, tmp_path, monkeypatch):
    monkeypatch.setattr(ref, "jax_installed", lambda: False)
    (tmp_path / "m.hlo").write_text(RNG)
    r = hlo("run", tmp_path / "m.hlo", "--reference", "xla")
    assert r.exit_code == 6
    assert "needs JAX" in r.stderr and "pip install 'hlo-cli[xla]'" in r.stderr
    assert "results of" not in r.stdout            # said before hlo's own run
    r = hlo("run", tmp_path / "m.hlo", "--reference", "xla", "--format", "json")
    doc = json.loads(r.stdout)
    assert r.exit_code == 6 and doc["status"] == "error" and doc["exit_code"] == 6 and "needs JAX" in doc["message"]


def test_jax_that_cannot_be_imported(tmp_path):
    """A PYTHONPATH shim whose `jax` fails to import: the child process says so; exit 6, no traceback."""
    shim = tmp_path / "shim" / "jax"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError('jax is broken here (test shim)')\n")
    (tmp_path / "m.hlo").write_text(RNG)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path / "shim"), str(ROOT)]),
               HLO_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, "-c", "from hlo_cli.cli import main; main()", "run", str(tmp_path / "m.hlo"),
                        "--reference", "xla", "--no-progress"], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 6, r.stderr
    assert "cannot be imported" in r.stderr and "jax is broken here" in r.stderr
    assert "pip install 'hlo-cli[xla]'" in r.stderr
    assert "results of rng_uniform" in r.stdout          # hlo's own results are still reported
    _no_traceback(r.stdout, r.stderr)


def test_reference_choice_is_checked(hlo, tmp_path):
    (tmp_path / "m.hlo").write_text(RNG)
    r = hlo("run", tmp_path / "m.hlo", "--reference", "gpu")
    assert r.exit_code == 2 and "'gpu' is not" in r.stderr and "--reference" in r.stderr


# ----------------------------------------------------------------------------- live: XLA decides (slow)

live = pytest.mark.slow


def _json(r):
    return json.loads(r.stdout)


@live
@pytest.mark.parametrize("name", ["jax/cond_switch", "jax/mixed_dtypes", "tensorflow/dynamic_shapes"])
def test_samples_agree_with_xla(hlo, name):
    """(dynamic_shapes: results of a bounded dynamic size, which XLA gives at their bound)"""
    pytest.importorskip("jax")
    base = SAMPLES / name
    r = hlo("run", f"{base}.hlo", "--inputs", f"{base}.inputs.npz", "--reference", "xla", "--format", "json")
    assert r.exit_code == 0, r.stdout
    doc = _json(r)
    x = doc["reference"]
    assert doc["status"] == "ok" and x["status"] == "ok" and x["ok"] and x["platform"] == "xla"
    assert x["devices"] == 1 and x["mode"] == "single" and x["jax_version"]
    assert all(row["status"] == "ok" for row in x["rows"]) and len(x["rows"]) == len(doc["results"])
    # bit for bit: most of them (hlo aims at XLA CPU's bits; a few results are 1 ulp away)
    assert x["identical"] == sum(row["identical"] for row in x["rows"]) >= len(x["rows"]) - 4
    for k in ("xla_parse_s", "xla_compile_s", "xla_run_s", "xla_startup_s", "xla_total_s", "hlo_execute_s"):
        assert x["timings"][k] >= 0
    assert doc["timings"]["xla_compile_s"] == x["timings"]["xla_compile_s"]


@live
def test_a_legitimate_difference_exits_1(hlo, tmp_path):
    """rng's values are implementation-defined (XLA's operation semantics): hlo's generator is not XLA's."""
    pytest.importorskip("jax")
    (tmp_path / "rng.hlo").write_text(RNG)
    r = hlo("run", tmp_path / "rng.hlo", "--reference", "xla", "--format", "json")
    doc = _json(r)
    assert r.exit_code == 1 and doc["status"] == "mismatch" and doc["exit_code"] == 1
    assert doc["reference"]["status"] == "mismatch" and doc["reference"]["rows"][0]["mismatched"] > 0


@live
def test_xla_refusing_an_optimized_text(hlo):
    pytest.importorskip("jax")
    r = hlo("run", SAMPLES / "jax" / "rng.opt.hlo", "--inputs", SAMPLES / "jax" / "rng.inputs.npz",
            "--reference", "xla", "--format", "json")
    doc = _json(r)
    assert doc["status"] == "reference-error" and doc["exit_code"] == 6 and doc["results"]
    assert doc["reference"]["kind"] == "refused" and doc["reference"]["stage"] == "compile"
    assert "XLA could not compile this module: INTERNAL: Unexpected bitcast" in doc["reference"]["message"]
    assert "after XLA's optimizations" in doc["reference"]["message"]
    assert doc["reference"]["before_optimizations"] == str(SAMPLES / "jax" / "rng.hlo")
    assert f"hlo run {SAMPLES / 'jax' / 'rng.hlo'} --reference xla" in doc["reference"]["message"]


@live
def test_xla_crashing_does_not_take_hlo_down(hlo):
    """XLA aborts on a failed internal check (here: an optimized text without layouts on scalars):
    the child process dies, hlo reports XLA's reason."""
    pytest.importorskip("jax")
    r = hlo("run", SAMPLES / "jax" / "fori_loop.opt.hlo", "--inputs", SAMPLES / "jax" / "fori_loop.inputs.npz",
            "--reference", "xla", "--format", "json")
    doc = _json(r)
    assert r.exit_code == 6 and doc["reference"]["kind"] == "crashed"
    assert "XLA crashed on this module (killed by SIGABRT): Check failed:" in doc["reference"]["message"]


@live
def test_xla_refusing_the_text_it_parses(hlo, tmp_path):
    """Text XLA's parser refuses (an attribute it does not know) where hlo's checker passes it."""
    pytest.importorskip("jax")
    f = tmp_path / "m.hlo"
    f.write_text("HloModule m\n\nENTRY e {\n  x = f32[4] parameter(0)\n  ROOT y = f32[4] collective-broadcast(x), "
                 "replica_groups={{0}}\n}\n")
    r = hlo("run", f, "--random-inputs", "--reference", "xla", "--format", "json")
    doc = _json(r)
    if doc["status"] == "ok":
        pytest.skip("this XLA takes the module")
    assert r.exit_code == 6 and doc["reference"]["status"] == "error" and doc["reference"]["message"].startswith("XLA ")


# -- several devices: the child gets --xla_force_host_platform_device_count

@live
@pytest.mark.parametrize("name", ["dp_matmul_1d", "shmap_ppermute_2x4"])
def test_module_before_partitioning_on_8_devices(hlo, name):
    """XLA's SPMD partitioner (Shardy's) cuts the module over 8 devices; global arrays compared."""
    pytest.importorskip("jax")
    base = SAMPLES / "spmd" / name
    r = hlo("run", f"{base}.hlo", "--inputs", f"{base}.inputs.npz", "--reference", "xla", "--format", "json")
    assert r.exit_code == 0, r.stdout
    x = _json(r)["reference"]
    assert x["status"] == "ok" and x["devices"] == 8 and x["mode"] == "global"


@live
def test_replica_program_on_8_devices(hlo):
    pytest.importorskip("jax")
    base = SAMPLES / "spmd" / "replicas_8"
    r = hlo("run", f"{base}.hlo", "--inputs", f"{base}.inputs.npz", "--reference", "xla", "--format", "json")
    assert r.exit_code == 0, r.stdout
    x = _json(r)["reference"]
    assert x["status"] == "ok" and x["devices"] == 8 and x["mode"] == "per_device"


@live
def test_per_device_program_marked_manual_for_xla(hlo):
    """partition-id in a hand-written per-device program: XLA's partitioner refuses it unmarked; marked
    sharding={manual} it runs as written, and a note says so."""
    pytest.importorskip("jax")
    r = hlo("run", SAMPLES / "spmd" / "handwritten" / "divergent_branches.hlo", "--random-inputs",
            "--reference", "xla", "--no-progress")
    assert r.exit_code == 0, r.stderr
    assert "4 devices" in r.stdout and "results match XLA" in r.stdout
    assert "marked sharding={manual}" in r.stderr


@live
def test_elided_constants_filled_as_xla_fills_them(hlo, tmp_path):
    """XLA CPU (through JAX) reads a constant printed as {...} as zeros: hlo's zeros agree, its random
    values cannot (a note says so before the run)."""
    pytest.importorskip("jax")
    f = tmp_path / "el.hlo"
    f.write_text("HloModule el\n\nENTRY main {\n  x = f32[4] parameter(0)\n  c = f32[4] constant({...})\n"
                 "  ROOT a = f32[4] add(x, c)\n}\n")
    r = hlo("run", f, "--random-inputs", "--allow-elided-constants", "zeros", "--reference", "xla", "--no-progress")
    assert r.exit_code == 0 and "results match XLA (jax " in r.stdout       # (the text report)
    assert "comparison with XLA (jax " in r.stdout and "bit for bit the same as XLA's: 1 of 1 result" in r.stdout
    assert "XLA: compile" in r.stdout and "hlo: run" in r.stdout
    r = hlo("run", f, "--random-inputs", "--allow-elided-constants", "random", "--reference", "xla", "--no-progress")
    assert r.exit_code == 1 and "XLA fills elided constants" in r.stderr
    assert "1 result differs from XLA" in r.stderr and "mismatch" in r.stdout


@live
def test_spellings_only_hlo_reads_go_to_xla_as_hlo_prints_them(hlo, tmp_path):
    """The short layout `<1,0>` and `t#0` are hlo's, not XLA's parser's: XLA gets `hlo fmt`'s text (a note)."""
    pytest.importorskip("jax")
    f = tmp_path / "short.hlo"
    f.write_text("HloModule short\n\nENTRY main {\n  p = f16[10,2]<1,0> parameter(0)\n"
                 "  t = (f16[10,2], f16[10,2]) tuple(p, p)\n  a = f16[10,2] add(t#0, t#1)\n"
                 "  ROOT r = f16[10,2] multiply(a, p)\n}\n")
    r = hlo("run", f, "--random-inputs", "--reference", "xla", "--format", "json")
    x = json.loads(r.stdout)["reference"]
    assert r.exit_code == 0 and x["status"] == "ok" and x["identical"] == 1
    assert "XLA could not parse the text as written" in x["notes"][0] and "4:16: error" in x["notes"][0]
