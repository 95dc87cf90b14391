"""hlo info on multi-device modules: the devices (replicas x partitions and where the counts come
from), Shardy meshes, each kind of collective with its count and group sizes (in devices), and the
entry parameters' shardings with their global and per-device shapes; in text and in JSON."""
from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from hlo_cli.cli import main

ROOT = Path(__file__).resolve().parent.parent

PARTITIONED = """HloModule m, replica_count=2, num_partitions=4

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY e {
  x = f32[3,4] parameter(0), sharding={devices=[2,2,2]<=[8] last_tile_dim_replicate}
  y = f32[8] parameter(1), sharding={replicated}
  z = f32[8] parameter(2)
  r0 = f32[3,4] all-reduce(x), channel_id=1, replica_groups={{0},{1}}, to_apply=add
  r1 = f32[3,4] all-reduce(r0), channel_id=2, replica_groups=[4,2]<=[8], use_global_device_ids=true, to_apply=add
  r2 = f32[3,4] all-reduce(r1), replica_groups={}, to_apply=add
  g = f32[32] all-gather(y), channel_id=3, replica_groups=[2,4]<=[8], dimensions={0}, use_global_device_ids=true
  c = f32[8] collective-permute(z), channel_id=4, source_target_pairs={{0,1},{1,0}}
  i = u32[] partition-id()
  ROOT t = (f32[3,4], f32[32], f32[8], u32[]) tuple(r2, g, c, i)
}
"""


def info(text_or_path, *args) -> tuple[int, str]:
    if isinstance(text_or_path, Path):
        r = CliRunner().invoke(main, ["info", "--no-cache", *args, str(text_or_path)])
    else:
        r = CliRunner().invoke(main, ["info", "--no-cache", *args, "-"], input=text_or_path)
    assert "Traceback" not in r.output
    return r.exit_code, r.stdout


def devices_json(text_or_path) -> dict | None:
    code, out = info(text_or_path, "--format", "json")
    assert code == 0, out
    return json.loads(out).get("devices")


def test_partitioned_module_devices_collectives_and_shardings():
    d = devices_json(PARTITIONED)
    assert (d["replicas"], d["partitions"], d["count"], d["from"]) == (2, 4, 8, "the module")
    kinds = {k["opcode"]: (k["count"], k["group_sizes"]) for k in d["collectives"]}
    # cross-replica-and-partition groups of 1 replica span the 4 partitions; flattened groups of 2;
    # empty cross-replica groups are all 2 replicas
    assert kinds["all-reduce"] == (3, [2, 4])
    assert kinds["all-gather"] == (1, [4])
    assert kinds["collective-permute"] == (1, [2])
    assert kinds["partition-id"] == (1, [])
    params = {p["name"]: p for p in d["parameters"]}
    assert set(params) == {"x", "y"}                 # z has no sharding
    # a partitioned module's parameters have the per-device shape; the global one is the tiles together
    assert params["x"]["per_device_shape"] == "f32[3,4]" and params["x"]["global_shape"] == "f32[6,8]"
    assert params["y"]["sharding"] == "{replicated}" and params["y"]["global_shape"] == "f32[8]"


def test_module_before_partitioning_takes_the_shardy_mesh():
    path = ROOT / "samples" / "spmd" / "dp_mp_matmul_grad_4x2.hlo"
    d = devices_json(path)
    assert (d["replicas"], d["partitions"], d["from"]) == (1, 8, "the module's mesh")
    assert d["meshes"] == [{"name": "mesh", "axes": {"data": 4, "model": 2}, "size": 8}]
    params = {p["name"]: p for p in d["parameters"]}
    # global shapes declared; a device holds ceil(dim / tiles)
    assert params["y.1"]["global_shape"] == "f32[8,4]" and params["y.1"]["per_device_shape"] == "f32[2,2]"
    assert params["x.1"]["per_device_shape"] == "f32[2,6]"


def test_uneven_tiles_round_up():
    text = ("HloModule m, frontend_attributes={xla.sdy.meshes={mesh = #sdy.mesh<[\"x\"=4]>}}\n\nENTRY e {\n"
            "  p = f32[10,3] parameter(0), sharding={devices=[4,1]<=[4]}\n  ROOT n = f32[10,3] negate(p)\n}\n")
    d = devices_json(text)
    assert d["parameters"][0]["per_device_shape"] == "f32[3,3]"
    assert d["parameters"][0]["global_shape"] == "f32[10,3]"


def test_single_device_module_has_no_devices_section():
    assert devices_json("HloModule m\n\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT n = f32[2] negate(p)\n}\n") is None


def test_text_output_lists_devices_collectives_and_shardings():
    code, out = info(PARTITIONED)
    assert code == 0
    assert "8 = 2 replicas x 4 partitions (the module)" in out
    assert "collectives" in out and "all-reduce" in out and "2, 4" in out
    assert "parameter shardings" in out and "f32[6,8]" in out


def test_groups_without_a_count_are_summarized_with_xlas_default():
    text = ("HloModule m\n\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n\n"
            "ENTRY e {\n  p = f32[2] parameter(0)\n  ROOT r = f32[2] all-reduce(p), replica_groups={{0,1}}, "
            "to_apply=add\n}\n")
    d = devices_json(text)
    assert d["count"] == 1 and d["from"].startswith("XLA's default")
    assert d["collectives"] == [{"opcode": "all-reduce", "count": 1, "group_sizes": [2]}]


def test_a_malformed_mesh_does_not_stop_info():
    text = ("HloModule m, frontend_attributes={xla.sdy.meshes={mesh = #sdy.mesh<[\"x\"=]>}}\n\nENTRY e {\n"
            "  p = f32[2] parameter(0)\n  ROOT n = f32[2] negate(p)\n}\n")
    code, out = info(text, "--format", "json")
    assert code == 0 and json.loads(out)["module"] == "m"
