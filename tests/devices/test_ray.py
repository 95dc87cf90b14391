"""The Ray device backend (devices/ray_backend.py) on simulated clusters of this machine.

The law: a run whose devices are spread over the actors of a 2- or 3-node Ray cluster gives, on
every device, the same bits as the local backend, for every multi-device sample (samples/spmd,
before and after partitioning, and PyTorch/XLA's).  Then what a cluster adds: inputs each actor
reads for its own devices (memory-mapped), placement by the memory of the nodes (a program no node
holds alone runs across them; one the cluster cannot hold is refused, exit code 5), an actor that
dies mid-run (a clear error naming its devices and node, in bounded time, and the next run works),
devices that never meet at a collective (the local backend's error, never a hang), and `hlo run
--cluster ray`.  The clusters live on the loopback address (ray_backend.LOOPBACK_ENV)."""
from __future__ import annotations

import os

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")      # before Ray is imported
os.environ.setdefault("RAY_raylet_start_wait_time_s", "180")          # a loaded CI machine starts nodes slowly

import re
import time
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="the Ray backend's tests need Ray (pip install 'hlo-cli[ray]')")
from ray.cluster_utils import Cluster  # noqa: E402

import hlo_cli  # noqa: E402
from hlo_cli.topology import grid_of
from hlo_cli.devices import run_devices  # noqa: E402
from hlo_cli.topology.grid import DeviceGrid  # noqa: E402
from hlo_cli.devices.inputs import distribute  # noqa: E402
from hlo_cli.pipeline.ray_backend import (HEARTBEAT_S, FileInput, Node, forget_actors,  # noqa: E402
                                         gather_kept, open_array, place, run_on_ray)
from hlo_cli.pipeline.io import row_digest  # noqa: E402
from hlo_cli.devices.values import Stacked, leaves  # noqa: E402
from hlo_cli.errors import ExitCode, HloEvalError, HloMemoryLimitError, HloResourceError  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = sorted(p for d in ("spmd", "torch_xla_spmd") for p in (ROOT / "samples" / d).glob("*.hlo"))
ERRORS = ROOT / "samples" / "spmd" / "handwritten" / "errors"
NODE_MEMORY = 64 << 20          # each simulated node's memory budget (Ray's `memory` resource)


@pytest.fixture(scope="module", params=[2, 3], ids=["2 nodes", "3 nodes"])
def cluster(request):
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "memory": NODE_MEMORY})
    for _ in range(request.param - 1):
        c.add_node(num_cpus=1, memory=NODE_MEMORY)
    c.wait_for_nodes()
    ray.init(address=c.address, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    yield c
    forget_actors(ray)
    ray.shutdown()
    c.shutdown()


def _inputs(path: Path) -> list:
    stem = path.name.split(".")[0]
    with np.load(path.parent / f"{stem}.inputs.npz") as z:
        return [z[f"arg{i}"] for i in range(len(z.files))]


def _same(a, b) -> bool:
    la, lb = leaves(a), leaves(b)
    return len(la) == len(lb) and all(np.asarray(x).dtype == np.asarray(y).dtype
                                      and np.asarray(x).shape == np.asarray(y).shape
                                      and np.asarray(x).tobytes() == np.asarray(y).tobytes()
                                      for x, y in zip(la, lb))


@pytest.mark.parametrize("path", SAMPLES, ids=[f"{p.parent.name}/{p.name}" for p in SAMPLES])
def test_ray_gives_the_local_bits(cluster, path):
    module = hlo_cli.parse_file(str(path))
    grid = grid_of(module)
    args = distribute(module, _inputs(path), grid)
    want = run_devices(module, args, grid)
    got, how = run_on_ray(module, args, grid, address=cluster.address)
    assert len(how.placement.groups) == min(len(cluster.list_all_nodes()), grid.count)
    assert sorted(d for g in how.placement.groups for d in g) == list(range(grid.count))
    assert _same(got.per_device(), want.per_device()), f"{path.name}: a device's result differs from the local run"
    # profiled (the timed step loop instead of generated code), the result kept on the actors: the
    # same bits, and the summaries' digests are the local rows'
    kept, how = run_on_ray(module, args, grid, address=cluster.address, profile=True, keep_results=True)
    assert kept.value is None and how.profile["instructions_timed"] > 0
    assert _same(gather_kept(how).stacked(grid.count), want.per_device()), f"{path.name}: profiled/kept differs"
    rows = [np.asarray(x) for x in leaves(want.per_device())]
    for k, row in enumerate(rows):
        digests = [s.digest for kp in how.kept for s in kp.leaves[k]]
        assert digests == [row_digest(r) for r in row], f"{path.name}: out{k}'s summaries"


HANDWRITTEN = sorted((ROOT / "samples" / "spmd" / "handwritten").glob("*.hlo"))


@pytest.mark.parametrize("path", HANDWRITTEN, ids=[p.name for p in HANDWRITTEN])
def test_ray_gives_the_local_bits_handwritten(cluster, path):
    """Every collective form, send/recv, divergent branches and loops: other inputs on every device."""
    from hlo_cli.interpreter.inputs import random_inputs
    module = hlo_cli.parse_file(str(path))
    grid = grid_of(module)
    params = module.entry_computation.parameters
    per = [random_inputs(params, seed) for seed in range(grid.count)]
    args = []
    for k, p in enumerate(params):
        if p.shape.is_tuple or p.shape.element_type == "token":
            args.append(per[0][k])
        else:
            args.append(Stacked(np.stack([np.asarray(v[k]) for v in per])))
    try:
        want = run_devices(module, args, grid)
    except HloEvalError as e:                  # a module the local backend refuses: so must Ray
        with pytest.raises(HloEvalError) as got:
            run_on_ray(module, args, grid, address=cluster.address)
        assert str(got.value).split(":")[0] == str(e).split(":")[0]
        return
    got, _ = run_on_ray(module, args, grid, address=cluster.address)
    assert _same(got.per_device(), want.per_device()), f"{path.name}: a device's result differs from the local run"


def test_inputs_read_by_each_actor(cluster, tmp_path):
    """FileInputs: every actor maps the file and cuts its own devices' tiles; an .npy and a stored
    .npz member are memory-mapped, a compressed member read."""
    path = ROOT / "samples" / "spmd" / "dp_mp_matmul_grad_4x2.opt.hlo"
    module = hlo_cli.parse_file(str(path))
    grid = grid_of(module)
    arrays = _inputs(path)
    np.save(tmp_path / "a0.npy", arrays[0])
    np.savez(tmp_path / "stored.npz", **{f"arg{i}": a for i, a in enumerate(arrays)})
    np.savez_compressed(tmp_path / "packed.npz", **{f"arg{i}": a for i, a in enumerate(arrays)})
    assert isinstance(open_array(FileInput(str(tmp_path / "a0.npy"), None, "a0")), np.memmap)
    assert isinstance(open_array(FileInput(str(tmp_path / "stored.npz"), "arg1", "a1")), np.memmap)
    packed = open_array(FileInput(str(tmp_path / "packed.npz"), "arg1", "a1"))
    assert not isinstance(packed, np.memmap) and np.array_equal(packed, arrays[1])
    want = run_devices(module, distribute(module, arrays, grid), grid)
    sources = [FileInput(str(tmp_path / "a0.npy"), None, "a0")] + \
              [FileInput(str(tmp_path / "stored.npz"), f"arg{i}", f"a{i}") for i in range(1, len(arrays))]
    got, _ = run_on_ray(module, sources, grid, address=cluster.address)
    assert _same(got.per_device(), want.per_device())


# ----------------------------------------------------------------------------- placement

def big(n: int):
    """A per-device program of 8 partitions, each device's tile f32[1, N]."""
    return hlo_cli.parse(f"""HloModule big, num_partitions=8

ENTRY main {{
  x = f32[1,{n}] parameter(0), sharding={{devices=[8,1]<=[8]}}
  e = f32[1,{n}] exponential(x), sharding={{devices=[8,1]<=[8]}}
  ROOT t = f32[1,{n}] tanh(e), sharding={{devices=[8,1]<=[8]}}
}}
""")


def test_placement_follows_node_memory():
    """Unit facts of place(): devices go where memory is; the refusal gives the numbers."""
    module = big(1024)
    from hlo_cli.interpreter.memory import estimate
    per = estimate(module).total - estimate(module).constants
    grid = DeviceGrid(1, 8)
    roomy = [Node("a", "10.0.0.1", 100 * per, 1), Node("b", "10.0.0.2", 100 * per, 1)]
    plan = place(module, grid, roomy)
    assert plan.groups == ((0, 1, 2, 3), (4, 5, 6, 7))
    lopsided = [Node("a", "10.0.0.1", 2 * per + per // 2, 1), Node("b", "10.0.0.2", 100 * per, 1)]
    plan = place(module, grid, lopsided)
    assert plan.groups == ((0, 1), (2, 3, 4, 5, 6, 7)) and [n.id for n in plan.nodes] == ["a", "b"]
    plan = place(module, grid, roomy, actors=3)
    assert [len(g) for g in plan.groups] == [3, 3, 2]
    assert sorted(d for g in plan.groups for d in g) == list(range(8))
    small = [Node("a", "10.0.0.1", 3 * per, 1), Node("b", "10.0.0.2", 3 * per, 1)]
    with pytest.raises(HloMemoryLimitError) as e:
        place(module, grid, small)
    assert e.value.exit_code == ExitCode.MEMORY_LIMIT
    assert "per device" in str(e.value) and "10.0.0.1" in str(e.value) and "10.0.0.2" in str(e.value)


def test_program_larger_than_one_node_runs_across_nodes(cluster):
    """8 devices of 16 MiB each (128 MiB) on nodes of 64 MiB: no node holds them all, the cluster
    does, 4 devices a node at most; at 32 MiB a device no cluster here holds them: refused before
    anything runs (exit code 5), naming each node."""
    from hlo_cli.interpreter.memory import estimate
    module = big(1 << 20)                                       # a device's tile: 4 MiB, 16 MiB in all
    grid = grid_of(module)
    per = estimate(module).total - estimate(module).constants
    assert NODE_MEMORY < per * grid.count <= NODE_MEMORY * 2 and NODE_MEMORY // per == 4
    x = np.linspace(-1, 1, 8 << 20, dtype=np.float32).reshape(8, 1, 1 << 20)
    args = distribute(module, [x], grid, per_device=True)
    got, how = run_on_ray(module, args, grid, address=cluster.address)
    assert len(how.placement.groups) > 1 and max(len(g) for g in how.placement.groups) <= 4
    assert _same(got.per_device(), run_devices(module, args, grid).per_device())
    too_big = big(2 << 20)
    y = np.zeros((8, 1, 2 << 20), np.float32)
    with pytest.raises(HloMemoryLimitError) as e:
        run_on_ray(too_big, distribute(too_big, [y], grid, per_device=True), grid, address=cluster.address)
    assert e.value.exit_code == ExitCode.MEMORY_LIMIT
    assert "per device" in str(e.value) and str(e.value).count("node 127.0.0.1") == len(cluster.list_all_nodes())


# ----------------------------------------------------------------------------- failures

def test_an_actor_that_dies_ends_the_run_clearly(cluster):
    path = ROOT / "samples" / "spmd" / "mlp_train_step_2x4.opt.hlo"
    module = hlo_cli.parse_file(str(path))
    grid = grid_of(module)
    args = distribute(module, _inputs(path), grid)
    victim = next(i for i in module.entry_computation.instructions if i.opcode == "all-reduce")
    t0 = time.monotonic()
    with pytest.raises(HloResourceError) as e:
        run_on_ray(module, args, grid, address=cluster.address, fail_at=f"{victim.name}@5")
    assert time.monotonic() - t0 < 120                       # bounded: never a hang at the collective
    msg = str(e.value)
    assert "was lost" in msg and re.search(r"devices (4-7|5|[\d,]*5[\d,]*|[\d]-[5-7])\b", msg), msg
    assert "node 127.0.0.1" in msg and f"all-reduce {victim.name}" in msg, msg
    assert "Traceback" not in msg
    got, _ = run_on_ray(module, args, grid, address=cluster.address)     # the next run starts afresh
    assert _same(got.per_device(), run_devices(module, args, grid).per_device())


@pytest.mark.parametrize("name", ["mismatch_conditional", "mismatch_different_collectives", "mismatch_while"])
def test_devices_that_never_meet_fail_like_the_local_run(cluster, name):
    module = hlo_cli.parse_file(str(ERRORS / f"{name}.hlo"))
    grid = grid_of(module)
    x = np.stack([(1 + 100 * d + np.arange(2)).astype(np.float32) for d in range(grid.count)])
    with pytest.raises(HloEvalError) as local:
        run_devices(module, [Stacked(x)], grid)
    t0 = time.monotonic()
    with pytest.raises(HloEvalError) as remote:
        run_on_ray(module, [Stacked(x)], grid, address=cluster.address)
    assert time.monotonic() - t0 < 120
    assert str(local.value).split(":")[0] == "summed"
    # the actors stop where each first finds the others missing: the collective named is one of those
    # the devices split over (with 3 actors, the devices of the other branch may be found out first)
    collectives = {i.name for c in module.computations for i in c.instructions
                   if i.opcode in ("all-reduce", "all-gather", "collective-permute", "reduce-scatter", "all-to-all")}
    assert str(remote.value).split(":")[0] in collectives
    assert "did not reach it" in str(remote.value)


# ----------------------------------------------------------------------------- the command

def test_hlo_run_cluster_ray(cluster, tmp_path):
    from click.testing import CliRunner

    from hlo_cli.cli import main
    path = ROOT / "samples" / "spmd" / "mlp_train_step_2x4.opt.hlo"
    inputs = str(ROOT / "samples" / "spmd" / "mlp_train_step_2x4.inputs.npz")
    r = CliRunner().invoke(main, ["run", str(path), "--inputs", inputs, "--output", str(tmp_path / "local.npz")])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["run", str(path), "--inputs", inputs, "--output", str(tmp_path / "ray.npz"),
                                  "--cluster", "ray", "--ray-address", cluster.address, "--format", "json"])
    assert r.exit_code == 0, r.output
    assert '"cluster"' in r.output and '"actors"' in r.output
    with np.load(tmp_path / "local.npz") as a, np.load(tmp_path / "ray.npz") as b:
        assert a.files == b.files and all(a[k].tobytes() == b[k].tobytes() for k in a.files)


@pytest.mark.parametrize("argv, fragment", [
    (["--ray-address", "127.0.0.1:1"], "need --cluster ray"),
    (["--ray-actors", "2"], "need --cluster ray"),
])
def test_cluster_usage_errors(argv, fragment):
    from click.testing import CliRunner

    from hlo_cli.cli import main
    path = ROOT / "samples" / "spmd" / "dp_matmul_1d.opt.hlo"
    r = CliRunner().invoke(main, ["run", str(path), "--random-inputs"] + argv)
    assert r.exit_code == ExitCode.USAGE, r.output
    assert fragment in r.output and "Traceback" not in r.output


def test_without_ray_installed(monkeypatch):
    import sys

    from hlo_cli.pipeline import ray_backend
    from hlo_cli.errors import HloInputError
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(HloInputError) as e:
        ray_backend.require_ray()
    assert "pip install 'hlo-cli[ray]'" in str(e.value) and e.value.exit_code == ExitCode.USAGE


def test_check_finite_on_ray(cluster, tmp_path):
    """--check-finite with --cluster ray stops where the local run stops and says so the same way:
    device 5's inputs overflow exp, the other devices' do not."""
    from click.testing import CliRunner

    from hlo_cli.cli import main
    text = """HloModule nan_on_five, num_partitions=8

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}

ENTRY main {
  x = f32[1,4] parameter(0), sharding={devices=[8,1]<=[8]}
  e = f32[1,4] exponential(x), sharding={devices=[8,1]<=[8]}
  s = f32[1,4] all-reduce(e), channel_id=1, replica_groups={{0,1,2,3,4,5,6,7}}, use_global_device_ids=true, to_apply=add
  ROOT t = f32[1,4] add(s, x), sharding={devices=[8,1]<=[8]}
}
"""
    (tmp_path / "m.hlo").write_text(text)
    x = np.zeros((8, 1, 4), np.float32)
    x[5, 0, 2] = 1000.0
    np.save(tmp_path / "x.npy", x)
    base = ["run", str(tmp_path / "m.hlo"), "--input", str(tmp_path / "x.npy"), "--per-device", "--check-finite",
            "--format", "json"]
    local = CliRunner().invoke(main, base)
    remote = CliRunner().invoke(main, base + ["--cluster", "ray", "--ray-address", cluster.address])
    assert local.exit_code == remote.exit_code == 1, remote.output
    import json
    a, b = json.loads(local.stdout), json.loads(remote.stdout)
    assert a["status"] == b["status"] == "non-finite"
    for k in ("instruction", "device", "devices", "first_index", "location"):
        assert a["non_finite"][k] == b["non_finite"][k], k
    assert b["non_finite"]["instruction"] == "e" and b["non_finite"]["device"] == 5


def test_dump_dir_on_ray(cluster, tmp_path):
    """--dump-dir with --cluster ray: every actor writes its devices' values, one manifest lists them
    all: the local run's values, on their devices, with the same statistics."""
    import json

    from click.testing import CliRunner

    from hlo_cli.cli import main
    path = ROOT / "samples" / "spmd" / "mlp_train_step_2x4.opt.hlo"
    inputs = str(ROOT / "samples" / "spmd" / "mlp_train_step_2x4.inputs.npz")
    for name, extra in (("local", []), ("ray", ["--cluster", "ray", "--ray-address", cluster.address])):
        r = CliRunner().invoke(main, ["run", str(path), "--inputs", inputs, "--dump-dir", str(tmp_path / name)] + extra)
        assert r.exit_code == 0, r.output
    local = json.loads((tmp_path / "local" / "manifest.json").read_text())
    remote = json.loads((tmp_path / "ray" / "manifest.json").read_text())
    assert remote["status"] == "ok"

    def per_device(manifest):
        """(computation, instruction, device, statistics) of every value a manifest records."""
        out = set()
        for e in manifest["instructions"]:
            if e.get("devices") == "uniform":
                rows = [(d, e["stats"]) for d in range(8)]
            else:
                rows = [(p["device"], p["stats"]) for p in e["per_device"]]
            out |= {(e["computation"], e["instruction"], d, json.dumps(st, sort_keys=True)) for d, st in rows}
        return out
    # a value some devices hold alike is computed (and dumped) once for one device of each kind: each
    # actor does that for its own devices, so Ray records every value the local run does and more
    # devices of the same values
    local_rows, remote_rows = per_device(local), per_device(remote)
    assert local_rows <= remote_rows
    assert {(c, i, st) for c, i, _, st in remote_rows} == {(c, i, st) for c, i, _, st in local_rows}
    listed = {f for e in remote["instructions"] for f in e.get("files", [])}
    on_disk = {p.name for p in (tmp_path / "ray").iterdir()} - {"manifest.json", ".hlo-dump"}
    assert listed == on_disk and listed


# ----------------------------------------------------------------------------- profile, reference, progress, ^C

def loop_module(trips: int) -> str:
    """4 partitions meeting at an all-reduce in every one of TRIPS iterations of a while loop."""
    return f"""HloModule loop_all_reduce, num_partitions=4

add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}}

cond {{
  p = (s32[], f32[1,4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant({trips})
  ROOT lt = pred[] compare(i, n), direction=LT
}}

body {{
  p = (s32[], f32[1,4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[1,4] get-tuple-element(p), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  s = f32[1,4] all-reduce(x), channel_id=1, replica_groups={{{{0,1,2,3}}}}, use_global_device_ids=true, to_apply=add
  q = f32[] constant(0.25)
  qb = f32[1,4] broadcast(q), dimensions={{}}
  y = f32[1,4] multiply(s, qb)
  ROOT t = (s32[], f32[1,4]) tuple(j, y)
}}

ENTRY main {{
  x = f32[1,4] parameter(0), sharding={{devices=[4,1]<=[4]}}
  zero = s32[] constant(0)
  init = (s32[], f32[1,4]) tuple(zero, x)
  w = (s32[], f32[1,4]) while(init), condition=cond, body=body
  ROOT r = f32[1,4] get-tuple-element(w), index=1, sharding={{devices=[4,1]<=[4]}}
}}
"""


def _hlo(argv):
    from click.testing import CliRunner

    from hlo_cli.cli import main
    return CliRunner().invoke(main, ["run"] + [str(a) for a in argv])


def test_profile_on_ray(cluster, tmp_path):
    """--profile with --cluster ray: every actor profiles its devices, one report merges them (an
    instruction's calls and times added over the actors, against the actors' time added); the
    results are the local run's bits."""
    import json
    path = ROOT / "samples" / "spmd" / "mlp_train_step_2x4.opt.hlo"
    inputs = ROOT / "samples" / "spmd" / "mlp_train_step_2x4.inputs.npz"
    local = _hlo([path, "--inputs", inputs, "--profile", "--format", "json", "--output", tmp_path / "local.npz"])
    remote = _hlo([path, "--inputs", inputs, "--profile", "--format", "json", "--output", tmp_path / "ray.npz",
                   "--cluster", "ray", "--ray-address", cluster.address])
    assert local.exit_code == remote.exit_code == 0, remote.output
    a, b = json.loads(local.stdout)["profile"], json.loads(remote.stdout)["profile"]
    assert sorted(d for act in b["actors"] for d in act["devices"]) == list(range(8))
    assert b["run_ms"] == pytest.approx(sum(act["run_ms"] for act in b["actors"]), abs=0.01)
    assert "Ray actors" in b["mode"] and b["instructions_timed"] >= len(b["top_instructions"]) > 0
    names = {i.name for c in hlo_cli.parse_file(str(path)).computations for i in c.instructions}
    assert all(r["instruction"] in names for r in b["top_instructions"])
    assert sum(r["percent"] for r in b["opcodes"]) <= 100.5
    # what the local run's steps timed, the actors' steps timed (the same opcodes; rows found by sampling
    # alone, the collectives among them, depend on when the samples fell)
    assert {o["opcode"] for o in a["opcodes"] if o["calls"]} <= {o["opcode"] for o in b["opcodes"] if o["calls"]}
    with np.load(tmp_path / "local.npz") as x, np.load(tmp_path / "ray.npz") as y:
        assert x.files == y.files and all(x[k].tobytes() == y[k].tobytes() for k in x.files)
    text = _hlo([path, "--inputs", inputs, "--profile", "--cluster", "ray", "--ray-address", cluster.address])
    assert text.exit_code == 0 and "profile by opcode" in text.output and "Ray actors" in text.output


@pytest.mark.slow
def test_reference_on_ray(cluster):
    """--reference xla with --cluster ray: the actors read the input files for their devices; XLA
    runs every device in one process here, on the arrays read here: the same comparison as a local
    run's."""
    import json
    path = ROOT / "samples" / "spmd" / "mlp_train_step_2x4.hlo"
    inputs = ROOT / "samples" / "spmd" / "mlp_train_step_2x4.inputs.npz"
    base = [path, "--inputs", inputs, "--reference", "xla", "--format", "json"]
    local, remote = _hlo(base), _hlo(base + ["--cluster", "ray", "--ray-address", cluster.address])
    assert local.exit_code == remote.exit_code == 0, remote.output
    a, b = json.loads(local.stdout)["reference"], json.loads(remote.stdout)["reference"]
    assert b["status"] == "ok" and b["mode"] == a["mode"] and b["devices"] == 8
    assert [(r["key"], r["max_abs_diff"], r["identical"]) for r in a["rows"]] == \
           [(r["key"], r["max_abs_diff"], r["identical"]) for r in b["rows"]]


@pytest.mark.slow
def test_reference_on_ray_per_device(cluster, tmp_path):
    """--reference xla with --cluster ray on a program per device whose inputs are files of every
    device's value (--per-device): XLA gets each device's own arguments, read here from the files."""
    import json

    from hlo_cli.interpreter.inputs import random_inputs
    path = ROOT / "samples" / "spmd" / "handwritten" / "mode_cross_replica.hlo"
    module = hlo_cli.parse_file(str(path))
    params = module.entry_computation.parameters
    per = [random_inputs(params, seed) for seed in range(grid_of(module).count)]
    files = []
    for k in range(len(params)):
        np.save(tmp_path / f"x{k}.npy", np.stack([np.asarray(v[k]) for v in per]))
        files += ["--input", tmp_path / f"x{k}.npy"]
    base = [path, "--per-device", "--reference", "xla", "--format", "json"] + files
    local, remote = _hlo(base), _hlo(base + ["--cluster", "ray", "--ray-address", cluster.address])
    assert local.exit_code == remote.exit_code == 0, remote.output
    a, b = json.loads(local.stdout)["reference"], json.loads(remote.stdout)["reference"]
    assert b["status"] == "ok" and b["mode"] == a["mode"] == "per_device"
    assert [(r["key"], r["identical"]) for r in a["rows"]] == [(r["key"], r["identical"]) for r in b["rows"]]


def test_progress_on_ray(cluster):
    """The progress line of a run on Ray: the driver reads where the actors' walks are (their
    heartbeats) and shows the walk of the actor furthest behind, over all the devices."""
    from hlo_cli.cli.progress import describe
    x = np.arange(16, dtype=np.float32).reshape(4, 1, 4)
    for trips in LONG_ENOUGH:                    # a run of a few heartbeats at least, however fast the machine
        module = hlo_cli.parse(loop_module(trips))
        grid = grid_of(module)
        t0 = time.monotonic()
        got, seen, sources = _watched_run(module, grid, x, cluster.address)
        if seen or time.monotonic() - t0 > 4 * HEARTBEAT_S:
            break
    assert sources[0] is not None and sources[-1] is None         # given once the actors run, taken back
    assert seen, "no position came back from the actors while the run went on"
    names = {i.name for c in module.computations for i in c.instructions}
    assert all(s.devices == 4 for s in seen)
    assert any(lv.instruction is not None and lv.instruction.name in names for s in seen for lv in s.levels)
    line = describe(seen[-1], 1.0)
    assert "4 devices" in line and "main" in line, line
    assert _same(got.per_device(), run_devices(module, [Stacked(x)], grid).per_device())


LONG_ENOUGH = (200, 2000, 20000)


def _watched_run(module, grid, x, address):
    """run_on_ray with a progress callback, its source polled every 0.1 s: (result, samples, sources)."""
    import threading
    seen, sources, stop = [], [], threading.Event()

    def progress(source):
        sources.append(source)

    def poll():
        while not stop.wait(0.1):
            if sources and sources[-1] is not None:
                smp = sources[-1]()
                if smp is not None:
                    seen.append(smp)
    th = threading.Thread(target=poll, daemon=True)
    th.start()
    try:
        got, _ = run_on_ray(module, [Stacked(x)], grid, address=address, progress=progress)
    finally:
        stop.set()
        th.join(5)
    return got, seen, sources


def test_hlo_run_cluster_ray_shows_the_progress_line(cluster, tmp_path, monkeypatch):
    """`hlo run --cluster ray` on a terminal shows the line a local run shows: the computations, the
    instruction, the loop's iteration and the devices, read from the actors."""
    from hlo_cli.cli import progress
    from hlo_cli.cli import run as run_cmd
    lines = []

    class Recorder(progress.Display):
        def __init__(self, *a, **k):
            super().__init__(*a, interval=0.05, delay=0.0, **k)

        def _show(self, smp, elapsed):
            lines.append(progress.describe(smp, elapsed, 400, self.phase))
    monkeypatch.setattr(progress, "Display", Recorder)
    monkeypatch.setattr(run_cmd, "stderr_is_terminal", lambda: True)
    np.save(tmp_path / "x.npy", np.arange(16, dtype=np.float32).reshape(4, 1, 4))
    base = [tmp_path / "m.hlo", "--input", tmp_path / "x.npy", "--per-device"]
    for trips in LONG_ENOUGH:                    # a run of a few heartbeats at least, however fast the machine
        (tmp_path / "m.hlo").write_text(loop_module(trips))
        seen = {}
        for name, extra in (("ray", ["--cluster", "ray", "--ray-address", cluster.address]), ("local", [])):
            lines.clear()
            r = _hlo(base + extra)
            assert r.exit_code == 0, r.output
            seen[name] = [ln for ln in lines if "4 devices" in ln]
        if seen["ray"] and seen["local"]:
            break
    assert seen["ray"], lines
    # the same form: the entry, the while loop's iteration, the body's instruction, the devices
    pattern = re.compile(r"^main [\d,]+/\d+ \(iteration [\d,]+\) > (body|cond) [\d,]+/\d+: \S+ [\w-]+")
    assert any(pattern.match(ln) for ln in seen["ray"]), seen["ray"][-5:]
    assert any(pattern.match(ln) for ln in seen["local"]), seen["local"][-5:]


def _actor_processes(state: str = "") -> list[int]:
    """The processes of this machine running a device actor or a coordinator (Ray names a worker
    process after the actor's class, and the method it runs: `ray::DeviceActor.run`)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                title = f.read().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        if title.startswith(("ray::DeviceActor", "ray::Coordinator")) and state in title:
            out.append(int(pid))
    return out


def _until(what, within_s: float, every_s: float = 0.2):
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        got = what()
        if got:
            return got
        time.sleep(every_s)
    return what()


def test_ctrl_c_cancels_the_cluster_work(cluster, tmp_path):
    """SIGINT to `hlo run --cluster ray` (another process, as a user's ^C): it ends with exit code 130
    ("interrupted"), writes no output, and no actor of the run is left alive."""
    import signal
    import subprocess
    import sys
    forget_actors(ray)                              # (this process's own actors out of the way)
    assert _until(lambda: not _actor_processes(), 60), "actors of an earlier test still alive"
    (tmp_path / "m.hlo").write_text(loop_module(1 << 30))
    np.save(tmp_path / "x.npy", np.arange(16, dtype=np.float32).reshape(4, 1, 4))
    out = tmp_path / "out.npz"
    p = subprocess.Popen([sys.executable, "-c", "from hlo_cli.cli import main; main()", "run", str(tmp_path / "m.hlo"),
                          "--input", str(tmp_path / "x.npy"), "--per-device", "--output", str(out),
                          "--cluster", "ray", "--ray-address", cluster.address],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        assert _until(lambda: _actor_processes(".run"), 180), "the run's actors never started"
        time.sleep(1.0)
        p.send_signal(signal.SIGINT)
        stdout, stderr = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, stderr[-2000:]
    assert "interrupted" in stderr and "Traceback" not in stderr, stderr[-2000:]
    assert sorted(f.name for f in tmp_path.iterdir()) == ["m.hlo", "x.npy"]          # nothing written
    assert _until(lambda: not _actor_processes(), 60), f"actors left alive: {_actor_processes()}"


def test_an_actor_killed_from_outside_ends_hlo_run(cluster, tmp_path):
    """An actor's process killed (SIGKILL, as the kernel's OOM killer does) mid-run: `hlo run --cluster
    ray` ends with exit code 4, naming the lost actor's devices and node, and writes no output."""
    import signal
    import threading
    (tmp_path / "m.hlo").write_text(loop_module(1 << 30))
    np.save(tmp_path / "x.npy", np.arange(16, dtype=np.float32).reshape(4, 1, 4))
    killed = []

    def kill_one():
        pids = _until(lambda: _actor_processes("DeviceActor.run"), 180)
        if pids:
            time.sleep(1.0)
            os.kill(pids[0], signal.SIGKILL)
            killed.append(pids[0])
    th = threading.Thread(target=kill_one, daemon=True)
    th.start()
    t0 = time.monotonic()
    r = _hlo([tmp_path / "m.hlo", "--input", tmp_path / "x.npy", "--per-device", "--output", tmp_path / "out.npz",
              "--cluster", "ray", "--ray-address", cluster.address])
    th.join(5)
    assert killed and time.monotonic() - t0 < 300
    assert r.exit_code == ExitCode.OUT_OF_MEMORY, r.output          # (a lost actor: exit code 4)
    assert "was lost" in r.output and "node 127.0.0.1" in r.output and "Traceback" not in r.output, r.output
    assert not (tmp_path / "out.npz").exists()


# ----------------------------------------------------------------------------- --output-global written by the actors

OUTPUT_GLOBAL = [("mlp_train_step_2x4.hlo", None, "npz"), ("reshard_1d.hlo", None, "npz"),
                 ("int_bool_reduce_2x4.hlo", None, "npz"), ("shmap_ppermute_2x4.hlo", None, "npz"),
                 ("dp_matmul_1d.opt.hlo", "{devices=[8,1]<=[8]}", "npy"),
                 ("mp_matmul_1x8.opt.hlo", "{replicated}", "npy"),
                 ("dp_matmul_1d.opt.hlo", "{devices=[2,1,4]<=[8] last_tile_dim_replicate}", "npz")]


@pytest.mark.parametrize("name, sharding, ext", OUTPUT_GLOBAL, ids=[f"{n}-{e}" for n, _, e in OUTPUT_GLOBAL])
def test_output_global_written_by_the_actors(cluster, tmp_path, name, sharding, ext):
    """--output-global on Ray: the actors keep their results and write their devices' tiles into the
    output file (memory-mapped) themselves: the local run's arrays, bit for bit, and its summary;
    the `hlo` process holds summaries only; no temporary file is left."""
    _same_output_as_local(cluster, tmp_path, name, ext, ["--output-global"] +
                          (["--output-sharding", sharding] if sharding else []))


PER_DEVICE_OUTPUT = [("mlp_train_step_2x4.opt.hlo", "npz"), ("dp_matmul_1d.opt.hlo", "npy"),
                     ("replicas_8.opt.hlo", "npz"), ("mlp_train_step_2x4.hlo", "npz")]


@pytest.mark.parametrize("name, ext", PER_DEVICE_OUTPUT, ids=[f"{n}-{e}" for n, e in PER_DEVICE_OUTPUT])
def test_output_written_by_the_actors(cluster, tmp_path, name, ext):
    """--output without --output-global on Ray: every device's value stacked on the file's leading
    axis, each row written in place by the actor holding the device (a global value by one actor)."""
    _same_output_as_local(cluster, tmp_path, name, ext, [])


def _same_output_as_local(cluster, tmp_path, name, ext, extra):
    path = ROOT / "samples" / "spmd" / name
    inputs = ROOT / "samples" / "spmd" / (name.split(".")[0] + ".inputs.npz")
    base = [path, "--inputs", inputs] + extra
    local = _hlo(base + ["--output", tmp_path / f"local.{ext}"])
    remote = _hlo(base + ["--output", tmp_path / f"ray.{ext}", "--cluster", "ray", "--ray-address", cluster.address])
    assert local.exit_code == remote.exit_code == 0, remote.output
    # the summary: the same rows, statistics, previews (the notes on how the inputs were taken are the
    # local run's: on Ray the actors place the inputs); a module before partitioning run without a
    # device option runs on one device locally (a summary without devices)
    if " devices (" in local.output:
        assert [ln for ln in local.output.splitlines() if not ln.startswith("note:")] == remote.output.splitlines()
    if ext == "npy":
        a, b = np.load(tmp_path / "local.npy"), np.load(tmp_path / "ray.npy")
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    else:
        with np.load(tmp_path / f"local.{ext}") as x, np.load(tmp_path / f"ray.{ext}") as y:
            assert x.files == y.files
            for k in x.files:
                assert x[k].dtype == y[k].dtype and x[k].shape == y[k].shape and x[k].tobytes() == y[k].tobytes(), k
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([f"local.{ext}", f"ray.{ext}"])


def test_output_global_on_ray_holds_no_value_here(cluster, tmp_path):
    """The pipeline's view: the result leaves of a run whose actors wrote --output-global are
    summaries (pipeline.io.RowSummary), no array; with --print's `values_here` the values come
    here as before."""
    from hlo_cli.pipeline.core import DeviceOptions, RunRequest, run
    from hlo_cli.pipeline.io import RowSummary
    path = ROOT / "samples" / "spmd" / "dp_matmul_1d.opt.hlo"
    inputs = str(ROOT / "samples" / "spmd" / "dp_matmul_1d.inputs.npz")

    def request(out, here):
        return RunRequest(str(path), inputs_npz=inputs, output=str(tmp_path / out), devices=DeviceOptions(
            output_global=True, output_sharding="{devices=[8,1]<=[8]}", cluster="ray",
            ray_address=cluster.address, values_here=here))
    kept = run(request("a.npy", False))
    assert all(leaf.stacked is None and all(isinstance(r, RowSummary) for r in leaf.summaries)
               for leaf in kept.device_leaves)
    gathered = run(request("b.npy", True))
    assert all(isinstance(leaf.stacked, np.ndarray) for leaf in gathered.device_leaves)
    assert np.load(tmp_path / "a.npy").tobytes() == np.load(tmp_path / "b.npy").tobytes()


def test_output_global_when_the_actors_do_not_see_the_file(cluster, tmp_path, monkeypatch):
    """A cluster whose nodes do not share the output's file system (the actors do not see the file
    made for them): the values the actors kept are brought here and written as without Ray."""
    from hlo_cli.pipeline import ray_backend
    path = ROOT / "samples" / "spmd" / "mlp_train_step_2x4.hlo"
    inputs = ROOT / "samples" / "spmd" / "mlp_train_step_2x4.inputs.npz"
    asked = []
    monkeypatch.setattr(ray_backend, "all_see", lambda run, p: asked.append(p) and False)
    base = [path, "--inputs", inputs, "--output-global"]
    local = _hlo(base + ["--output", tmp_path / "local.npz"])
    remote = _hlo(base + ["--output", tmp_path / "ray.npz", "--cluster", "ray", "--ray-address", cluster.address])
    assert local.exit_code == remote.exit_code == 0, remote.output
    assert asked and local.output == remote.output
    with np.load(tmp_path / "local.npz") as x, np.load(tmp_path / "ray.npz") as y:
        assert x.files == y.files and all(x[k].tobytes() == y[k].tobytes() for k in x.files)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["local.npz", "ray.npz"]


def test_summary_from_the_actors(cluster):
    """`hlo run --cluster ray` without --output: the summary and the JSON results (per set of devices
    holding the same bits, their statistics) come from the actors' summaries, as a local run's; --print
    brings the values here and prints them as a local run does."""
    import json
    path = ROOT / "samples" / "spmd" / "mlp_train_step_2x4.opt.hlo"
    inputs = ROOT / "samples" / "spmd" / "mlp_train_step_2x4.inputs.npz"
    ray_args = ["--cluster", "ray", "--ray-address", cluster.address]
    for extra in ([], ["--device", "5"], ["--print"]):
        local, remote = _hlo([path, "--inputs", inputs] + extra), _hlo([path, "--inputs", inputs] + extra + ray_args)
        assert local.exit_code == remote.exit_code == 0 and local.output == remote.output, remote.output
    local = _hlo([path, "--inputs", inputs, "--format", "json"])
    remote = _hlo([path, "--inputs", inputs, "--format", "json"] + ray_args)
    assert json.loads(local.stdout)["results"] == json.loads(remote.stdout)["results"]
