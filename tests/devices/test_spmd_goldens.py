"""Multi-device runs against XLA CPU's own results, without JAX: the samples of samples/spmd/.

scripts/gen_spmd_samples.py made every sample with JAX on 8 XLA CPU host devices: NAME.hlo (before
partitioning: global shapes, shardings, Shardy custom calls), NAME.opt.hlo (the per-device program
XLA compiled), NAME.inputs.npz (global inputs; per-device inputs stacked on a leading axis for the
replica samples), NAME.expected.npz (out<i>: XLA's global results; dev_out<i>: each result leaf on
every device, stacked in device-id order) and NAME.json (mesh, shardings, JAX version).

- NAME.opt.hlo: the global inputs split by the parameters' shardings (devices.inputs.distribute),
  run on every device (devices.run_devices): every device's results equal XLA's.
- NAME.hlo: run on global values: the result is one value held by every device (Uniform) and equals
  XLA's global result.
  Both bit for bit, except the float results of the samples TOLERANCES names (and says why).
- the same through `hlo run` (--inputs / --output, --per-device, --output-global) for every sample.
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import hlo_cli

ROOT = Path(__file__).resolve().parents[2]
SPMD = ROOT / "samples" / "spmd"
NAMES = sorted(p.stem for p in SPMD.glob("*.json"))

# Float results are compared bit for bit unless a sample is listed here: (rtol, atol), used as
# |ours - XLA| <= atol + rtol * |XLA| for float leaves (integers and booleans stay exact), for both
# texts.  Why these samples cannot match bit for bit: hlo's single-device dot rule sums small f32
# dots in f64 and rounds once (interpreter/ops/linalg.py, eval_dot), where XLA CPU sums in f32;
# tanh/exp/log differ by an ulp as on one device (tests/test_samples_run.py's table); XLA CPU
# contracts a multiply and an add of one loop fusion into an FMA, hlo rounds twice (measured on one
# device: jit(x * 1.5 + 0.25) of 100000 f32 is the FMA bit for bit, 9806 differ from two roundings;
# shmap_divergent_1d's loop multiplies only, to stay exact).  Measured on
# mp_matmul_1x8 (one dot per device, then an all-reduce): XLA's per-device partial products are
# NumPy's f32 matmul, and its all-reduce adds them in device order 0, 1, ..., 7 bit for bit; ours
# differ from XLA's partials in 3-12 of 24 elements by 1 ulp and then only by what the sum carries.
# The collectives alone are exact: every sample not listed (psum/pmax/pmin/pmean of f32 and s32 over
# 8, 4 and 2 devices, all-gather, psum_scatter, all-to-all, partial permutations, replicas) matches
# bit for bit.  Bounds: the largest |ours - XLA| over both texts and the seeds 0, 7, 31, 99
# (scripts/gen_spmd_samples.py --seed N), with a 2-4x margin.
TOLERANCES: dict[str, tuple[float, float]] = {
    "attention_heads_2x4": (1e-6, 1e-6),     # max 4.8e-7 (softmax exp, 6 einsums)
    "dp_matmul_1d": (5e-7, 5e-7),            # max 1.8e-7 (dot, tanh)
    "dp_matmul_grad_1d": (5e-7, 5e-7),       # max 1.2e-7 (the loss, a mean over devices)
    "dp_mp_matmul_grad_4x2": (5e-7, 5e-7),   # max 1.2e-7
    "halo_conv_1d": (1e-6, 1e-6),            # max 4.8e-7 (a convolution: dots of 6 terms)
    "mlp_train_step_2x4": (5e-7, 5e-7),      # max 2.4e-7 (the loss: log-softmax)
    "mp_matmul_1d": (5e-7, 5e-7),            # max 2.4e-7
    "mp_matmul_1x8": (5e-7, 5e-7),           # max 2.4e-7
    "mp_matmul_grad_1d": (2e-6, 3e-6),       # max 1.2e-6 (gradients through tanh of sums up to ~10)
    "scan_layers_4x2": (2e-6, 2e-6),         # max 9.5e-7 (3 layers of tanh(h @ w + b), sums of h)
    # the partitioned program is exact (no dot); before partitioning one device adds the 5 columns
    # in another order than XLA's per-device halves plus an all-reduce
    "uneven_2x4": (1e-6, 1e-6),              # max 4.8e-7, the .hlo only
    "zero_grad_1d": (1e-6, 1e-5),            # max 3.8e-6 (gradients up to ~40: sums of 16 products)
}


def _meta(name: str, d: Path = SPMD) -> dict:
    return json.loads((d / f"{name}.json").read_text())


def _npz(path: Path) -> dict:
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def _inputs(name: str, d: Path = SPMD) -> list:
    z = _npz(d / f"{name}.inputs.npz")
    return [z[f"arg{i}"] for i in range(len(z))]


def _expected(name: str, prefix: str, d: Path = SPMD) -> list:
    z = _npz(d / f"{name}.expected.npz")
    n = sum(1 for k in z if k.startswith(prefix) and k[len(prefix):].isdigit())
    return [z[f"{prefix}{i}"] for i in range(n)]


@lru_cache(maxsize=None)
def _module(path: str):
    return hlo_cli.parse_file(path)


def _run(name: str, text: str, d: Path = SPMD):
    from hlo_cli.topology import grid_of
    from hlo_cli.devices import run_devices
    from hlo_cli.devices.inputs import distribute
    module = _module(str(d / f"{name}.{text}"))
    grid = grid_of(module)
    args = distribute(module, _inputs(name, d), grid, per_device=_meta(name, d)["per_device_inputs"])
    return run_devices(module, args, grid)


def _leaves(v) -> list:
    from hlo_cli.devices.values import leaves
    return leaves(v)


def _bits_equal(got: np.ndarray, want: np.ndarray, what: str):
    got = np.asarray(got)
    assert got.shape == want.shape and got.dtype == want.dtype, \
        f"{what}: {got.dtype}{list(got.shape)}, XLA {want.dtype}{list(want.shape)}"
    if got.tobytes() != want.tobytes():
        bad = np.argwhere(got != want) if got.dtype.kind != "f" else \
            np.argwhere(~((got == want) | (np.isnan(got) & np.isnan(want))))
        i = tuple(bad[0]) if len(bad) else ()
        pytest.fail(f"{what}: {len(bad)} elements differ from XLA, first at {list(i)}: "
                    f"{got[i]!r} vs {want[i]!r}")


def _matches(got, want: np.ndarray, tol, what: str):
    """Bit for bit, or for float leaves within tol = (rtol, atol); NaNs where XLA has them."""
    got = np.asarray(got)
    if tol is None or want.dtype.kind != "f":
        _bits_equal(got, want, what)
        return
    assert got.shape == want.shape and got.dtype == want.dtype, \
        f"{what}: {got.dtype}{list(got.shape)}, XLA {want.dtype}{list(want.shape)}"
    rtol, atol = tol
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True, err_msg=what)


# ----------------------------------------------------------------------------- the samples themselves

def test_samples_are_complete_and_small():
    assert len(NAMES) >= 15
    total = 0
    for name in NAMES:
        for suffix in (".hlo", ".opt.hlo", ".inputs.npz", ".expected.npz", ".json"):
            p = SPMD / f"{name}{suffix}"
            assert p.exists(), p
            total += p.stat().st_size
        meta = _meta(name)
        dev = _expected(name, "dev_out")
        assert len(dev) == len(meta["outputs"]) >= 1
        count = meta["replicas"] * meta["partitions"]
        assert all(d.shape[0] == count for d in dev), name
    assert total < 2_000_000


def test_every_case_of_the_generator_is_committed():
    gen = (ROOT / "scripts" / "gen_spmd_samples.py").read_text()
    import re
    cases = re.findall(r'^@case\("([a-z0-9_]+)"', gen, re.M)
    assert sorted(cases) == NAMES


def test_the_meshes_the_issue_asks_for():
    meshes = {tuple(_meta(n)["mesh_shape"]) for n in NAMES if _meta(n)["kind"] == "jit"}
    assert {(8,), (1, 8), (2, 4), (4, 2)} <= meshes
    assert any(_meta(n)["kind"] == "replicas" for n in NAMES)


# ----------------------------------------------------------------------------- after partitioning

def check_partitioned(name: str, d: Path = SPMD):
    """NAME.opt.hlo on global inputs: every device's results equal XLA's, bit for bit."""
    res = _run(name, "opt.hlo", d)
    meta = _meta(name, d)
    assert res.grid.replicas == meta["replicas"] and res.grid.partitions == meta["partitions"]
    assert res.devices == tuple(range(meta["replicas"] * meta["partitions"]))
    got = _leaves(res.per_device())
    want = _expected(name, "dev_out", d)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        _matches(g, w, TOLERANCES.get(name), f"{name}.opt.hlo result {i}")


@pytest.mark.parametrize("name", NAMES)
def test_partitioned_program_matches_xla_on_every_device(name):
    check_partitioned(name)


# ----------------------------------------------------------------------------- before partitioning

def check_unpartitioned(name: str, d: Path = SPMD):
    """NAME.hlo on global inputs: one global result (Uniform) equal to XLA's within TOLERANCES."""
    meta = _meta(name, d)
    res = _run(name, "hlo", d)
    if meta["kind"] == "replicas":
        # the per-device text XLA compiled with num_replicas: the same program, the same bits
        for i, (g, w) in enumerate(zip(_leaves(res.per_device()), _expected(name, "dev_out", d))):
            _bits_equal(g, w, f"{name}.hlo result {i}")
        return
    from hlo_cli.devices import Uniform
    assert isinstance(res.value, Uniform), f"{name}.hlo: a global result held once, got {type(res.value).__name__}"
    assert res.global_result
    got, want = _leaves(res.value.value), _expected(name, "out", d)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        _matches(g, w, TOLERANCES.get(name), f"{name}.hlo result {i}")


@pytest.mark.parametrize("name", NAMES)
def test_unpartitioned_program_matches_xla(name):
    check_unpartitioned(name)


# ----------------------------------------------------------------------------- through the CLI

def _cli(args):
    from hlo_cli.cli import main
    r = CliRunner().invoke(main, args, catch_exceptions=False)
    assert "Traceback" not in (r.output + (r.stderr if r.stderr_bytes is not None else ""))
    return r


@pytest.mark.parametrize("name", NAMES)
def test_cli_per_device_results(name, tmp_path):
    meta = _meta(name)
    out = tmp_path / "o.npz"
    args = ["run", str(SPMD / f"{name}.opt.hlo"), "--inputs", str(SPMD / f"{name}.inputs.npz"),
            "--output", str(out)]
    if meta["per_device_inputs"]:
        args.append("--per-device")
    r = _cli(args)
    assert r.exit_code == 0, r.output
    got = _npz(out)
    for i, w in enumerate(_expected(name, "dev_out")):
        _matches(got[f"out{i}"], w, TOLERANCES.get(name), f"hlo run {name}.opt.hlo out{i}")


@pytest.mark.parametrize("name", [n for n in NAMES if _meta(n)["kind"] == "jit"])
def test_cli_global_results(name, tmp_path):
    """--output-global reassembles XLA's global results from the devices' tiles by the output
    shardings XLA reports (NAME.json), given with --output-sharding."""
    meta = _meta(name)
    shardings = meta["out_shardings"]
    sh = shardings[0] if len(shardings) == 1 else "{" + ", ".join(shardings) + "}"
    out = tmp_path / "o.npz"
    r = _cli(["run", str(SPMD / f"{name}.opt.hlo"), "--inputs", str(SPMD / f"{name}.inputs.npz"),
              "--output", str(out), "--output-global", "--output-sharding", sh])
    assert r.exit_code == 0, r.output
    got = _npz(out)
    for i, w in enumerate(_expected(name, "out")):
        _matches(got[f"out{i}"], w, TOLERANCES.get(name), f"hlo run {name}.opt.hlo --output-global out{i}")


@pytest.mark.parametrize("name", [n for n in NAMES if _meta(n)["kind"] == "jit"][:3])
def test_cli_unpartitioned_writes_the_global_result(name, tmp_path):
    out = tmp_path / "o.npz"
    r = _cli(["run", str(SPMD / f"{name}.hlo"), "--inputs", str(SPMD / f"{name}.inputs.npz"),
              "--output", str(out)])
    assert r.exit_code == 0, r.output
    got = _npz(out)
    for i, w in enumerate(_expected(name, "out")):
        _matches(got[f"out{i}"], w, TOLERANCES.get(name), f"hlo run {name}.hlo out{i}")


@pytest.mark.parametrize("text", ["hlo", "opt.hlo"])
def test_hlo_check_accepts_every_sample(text):
    """Both texts of every sample are valid modules (XLA made or compiled them)."""
    for name in NAMES:
        r = _cli(["check", str(SPMD / f"{name}.{text}")])
        assert r.exit_code == 0, f"{name}.{text}: {r.output}"
