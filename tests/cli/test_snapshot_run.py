"""`hlo run SNAPSHOT.pb`: an HloSnapshot (what XLA writes with --xla_dump_hlo_snapshots: the module,
the arguments of one execution and its result) replayed on its arguments and compared with its
stored result as --expect compares; --input/--inputs/--random-inputs replace the arguments (and the
stored result is then not compared), --expect replaces the stored result.

The snapshots under samples/snapshots were written by XLA CPU (make_snapshots.py); the tampered
and malformed ones here are built with our own encoder (sources.proto.encode_snapshot).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from run_harness import hlo  # noqa: F401  (the fixture)

pytest.importorskip("google.protobuf")

from hlo_cli.sources.proto import encode_snapshot, read_bytes, read_snapshot  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOTS = ROOT / "samples" / "snapshots"
NAMES = ["mlp", "narrow", "loop"]


def _module_proto(path: Path) -> bytes:
    from hlo_cli.sources.proto_schema import messages
    msg = messages()["HloSnapshot"]()
    msg.ParseFromString(read_bytes(str(path))[0])
    return msg.hlo.hlo_module.SerializeToString()


def _leaves(v):
    if isinstance(v, tuple):
        return [x for e in v for x in _leaves(e)]
    return [] if v is None else [np.asarray(v)]


@pytest.mark.parametrize("name", NAMES)
def test_snapshot_replays_and_matches_its_result(hlo, name):
    path = SNAPSHOTS / f"{name}.snapshot.pb"
    r = hlo("run", path, "--no-progress")
    assert r.exit_code == 0, r.stderr
    assert "comparison with the snapshot's result" in r.stdout and "results match the snapshot's result" in r.stdout
    r = hlo("run", path, "--format", "json")
    doc = json.loads(r.stdout)
    snap = read_snapshot(str(path))
    assert doc["status"] == "ok" and doc["expect"]["ok"]
    assert doc["expect"]["reference"] == f"{path} (the snapshot's result)"
    assert [i["number"] for i in doc["inputs"]] == list(range(len(snap.arguments)))
    assert all(i["snapshot"] == str(path) for i in doc["inputs"])
    assert len(doc["expect"]["rows"]) == len(_leaves(snap.result))


def test_a_result_that_changed_is_a_mismatch(hlo, tmp_path):
    """The stored result of mlp with one probability moved: exit 1, the row and index named."""
    src = SNAPSHOTS / "mlp.snapshot.pb"
    snap = read_snapshot(str(src))
    probs, classes = snap.result
    probs = probs.copy()
    probs[2, 3] += 0.25
    bad = tmp_path / "bad.snapshot.pb"
    bad.write_bytes(encode_snapshot(_module_proto(src), snap.arguments, (probs, classes)))
    r = hlo("run", bad, "--no-progress")
    assert r.exit_code == 1
    assert "1 result differs from the snapshot's result" in r.stderr
    r = hlo("run", bad, "--format", "json")
    doc = json.loads(r.stdout)
    assert doc["status"] == "mismatch" and doc["exit_code"] == 1
    row = doc["expect"]["rows"][0]
    assert row["status"] == "mismatch" and row["mismatched"] == 1 and row["first_index"] == [2, 3]


def test_inputs_given_replace_the_arguments(hlo, tmp_path):
    path = SNAPSHOTS / "mlp.snapshot.pb"
    r = hlo("run", path, "--random-inputs", "--format", "json")
    doc = json.loads(r.stdout)
    assert r.exit_code == 0 and "expect" not in doc and all(i.get("random") for i in doc["inputs"])
    assert "its stored result is not compared" in r.stderr
    snap = read_snapshot(str(path))
    np.savez(tmp_path / "args.npz", **{f"arg{k}": a for k, a in enumerate(snap.arguments)})
    r = hlo("run", path, "--inputs", tmp_path / "args.npz", "--no-progress")
    assert r.exit_code == 0 and "snapshot's result" not in r.stdout


def test_expect_replaces_the_stored_result(hlo, tmp_path):
    path = SNAPSHOTS / "narrow.snapshot.pb"
    leaves = _leaves(read_snapshot(str(path)).result)
    wrong = {f"out{k}": (a.astype(np.float32) + 1).astype(a.dtype) if a.dtype.kind == "f" or a.dtype.name == "bfloat16"
             else a for k, a in enumerate(leaves)}
    np.savez(tmp_path / "ref.npz", **{k: v.astype(np.float32) if v.dtype.name == "bfloat16" else v
                                      for k, v in wrong.items()})
    r = hlo("run", path, "--expect", tmp_path / "ref.npz", "--format", "json")
    doc = json.loads(r.stdout)
    assert r.exit_code == 1 and doc["expect"]["reference"] == str(tmp_path / "ref.npz")


def test_snapshot_without_result_runs_without_comparison(hlo, tmp_path):
    src = SNAPSHOTS / "loop.snapshot.pb"
    snap = read_snapshot(str(src))
    f = tmp_path / "noresult.snapshot.pb"
    f.write_bytes(encode_snapshot(_module_proto(src), snap.arguments))
    r = hlo("run", f, "--format", "json")
    doc = json.loads(r.stdout)
    assert r.exit_code == 0 and doc["status"] == "ok" and "expect" not in doc


def test_arguments_that_do_not_fit_the_module(hlo, tmp_path):
    src = SNAPSHOTS / "mlp.snapshot.pb"
    snap = read_snapshot(str(src))
    few = tmp_path / "few.snapshot.pb"
    few.write_bytes(encode_snapshot(_module_proto(src), snap.arguments[:2], snap.result))
    r = hlo("run", few, "--no-progress")
    assert r.exit_code == 2 and "the snapshot holds 2 arguments, the entry computation takes 4 parameters" in r.stderr
    wrong = tmp_path / "wrong.snapshot.pb"
    args = list(snap.arguments)
    args[1] = args[1][:4]
    wrong.write_bytes(encode_snapshot(_module_proto(src), args, snap.result))
    r = hlo("run", wrong, "--no-progress")
    assert r.exit_code == 2 and "argument 1 of the snapshot" in r.stderr and "f32[8,16]" in r.stderr


def test_unoptimized_snapshot_runs_on_its_arguments(hlo):
    """What --xla_dump_hlo_unoptimized_snapshots writes: the module before optimizations and the
    arguments of an execution, no result."""
    path = SNAPSHOTS / "mlp.hlo_unoptimized_snapshot.pb"
    snap = read_snapshot(str(path))
    assert snap.kind == "HloUnoptimizedSnapshot" and snap.result is None and len(snap.arguments) == 4
    r = hlo("run", path, "--format", "json")
    doc = json.loads(r.stdout)
    assert r.exit_code == 0 and doc["status"] == "ok" and "expect" not in doc
    assert [i["snapshot"] for i in doc["inputs"]] == [str(path)] * 4
    assert "holds no result to compare with" in r.stderr
    # the same arguments as the optimized snapshot of the same execution: the same results
    opt = read_snapshot(str(SNAPSHOTS / "mlp.snapshot.pb"))
    for a, b in zip(snap.arguments, opt.arguments):
        assert np.array_equal(a, b)


@pytest.mark.slow
def test_unoptimized_snapshot_against_xla(hlo):
    pytest.importorskip("jax")
    r = hlo("run", SNAPSHOTS / "mlp.hlo_unoptimized_snapshot.pb", "--reference", "xla", "--format", "json")
    doc = json.loads(r.stdout)
    assert r.exit_code == 0 and doc["reference"]["status"] == "ok" and "expect" not in doc
