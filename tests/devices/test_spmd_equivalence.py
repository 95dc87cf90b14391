"""The multi-device evaluator against the single-device one: every JAX sample run on two devices
(replicas) with different inputs per device gives, on each device, exactly the single-device
result of that device's inputs.  This is the law the SPMD evaluator's batched paths (element-wise
and data-movement instructions on stacked values, uniform values held once) must keep: no
collective is involved, so nothing may differ by a single bit."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hlo_cli.devices import run_devices
from hlo_cli.topology.grid import DeviceGrid
from hlo_cli.devices.values import Stacked, Uniform
from hlo_cli.interpreter import run_module
from hlo_cli.interpreter.inputs import random_inputs
from hlo_cli.interpreter.values import leaves
from hlo_cli import parse_file

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = sorted((ROOT / "samples" / "jax").glob("*.hlo"))


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return a.tobytes() == b.tobytes()


def _stack(values):
    if isinstance(values[0], tuple):
        return tuple(_stack([v[k] for v in values]) for k in range(len(values[0])))
    if isinstance(values[0], np.ndarray):
        return np.stack(values)
    return values[0]


@pytest.mark.parametrize("path", SAMPLES, ids=[p.name for p in SAMPLES])
def test_two_devices_match_single_device(path):
    module = parse_file(str(path))
    params = module.entry_computation.parameters
    per_device = [random_inputs(params, seed) for seed in (1, 2)]
    want = [run_module(module, args) for args in per_device]
    # the first parameter stacked per device, the others the same on both devices (held once)
    args = []
    for k in range(len(params)):
        if k == 0:
            args.append(Stacked(_stack([per_device[0][k], per_device[1][k]])))
        else:
            args.append(Uniform(per_device[0][k]))
    want[1] = run_module(module, [per_device[1][0]] + list(per_device[0][1:]))
    got = run_devices(module, args, DeviceGrid(2, 1))
    for d in range(2):
        value = got.value.at(d) if isinstance(got.value, Stacked) else got.value.value
        for k, (x, y) in enumerate(zip(leaves(value), leaves(want[d]))):
            assert _same(x, y), f"device {d}, result leaf {k}: differs from the single-device run"


SPMD = sorted((ROOT / "samples" / "spmd").glob("*.opt.hlo"))


@pytest.mark.parametrize("path", SPMD, ids=[p.name for p in SPMD])
def test_values_held_once_per_distinct_value_change_no_bit(path, monkeypatch):
    """Devices holding the same bits share one copy (inputs replicated along a mesh axis, an
    all-reduce's result within its group) and pure instructions run once per distinct value: the
    results are those of computing every device's copy."""
    import hlo_cli.devices as devices_pkg
    from hlo_cli.devices import spmd
    from hlo_cli.devices.inputs import distribute
    module = parse_file(str(path))
    grid = devices_pkg.grid_of(module)
    inputs = np.load(str(path).replace(".opt.hlo", ".inputs.npz"))
    args = distribute(module, [inputs[f"arg{k}"] for k in range(len(inputs.files))], grid)
    shared = run_devices(module, args, grid).per_device()
    monkeypatch.setattr(devices_pkg, "grouped", lambda v, n: v)
    monkeypatch.setattr(spmd.Spmd, "_by_group", lambda self, inst, value, devs: Stacked(value))
    every = run_devices(module, args, grid).per_device()
    for k, (x, y) in enumerate(zip(leaves(shared), leaves(every))):
        assert _same(x, y), f"result leaf {k} differs"


def test_grouped_keeps_every_device_value():
    from hlo_cli.devices.values import Grouped, grouped
    rows = np.array([[1, 2], [3, 4], [1, 2], [3, 4]], np.int32)
    g = grouped(Stacked(rows), 4)
    assert isinstance(g, Grouped) and g.classes == (0, 1, 0, 1)
    assert (g.value == rows).all() and (g.at(2) == rows[2]).all()
    assert isinstance(grouped(Stacked(np.zeros((3, 2))), 3), Uniform)
    distinct = Stacked(np.arange(6).reshape(3, 2))
    assert grouped(distinct, 3) is distinct
