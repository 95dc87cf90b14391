"""PyTorch/XLA SPMD dumps (samples/torch_xla_spmd, made by torch_xla 2.9 on 8 CPU devices): the
module before optimizations -- whose header already says num_partitions=8 although its values are
global -- runs as one global program, the partitioned module on 8 devices, and both give the
results PyTorch/XLA returned.  Also the same rule on JAX's --xla_dump_to form of a module before
partitioning (num_partitions and the Shardy mesh in the header)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hlo_cli.topology import partitioned
from hlo_cli import parse_file
from hlo_cli.parser import parse
from run_harness import hlo  # noqa: F401  (the fixture)

ROOT = Path(__file__).resolve().parents[2]
TORCH = ROOT / "samples" / "torch_xla_spmd"
CASES = sorted(p.name[:-4] for p in TORCH.glob("*.hlo") if not p.name.endswith(".opt.hlo"))

# float results: XLA's dot and tanh differ from ours in the last bits (measured: at most 2.4e-7
# absolute on results up to 5, 1e-5 relative on gradients near zero)
RTOL, ATOL = 2e-5, 2e-6


def _expected(case):
    ref = np.load(TORCH / f"{case}.expected.npz")
    return [ref[f"out{k}"] for k in range(len(ref.files))]


@pytest.mark.parametrize("case", CASES)
def test_before_optimizations_is_a_global_program(hlo, case):
    assert not partitioned(parse_file(str(TORCH / f"{case}.hlo")))
    r = hlo("run", str(TORCH / f"{case}.hlo"), "--inputs", str(TORCH / f"{case}.inputs.npz"), "-o", "out.npz")
    assert r.exit_code == 0, r.output
    got = np.load("out.npz")
    for k, want in enumerate(_expected(case)):
        np.testing.assert_allclose(got[f"out{k}"], want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("case", CASES)
def test_partitioned_module_on_eight_devices(hlo, case):
    assert partitioned(parse_file(str(TORCH / f"{case}.opt.hlo")))
    shardings = json.loads((TORCH / f"{case}.json").read_text())["output_shardings"]
    spec = shardings[0] if len(shardings) == 1 else "{" + ", ".join(shardings) + "}"
    r = hlo("run", str(TORCH / f"{case}.opt.hlo"), "--inputs", str(TORCH / f"{case}.inputs.npz"), "-o", "out.npz",
            "--output-global", "--output-sharding", spec)
    assert r.exit_code == 0, r.output
    assert "8 devices" in r.stdout
    got = np.load("out.npz")
    for k, want in enumerate(_expected(case)):
        np.testing.assert_allclose(got[f"out{k}"], want, rtol=RTOL, atol=ATOL)


def test_jax_dump_before_partitioning_is_global(hlo, tmp_path):
    """JAX's --xla_dump_to *.before_optimizations.txt carries num_partitions=8 and the Shardy mesh
    in its header (`.as_text()` does not): still a global program."""
    src = ROOT / "samples" / "spmd" / "dp_matmul_1d.hlo"
    text = src.read_text()
    head, rest = text.split("\n", 1)
    assert "num_partitions" not in head
    dumped = head.replace("entry_computation_layout=", "num_partitions=8, entry_computation_layout=", 1) + "\n" + rest
    assert not partitioned(parse(dumped))
    (tmp_path / "dumped.hlo").write_text(dumped)
    base = ROOT / "samples" / "spmd" / "dp_matmul_1d"
    r = hlo("run", str(tmp_path / "dumped.hlo"), "--inputs", f"{base}.inputs.npz", "-o", "out.npz")
    assert r.exit_code == 0, r.output
    want = np.load(f"{base}.expected.npz")["out0"]
    np.testing.assert_allclose(np.load("out.npz")["out0"], want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("header, per_device", [
    ("HloModule m, num_partitions=2", False),                      # tiled annotation, no collective
    ("HloModule m, is_scheduled=true, num_partitions=2", True),    # XLA's partitioned output
    ("HloModule m, replica_count=2", True),                        # replicas run the text as it is
    ("HloModule m", False),
])
def test_which_modules_are_per_device(header, per_device):
    text = header + """

ENTRY e {
  a = f32[4] parameter(0), sharding={devices=[2]<=[2]}
  ROOT n = f32[4] negate(a)
}
"""
    assert partitioned(parse(text)) is per_device


def test_a_collective_makes_a_module_per_device():
    text = """HloModule m, num_partitions=2

add { x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y) }

ENTRY e {
  a = f32[4] parameter(0), sharding={devices=[2]<=[2]}
  ROOT r = f32[4] all-reduce(a), channel_id=1, replica_groups={{0,1}}, use_global_device_ids=true, to_apply=add
}
"""
    assert partitioned(parse(text))
