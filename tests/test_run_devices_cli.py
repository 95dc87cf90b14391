"""`hlo run` on several devices: --replicas/--partitions, global and --per-device inputs, --output
stacked or --output-global, --device, the summary's device groups, --format json, --dump-dir,
--check-finite, --expect, and runtime errors of mismatched collectives.

Every command runs through click's CliRunner (the `hlo` fixture: no traceback anywhere) and is
checked for its exit code (0 ok, 1 the module failed, 2 usage or unreadable input), values, and a
fragment of its message.  The modules are small and written here; samples/spmd/ (JAX's programs
and XLA CPU's per-device results) are run once each at the end.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from run_harness import hlo  # noqa: F401  (the fixture)

ROOT = Path(__file__).resolve().parent.parent
SPMD = ROOT / "samples" / "spmd"

# a sharded parameter (rows split over 2 partitions), a replicated one, and partition-id:
# device d's result is its tile + b + d
TILED = """HloModule tiled, num_partitions=2

ENTRY e {
  a = f32[2,3] parameter(0), sharding={devices=[2,1]<=[2]}
  b = f32[2,3] parameter(1), sharding={replicated}
  pid = u32[] partition-id()
  c = f32[] convert(pid)
  cb = f32[2,3] broadcast(c), dimensions={}
  s = f32[2,3] add(a, b)
  ROOT r = f32[2,3] add(s, cb), sharding={devices=[2,1]<=[2]}
}
"""

# all-reduce within the pairs {0,1} and {2,3}, and log(a) (NaN where a < 0), over 4 partitions
ALL_REDUCE = """HloModule pairs, num_partitions=4

add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}

ENTRY e {
  a = f32[2] parameter(0), sharding={devices=[4]<=[4]}
  l = f32[2] log(a)
  ar = f32[2] all-reduce(a), channel_id=1, replica_groups={{0,1},{2,3}}, use_global_device_ids=true, to_apply=add
  ROOT t = (f32[2], f32[2]) tuple(ar, l)
}
"""

# no device count in the header: a cross-replica sum needs --replicas
REPLICA_SUM = """HloModule rsum

add {
  x = s32[] parameter(0)
  y = s32[] parameter(1)
  ROOT s = s32[] add(x, y)
}

ENTRY e {
  a = s32[3] parameter(0)
  ROOT ar = s32[3] all-reduce(a), replica_groups={}, to_apply=add
}
"""

# the same program before partitioning (global values) and after (per-device values)
GLOBAL_SCALE = """HloModule g

ENTRY e {
  a = f32[4,3] parameter(0), sharding={devices=[2,1]<=[2]}
  two = f32[] constant(2)
  t = f32[4,3] broadcast(two), dimensions={}
  ROOT r = f32[4,3] multiply(a, t), sharding={devices=[2,1]<=[2]}
}
"""
# the same program after partitioning (XLA marks its partitioned output scheduled)
LOCAL_SCALE = GLOBAL_SCALE.replace("HloModule g", "HloModule l, is_scheduled=true, num_partitions=2").replace("[4,3]",
                                                                                                               "[2,3]")

A = np.arange(12, dtype=np.float32).reshape(4, 3)
B = np.full((2, 3), 0.5, np.float32)


@pytest.fixture()
def files(tmp_path):
    """The modules and inputs above, written to tmp_path."""
    for name, text in (("tiled", TILED), ("pairs", ALL_REDUCE), ("rsum", REPLICA_SUM), ("g", GLOBAL_SCALE),
                       ("l", LOCAL_SCALE)):
        (tmp_path / f"{name}.hlo").write_text(text)
    np.save(tmp_path / "a.npy", A)
    np.save(tmp_path / "b.npy", B)
    np.save(tmp_path / "g4.npy", np.array([1, 2, 3, 4, -5, 6, 7, 8], np.float32))
    return tmp_path


def _tiled_expected():
    return np.stack([A[:2] + B + 0, A[2:] + B + 1])


def _json(result) -> dict:
    return json.loads(result.stdout)


# ----------------------------------------------------------------------------- inputs and --output

def test_a_global_input_is_split_and_output_stacks_the_devices(hlo, files):
    r = hlo("run", "tiled.hlo", "-i", "a.npy", "-i", "b.npy", "-o", "out.npz")
    assert r.exit_code == 0, r.output
    out = np.load("out.npz")
    assert list(out) == ["out0"]
    np.testing.assert_array_equal(out["out0"], _tiled_expected())
    assert "results of tiled on 2 devices (1 replica x 2 partitions)" in r.stdout
    assert "device 0" in r.stdout and "device 1" in r.stdout


def test_output_global_reassembles_by_the_roots_sharding(hlo, files):
    r = hlo("run", "tiled.hlo", "-i", "a.npy", "-i", "b.npy", "-o", "out.npz", "--output-global")
    assert r.exit_code == 0, r.output
    np.testing.assert_array_equal(np.load("out.npz")["out0"], _tiled_expected().reshape(4, 3))


def test_output_sharding_says_how_to_reassemble(hlo, files):
    # read as replicated, the global result is device 0's value
    r = hlo("run", "tiled.hlo", "-i", "a.npy", "-i", "b.npy", "-o", "out.npz", "--output-global",
            "--output-sharding", "{replicated}")
    assert r.exit_code == 0, r.output
    np.testing.assert_array_equal(np.load("out.npz")["out0"], _tiled_expected()[0])
    r = hlo("run", "pairs.hlo", "-i", "g4.npy", "-o", "p.npz", "--output-global", "--output-sharding",
            "{{devices=[4]<=[4]}, {devices=[4]<=[4]}}")
    assert r.exit_code == 0, r.output
    out = np.load("p.npz")
    np.testing.assert_array_equal(out["out0"], [4, 6, 4, 6, 2, 14, 2, 14])
    np.testing.assert_array_equal(out["out1"][2:4], np.log(np.float32([3, 4])))


@pytest.mark.parametrize("args, fragment", [
    (["--output-global"], "--output-global: the ROOT of the entry computation has no sharding"),
    (["--output-global", "--output-sharding", "{devices=[2}"], "not an HLO sharding (a syntax error at column 12)"),
    (["--output-global", "--output-sharding", "bogus"], "--output-sharding 'bogus': not an HLO sharding"),
    (["--output-global", "--output-sharding", "{" * 300], "{{{{...': not an HLO sharding (a syntax error at column 300)"),
    (["--output-global", "--output-sharding", '#sdy.sharding<@m, [{"x"}]>'], "names mesh @m, which the module does "
                                                                            "not define"),
    (["--output-global", "--output-sharding", "{devices=[3]<=[3]}"], "it names 3 devices but the run has 4 partitions"),
    (["--output-sharding", "{replicated}"], "--output-sharding needs --output-global"),
    (["--device", "4"], "--device 4: the run has devices 0-3"),
    (["--partitions", "0"], "0 is not in the range x>=1"),
    (["--replicas", "-1"], "-1 is not in the range x>=1"),
])
def test_device_options_refuse_what_cannot_be(hlo, files, args, fragment):
    r = hlo("run", "pairs.hlo", "-i", "g4.npy", "-o", "p.npz", *args)
    assert r.exit_code == 2, r.output
    assert fragment in r.stderr
    assert not Path("p.npz").exists()


def test_a_per_device_shaped_input_of_a_split_parameter_is_refused(hlo, files):
    np.save("local.npy", A[:2])
    r = hlo("run", "tiled.hlo", "-i", "local.npy", "-i", "b.npy")
    assert r.exit_code == 2
    assert ("parameter 0 'a' (from local.npy): sharding={devices=[2,1]<=[2]} splits it across devices: expected "
            "the global array, f32[3..4,3] (each device's tile f32[2,3]), or with --per-device one value per "
            "device, f32[2,2,3]; got f32[2,3] (that is the per-device shape") in r.stderr


def test_per_device_inputs_are_stacked_values(hlo, files):
    np.save("pa.npy", np.stack([A[2:], A[:2]]))                 # swapped tiles
    np.save("pb.npy", np.stack([B, B + 1]))
    r = hlo("run", "tiled.hlo", "--per-device", "-i", "pa.npy", "-i", "pb.npy", "-o", "out.npz")
    assert r.exit_code == 0, r.output
    np.testing.assert_array_equal(np.load("out.npz")["out0"], [A[2:] + B, A[:2] + B + 2])
    r = hlo("run", "tiled.hlo", "--per-device", "-i", "a.npy", "-i", "pb.npy")
    assert r.exit_code == 2
    assert "--per-device expects one value per device stacked on a leading axis: f32[2,2,3]" in r.stderr


def test_per_device_and_random_inputs_do_not_mix(hlo, files):
    r = hlo("run", "tiled.hlo", "--per-device", "--random-inputs")
    assert r.exit_code == 2
    assert "--random-inputs draws global values" in r.stderr


def test_replicas_override_the_header(hlo, files):
    np.save("ra.npy", np.array([[1, 2, 3], [10, 20, 30], [100, 200, 300]], np.int32))
    r = hlo("run", "rsum.hlo", "--replicas", "3", "-i", "ra.npy", "-o", "out.npz")
    assert r.exit_code == 0, r.output
    assert "note: parameter 0 'a': s32[3,3] taken as one value per device (3 devices x s32[3]" in r.stderr
    assert "on 3 devices (3 replicas x 1 partition)" in r.stdout
    assert "devices 0-2" in r.stdout                            # they agree: one row
    np.testing.assert_array_equal(np.load("out.npz")["out0"], [[111, 222, 333]] * 3)


def test_random_inputs_are_global_values_split_as_the_unpartitioned_program_sees_them(hlo, files):
    r1 = hlo("run", "g.hlo", "--random-inputs", "--seed", "7", "-o", "g.npz")
    r2 = hlo("run", "l.hlo", "--random-inputs", "--seed", "7", "-o", "l.npz", "--output-global")
    assert r1.exit_code == 0 and r2.exit_code == 0, r1.output + r2.output
    np.testing.assert_array_equal(np.load("g.npz")["out0"], np.load("l.npz")["out0"])


def test_replicated_random_inputs_agree_across_devices(hlo, files):
    r = hlo("run", "rsum.hlo", "--replicas", "4", "--random-inputs", "-o", "out.npz")
    assert r.exit_code == 0, r.output
    out = np.load("out.npz")["out0"]
    assert out.shape == (4, 3) and (out == out[0]).all()
    assert "devices 0-3" in r.stdout


# ----------------------------------------------------------------------------- summary, --device, JSON

def test_the_summary_collapses_devices_that_agree(hlo, files):
    r = hlo("run", "pairs.hlo", "-i", "g4.npy", "--print")
    assert r.exit_code == 0, r.output
    rows = [ln for ln in r.stdout.splitlines() if ln.lstrip().startswith("out")]
    assert [ln.split("│")[1].strip() for ln in rows[:6]] == ["devices 0,1", "devices 2,3", "device 0", "device 1",
                                                              "device 2", "device 3"]
    assert "out0 (devices 0,1) = f32[2] {4, 6}" in r.stdout
    assert "out0 (devices 2,3) = f32[2] {2, 14}" in r.stdout


def test_device_shows_one_device(hlo, files):
    r = hlo("run", "pairs.hlo", "-i", "g4.npy", "--device", "2", "--print")
    assert r.exit_code == 0, r.output
    assert "out0 (device 2) = f32[2] {2, 14}" in r.stdout
    assert "out1 (device 2) = f32[2] {-nan, 1.79175949}" in r.stdout
    assert "device 0" not in r.stdout and "device 3" not in r.stdout
    doc = _json(hlo("run", "pairs.hlo", "-i", "g4.npy", "--device", "3", "--format", "json"))
    assert [(x["key"], x["device"], x["min"], x["max"]) for x in doc["results"]] == [
        ("out0", 3, 2.0, 14.0), ("out1", 3, pytest.approx(np.log(7)), pytest.approx(np.log(8)))]


def test_json_gives_the_grid_and_per_device_results(hlo, files):
    r = hlo("run", "pairs.hlo", "-i", "g4.npy", "--format", "json", "--print")
    assert r.exit_code == 0, r.output
    doc = _json(r)
    assert doc["status"] == "ok" and doc["devices"] == {"replicas": 1, "partitions": 4}
    out0, out1 = doc["results"]
    assert out0["key"] == "out0" and out0["hlo_shape"] == "f32[2]"
    assert [(g["devices"], g["min"], g["max"], g["literal"]) for g in out0["devices"]] == [
        ([0, 1], 4.0, 6.0, "f32[2] {4, 6}"), ([2, 3], 2.0, 14.0, "f32[2] {2, 14}")]
    assert [g["devices"] for g in out1["devices"]] == [[0], [1], [2], [3]]
    assert out1["devices"][2]["nan"] == 1


def test_a_single_device_run_is_unchanged(hlo, files):
    (files / "one.hlo").write_text("HloModule one\n\nENTRY e {\n  a = f32[2,3] parameter(0)\n"
                                   "  ROOT n = f32[2,3] negate(a)\n}\n")
    doc = _json(hlo("run", "one.hlo", "-i", "b.npy", "--format", "json"))
    assert "devices" not in doc
    assert doc["results"][0]["min"] == -0.5 and "devices" not in doc["results"][0]


# ----------------------------------------------------------------------------- --expect

def test_expect_compares_the_stacked_results(hlo, files):
    np.savez("ref.npz", out0=_tiled_expected())
    r = hlo("run", "tiled.hlo", "-i", "a.npy", "-i", "b.npy", "--expect", "ref.npz")
    assert r.exit_code == 0, r.output
    assert "results match the reference" in r.stdout
    bad = _tiled_expected()
    bad[1, 1, 2] += 1
    np.savez("bad.npz", out0=bad)
    r = hlo("run", "tiled.hlo", "-i", "a.npy", "-i", "b.npy", "--expect", "bad.npz", "--rtol", "0", "--atol", "0")
    assert r.exit_code == 1
    assert "[1, 1, 2]: 12.5 vs 13.5" in r.stdout
    np.savez("global.npz", out0=_tiled_expected().reshape(4, 3))
    r = hlo("run", "tiled.hlo", "-i", "a.npy", "-i", "b.npy", "--expect", "global.npz", "--output-global")
    assert r.exit_code == 0, r.output
    r = hlo("run", "tiled.hlo", "-i", "a.npy", "-i", "b.npy", "--expect", "global.npz")
    assert r.exit_code == 1 and "shape [2, 2, 3] vs the reference's [4, 3]" in r.stdout


def test_an_unreadable_reference_is_refused_before_the_run(hlo, files):
    r = hlo("run", "tiled.hlo", "-i", "a.npy", "-i", "b.npy", "--expect", "missing.npz")
    assert r.exit_code == 2 and "--expect missing.npz: no such file: missing.npz" in r.stderr


# ----------------------------------------------------------------------------- dumps and --check-finite

def test_dump_dir_writes_each_devices_values(hlo, files):
    r = hlo("run", "pairs.hlo", "-i", "g4.npy", "--dump-dir", "d")
    assert r.exit_code == 0, r.output
    man = json.loads(Path("d/manifest.json").read_text())
    assert man["devices"] == {"replicas": 1, "partitions": 4}
    ar = next(e for e in man["instructions"] if e["instruction"] == "ar")
    assert ar["devices"] == [0, 1, 2, 3]
    assert [p["files"] for p in ar["per_device"]] == [[f"{ar['order']:06d}_e.ar.dev{d}.npy"] for d in range(4)]
    for p, want in zip(ar["per_device"], [[4, 6], [4, 6], [2, 14], [2, 14]]):
        np.testing.assert_array_equal(np.load(Path("d") / p["files"][0]), want)
        assert p["stats"][0]["max"] == max(want)
    t = next(e for e in man["instructions"] if e["instruction"] == "t")
    assert t["per_device"][3]["files"] == [f"{t['order']:06d}_e.t.dev3.leaf0.npy", f"{t['order']:06d}_e.t.dev3.leaf1.npy"]
    # a second dump replaces the first one's files, device files included
    first = set(p.name for p in Path("d").glob("*.npy"))
    r = hlo("run", "pairs.hlo", "-i", "g4.npy", "--dump-dir", "d", "--dump-filter", "^ar$")
    assert r.exit_code == 0, r.output
    now = set(p.name for p in Path("d").glob("*.npy"))
    assert len(first) == 20 and len(now) == 4    # a, ar, l: 4 devices each; t: 2 leaves x 4


def test_a_value_every_device_holds_is_dumped_once(hlo, files):
    r = hlo("run", "tiled.hlo", "-i", "a.npy", "-i", "b.npy", "--dump-dir", "d")
    assert r.exit_code == 0, r.output
    man = json.loads(Path("d/manifest.json").read_text())
    b = next(e for e in man["instructions"] if e["instruction"] == "b")
    assert b["devices"] == "uniform" and b["files"] == [f"{b['order']:06d}_e.b.npy"]
    np.testing.assert_array_equal(np.load(Path("d") / b["files"][0]), B)


def test_check_finite_names_the_device(hlo, files):
    r = hlo("run", "pairs.hlo", "-i", "g4.npy", "--check-finite")
    assert r.exit_code == 1
    assert "pairs.hlo:11:3: error: l: log produced a non-finite value (1 NaN, first at [0] = nan) from finite " \
           "operands on device 2 (execution 1 of it" in r.stderr
    assert "operand a: float32[2] min=-5 max=6" in r.stderr
    doc = _json(hlo("run", "pairs.hlo", "-i", "g4.npy", "--check-finite", "--format", "json"))
    assert doc["status"] == "non-finite"
    assert doc["non_finite"]["devices"] == [2] and doc["non_finite"]["instruction"] == "l"


def test_check_finite_on_several_devices_and_from_a_bad_operand(hlo, files):
    np.save("neg.npy", np.array([-1, 2, -3, 4, 5, 6, 7, -8], np.float32))
    r = hlo("run", "pairs.hlo", "-i", "neg.npy", "--check-finite")
    assert r.exit_code == 1
    assert "on devices 0,1,3 (values of device 0)" in r.stderr


# ----------------------------------------------------------------------------- runtime errors

MISMATCH = """HloModule mismatch, num_partitions=2

add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}

reduce_branch {
  rx = f32[2] parameter(0)
  ROOT summed = f32[2] all-reduce(rx), channel_id=1, replica_groups={{0,1}}, use_global_device_ids=true, to_apply=add
}

keep_branch {
  kx = f32[2] parameter(0)
  ROOT kept = f32[2] negate(kx)
}

ENTRY main {
  x = f32[2] parameter(0)
  p = u32[] partition-id()
  zero = u32[] constant(0)
  first = pred[] compare(p, zero), direction=EQ
  ROOT r = f32[2] conditional(first, x, x), true_computation=reduce_branch, false_computation=keep_branch
}
"""


def test_a_collective_only_some_devices_reach_is_a_located_error(hlo, files):
    Path("mm.hlo").write_text(MISMATCH)
    r = hlo("run", "mm.hlo", "--random-inputs")
    assert r.exit_code == 1
    assert r.stderr.startswith("mm.hlo:11:8: error: summed: all-reduce")
    assert "device 1" in r.stderr or "devices 1" in r.stderr
    doc = _json(hlo("run", "mm.hlo", "--random-inputs", "--format", "json"))
    assert doc["status"] == "error" and doc["exit_code"] == 1
    assert doc["devices"] == {"replicas": 1, "partitions": 2}
    assert doc["diagnostics"][0]["line"] == 11 and doc["diagnostics"][0]["instruction"] == "summed"


# ----------------------------------------------------------------------------- JAX's programs

def _spmd_samples():
    return sorted(p for p in SPMD.glob("*.opt.hlo") if (SPMD / p.name.replace(".opt.hlo", ".json")).exists())


@pytest.mark.parametrize("path", _spmd_samples(), ids=lambda p: p.name.replace(".opt.hlo", ""))
def test_jax_programs_match_xla_per_device_through_the_cli(hlo, path):
    """hlo run NAME.opt.hlo --inputs NAME.inputs.npz -o out.npz gives XLA CPU's per-device results
    (dev_out*); for a single result, --output-global with JAX's output sharding gives the global one."""
    name = path.name.replace(".opt.hlo", "")
    meta = json.loads((SPMD / f"{name}.json").read_text())
    expected = np.load(SPMD / f"{name}.expected.npz")
    r = hlo("run", path, "--inputs", SPMD / f"{name}.inputs.npz", "-o", "out.npz")
    assert r.exit_code == 0, r.output
    out = np.load("out.npz")
    dev_keys = sorted((k for k in expected if k.startswith("dev_out")), key=lambda k: int(k[7:]))
    assert len(out) == len(dev_keys)
    for k, key in enumerate(dev_keys):
        want, got = expected[key], out[f"out{k}"]
        assert got.shape == want.shape
        if want.dtype.kind in "fc":
            np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
        else:
            np.testing.assert_array_equal(got, want)
    if len(meta.get("out_shardings", [])) == 1 and "out0" in expected and len(dev_keys) == 1:
        np.savez("global.npz", out0=expected["out0"])
        r = hlo("run", path, "--inputs", SPMD / f"{name}.inputs.npz", "--output-global", "--output-sharding",
                meta["out_shardings"][0], "--expect", "global.npz", "--rtol", "2e-5", "--atol", "2e-6")
        assert r.exit_code == 0, r.output


def test_a_program_before_partitioning_writes_global_results(hlo):
    """A shard_map program as JAX lowers it (global values, Shardy's custom calls): its results are
    global arrays (no device axis), shown as such, and equal to XLA's global results."""
    name = "shmap_psum_pmax_pmin_1d"
    expected = np.load(SPMD / f"{name}.expected.npz")
    r = hlo("run", SPMD / f"{name}.hlo", "--inputs", SPMD / f"{name}.inputs.npz", "-o", "out.npz", "--output-global")
    assert r.exit_code == 0, r.output
    out = np.load("out.npz")
    keys = [k for k in expected if k.startswith("out")]
    assert sorted(out) == sorted(keys)
    for k in keys:
        np.testing.assert_allclose(out[k], expected[k], rtol=2e-5, atol=2e-6)
    assert "│ global" in r.stdout
    doc = _json(hlo("run", SPMD / f"{name}.hlo", "--inputs", SPMD / f"{name}.inputs.npz", "--format", "json"))
    assert doc["devices"] == {"replicas": 1, "partitions": 8}
    assert all("devices" not in x and x["shape"] == list(expected[x["key"]].shape) for x in doc["results"])


def test_dump_summary_on_devices_writes_statistics_per_device(hlo, files):
    r = hlo("run", "pairs.hlo", "-i", "g4.npy", "--dump-dir", "d", "--dump-summary")
    assert r.exit_code == 0, r.output
    assert not list(Path("d").glob("*.npy"))
    man = json.loads(Path("d/manifest.json").read_text())
    ar = next(e for e in man["instructions"] if e["instruction"] == "ar")
    assert [(p["device"], p["stats"][0]["min"]) for p in ar["per_device"]] == [(0, 4.0), (1, 4.0), (2, 2.0), (3, 2.0)]
    assert "files" not in ar and all("files" not in p for p in ar["per_device"])


@pytest.mark.parametrize("inputs", [["--random-inputs"], ["-i", "b.npy"]])
def test_a_sharding_that_does_not_fit_its_parameter_is_located_under_no_check(hlo, files, inputs):
    Path("bad.hlo").write_text("HloModule bad, is_scheduled=true, num_partitions=2\n\nENTRY e {\n"
                               "  a = f32[2,3] parameter(0), sharding={devices=[2]<=[2]}\n"
                               "  ROOT r = f32[2,3] negate(a)\n}\n")
    r = hlo("run", "bad.hlo", "--no-check", *inputs)
    assert r.exit_code == 1
    assert r.stderr.startswith("bad.hlo:4:3: error: parameter 0 'a': sharding {devices=[2]<=[2]} cuts 1 dimension "
                               "but the array has 2")


def _global_input_samples():
    out = []
    for p in _spmd_samples():
        meta = json.loads((SPMD / p.name.replace(".opt.hlo", ".json")).read_text())
        if not meta.get("per_device_inputs") and (SPMD / p.name.replace(".opt.hlo", ".hlo")).exists():
            out.append(p)
    return out


@pytest.mark.parametrize("path", _global_input_samples(), ids=lambda p: p.name.replace(".opt.hlo", ""))
def test_random_inputs_give_the_partitioned_and_the_unpartitioned_program_the_same_global_values(hlo, path):
    """--random-inputs draws global values: the program before partitioning (NAME.hlo) and after
    (NAME.opt.hlo, its results reassembled by JAX's output shardings) compute the same results, up
    to the order of float sums across devices."""
    name = path.name.replace(".opt.hlo", "")
    shardings = json.loads((SPMD / f"{name}.json").read_text())["out_shardings"]
    sharding = shardings[0] if len(shardings) == 1 else "{" + ", ".join(shardings) + "}"
    r = hlo("run", SPMD / f"{name}.hlo", "--random-inputs", "--seed", "1", "-o", "u.npz")
    assert r.exit_code == 0, r.output
    r = hlo("run", path, "--random-inputs", "--seed", "1", "-o", "p.npz", "--output-global", "--output-sharding",
            sharding)
    assert r.exit_code == 0, r.output
    u, p = np.load("u.npz"), np.load("p.npz")
    assert sorted(u) == sorted(p)
    for k in u:
        np.testing.assert_allclose(p[k].astype(np.float64), u[k].astype(np.float64), rtol=1e-4, atol=2e-5, err_msg=k)


DIVERGENT = """HloModule div, num_partitions=2

cond {
  p = s32[] parameter(0)
  pid = u32[] partition-id()
  lim = s32[] convert(pid)
  one = s32[] constant(1)
  top = s32[] add(lim, one)
  ROOT lt = pred[] compare(p, top), direction=LT
}

body {
  q = s32[] parameter(0)
  c1 = s32[] constant(1)
  ROOT n = s32[] add(q, c1)
}

ENTRY e {
  z = s32[] constant(0)
  ROOT w = s32[] while(z), condition=cond, body=body
}
"""


def test_a_loop_whose_trip_count_differs_per_device_runs_and_dumps(hlo, tmp_path):
    Path("div.hlo").write_text(DIVERGENT)
    r = hlo("run", "div.hlo", "-o", "out.npz", "--dump-dir", "d", "--dump-filter", "^(n|w)$")
    assert r.exit_code == 0, r.output
    np.testing.assert_array_equal(np.load("out.npz")["out0"], [1, 2])      # device d loops d + 1 times
    man = json.loads(Path("d/manifest.json").read_text())
    w = next(e for e in man["instructions"] if e["instruction"] == "w")
    assert w["devices"] == [0, 1] and [p["stats"][0]["max"] for p in w["per_device"]] == [1, 2]
    assert [e["execution"] for e in man["instructions"] if e["instruction"] == "n"] == [1, 2]


@pytest.mark.parametrize("sharding, fragment", [
    ("{devices=[3,1]<=[3]}", "names 3 devices but the run has 8 partitions"),
    ("{devices=[2,2,2]<=[8]}", "cuts 3 dimensions but the array has 2"),
])
def test_output_sharding_that_cannot_fit_is_refused_before_running(sharding, fragment, tmp_path):
    """A --output-sharding that does not fit the ROOT or the run's devices is a usage error (exit 2)
    said before anything runs, not after the whole run."""
    from click.testing import CliRunner

    from hlo_cli.cli import main
    path = Path(__file__).resolve().parents[1] / "samples" / "spmd" / "dp_matmul_1d.opt.hlo"
    r = CliRunner().invoke(main, ["run", str(path), "--random-inputs", "--output-global", "--output-sharding", sharding,
                                  "--format", "json", "--no-progress"])
    assert r.exit_code == 2, r.output
    assert fragment in r.output and "Traceback" not in r.output
    assert '"timings"' not in r.stdout or '"execute_s"' not in r.stdout     # nothing ran
