"""Live differential tests of multi-device runs against XLA CPU through JAX (slow).

A few cases of scripts/gen_spmd_samples.py are generated again with other random inputs (--seed),
in a subprocess (JAX needs its 8 host devices configured before it is first imported, and this
test process may have imported it already with one), into a temporary directory; then hlo runs
them exactly as tests/devices/test_spmd_goldens.py runs the committed samples: the partitioned
program bit for bit on every device, the unpartitioned one within the float tolerances.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("jax")

ROOT = Path(__file__).resolve().parents[2]
GEN = ROOT / "scripts" / "gen_spmd_samples.py"

# one per family: data-parallel gradient, 2-D mesh attention, a while loop with collectives inside,
# explicit collectives (gather/scatter/all-to-all, partial permutations), replicas x partitions,
# padded pieces of a dimension the mesh does not divide, a halo exchange, device-dependent control flow
LIVE = ["dp_matmul_grad_1d", "attention_heads_2x4", "scan_layers_4x2", "shmap_gather_scatter_2x4",
        "shmap_ppermute_1d", "replicas_2x4", "uneven_2x4", "halo_conv_1d", "shmap_divergent_1d"]
SEEDS = [7, 31]


def _goldens():
    spec = importlib.util.spec_from_file_location("_hlo_spmd_goldens", Path(__file__).parent / "test_spmd_goldens.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


GOLDENS = _goldens()


@pytest.fixture(scope="module", params=SEEDS)
def live_dir(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"spmd_seed{request.param}")
    env = dict(os.environ)
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
    env["JAX_PLATFORMS"] = "cpu"
    r = subprocess.run([sys.executable, str(GEN), "--out", str(out), "--seed", str(request.param),
                        "--only", *LIVE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", LIVE)
def test_live_partitioned(live_dir, name):
    GOLDENS.check_partitioned(name, live_dir)


@pytest.mark.slow
@pytest.mark.parametrize("name", LIVE)
def test_live_unpartitioned(live_dir, name):
    GOLDENS.check_unpartitioned(name, live_dir)
