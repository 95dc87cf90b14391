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
from hlo_cli.devices.grid import DeviceGrid
from hlo_cli.devices.values import Stacked, Uniform
from hlo_cli.interpreter import run_module
from hlo_cli.interpreter.inputs import random_inputs
from hlo_cli.interpreter.values import leaves
from hlo_cli.parser import parse_file

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
