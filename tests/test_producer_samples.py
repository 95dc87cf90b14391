"""Modules from producers other than JAX, run by hlo against what XLA CPU computed for them.

samples/tensorflow/ (``tf.function(jit_compile=True)``, Keras 3) and samples/torch_xla/ (PyTorch/XLA
on its CPU device) hold, per case, XLA's own dumps of the producer's module before and after
optimization, the inputs the producer passed and the outputs its XLA CPU run returned
(scripts/gen_producer_samples.py wrote them; nothing here needs TensorFlow, torch or JAX).  These
modules differ from JAX's in naming (``XLA_Args``/``XLA_Retvals``, ``IrToHlo``/``SyncTensorsGraph``),
custom calls (TensorFlow's ``Qr`` and ``ProductOfElementaryHouseholderReflectors`` for XLA's
expanders), idioms (resource variables as parameters and extra outputs, TensorList loops,
``rng_default`` bit generators seeded by a parameter, transposed result layouts) and in the XLA
build that ran them.

Every output is compared bit for bit unless TOLERANCES gives its case a tolerance, with the reason
and the measurement (largest |ours - producer| over the .hlo and .opt.hlo runs; the tolerances are
about 2-4x that).  The producers' XLA builds are not JAX's: the generator ran every
before-optimization text through JAX's XLA as well (MANIFEST.json "xla_check"), and for the float
cases below XLA's own builds disagree with each other by as much as we disagree with them.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from hlo_cli.checker import check_module
from hlo_cli.interpreter import run
from hlo_cli.interpreter.values import leaves
from hlo_cli import parse_file
from test_samples_run import assert_matches_xla

ROOT = Path(__file__).resolve().parent.parent
PRODUCERS = ("tensorflow", "torch_xla")
MANIFESTS = {p: json.loads((ROOT / "samples" / p / "MANIFEST.json").read_text()) for p in PRODUCERS}

_DOT = ("dot products, convolutions and reductions: XLA CPU accumulates in its own blocked order, NumPy in "
        "another, so float sums differ in the last bits")
_TRANSCENDENTAL = "exp/log/tanh/logistic/rsqrt/erf: XLA CPU's own approximations, within a few ulp"
_OTHER_XLA = ("the producer's XLA build is not JAX's 0.10.2 and itself differs from JAX's XLA on this module "
              "by up to 1.8e-7 (MANIFEST xla_check)")

# (producer, case) -> [(output path regex, rtol, atol, reason)]; outputs no entry matches are exact.
# Comments: what was measured (x86-64), the largest rtol needed at the atol given.
TOLERANCES: dict[tuple[str, str], list[tuple[str, float, float, str]]] = {
    # conv, batch norm, softmax cross-entropy, Adam: needed rtol 2.1e-6 at atol 1e-7 (logit [0,2] = 0.064
    # off by 2.3e-7; logits |x| <= 2.3). Its FMAs are XLA's (test_fma_contraction's Keras test: with
    # XLA's convolutions, dots and reduces every result is bit-equal); 7.4e-7 before them, by chance
    ("tensorflow", "keras_train_step"): [(r".*", 5e-6, 1e-7, f"{_DOT}; {_TRANSCENDENTAL}")],
    # LSTM cells (logistic, tanh) over 5 steps and their gradients: needed 7.8e-7 at atol 3e-8, 0 at 1e-7
    ("tensorflow", "lstm_train_step"): [(r".*", 2e-6, 3e-8, f"{_DOT}, through the recurrence; {_TRANSCENDENTAL}")],
    # Householder QR (TensorFlow's Qr custom call, expanded), Cholesky, triangular solves, matmuls:
    # needed 5.1e-8 at atol 3e-7, 4e-6 at atol 1e-7 (Q's entries near 0); XLA's builds differ by 2.4e-7
    ("tensorflow", "linalg"): [(r".*", 1e-6, 3e-7, f"{_DOT}: the factorizations are loops of dots and "
                                                   f"reductions in HLO")],
    # Jacobi eigh and SVD (while loops in HLO), logdet, inverse, solve, lstsq, expm: logdet |x| 7.7 off
    # by 4.3e-6, needed 6.3e-7 at atol 3e-7; XLA's builds differ by 2.8e-7 relative
    ("tensorflow", "linalg_decompositions"): [(r".*", 2e-6, 3e-7, f"{_DOT}, iterated by the decompositions' "
                                                                  f"loops")],
    ("tensorflow", "gather_scatter_sort"): [],
    # the samplers' bits and uniform floats are exact; normal goes through log/sqrt: 1 ulp (9.6e-8 at 0)
    ("tensorflow", "stateless_rng"): [(r"normal", 3e-7, 0.0, f"{_TRANSCENDENTAL} (the normal sampler)")],
    ("tensorflow", "while_loop"): [],
    # strided, dilated, depthwise and transposed convolutions, pools, resize and their gradients: the
    # filter gradient (|x| up to 170) sums 100+ products, needed 2.2e-6 at atol 1e-6
    ("tensorflow", "conv_pool_grads"): [(r".*", 1e-5, 1e-6, f"{_DOT}; {_TRANSCENDENTAL} (sin)")],
    # special functions (lgamma, digamma, bessel_i0e: log/exp inside TensorFlow's expansions; lgamma
    # near its zeros keeps only absolute accuracy: 7.2e-7 at |x| ~ 0.02), FFTs (needed 4.8e-8 at atol
    # 1e-7), complex64 exp and division (1.7e-8 at 1e-7), f64 log1p*expm1 (1 ulp, 3.9e-16); integer,
    # f16, rounding, bitcast, erfinv, logsumexp and cumprod results are exact
    ("tensorflow", "math_dtypes"): [
        (r"lgamma|digamma|bessel_i0e", 5e-7, 1e-6, f"{_TRANSCENDENTAL} (inside the special functions)"),
        (r"fft", 1e-6, 3e-7, "FFT: XLA CPU's DUCC and NumPy's pocketfft order their butterflies differently"),
        (r"^\['c64'\]$", 1e-6, 1e-7, f"{_TRANSCENDENTAL} (complex exp); complex division"),
        (r"^\['f64'\]$", 1e-15, 0.0, f"{_TRANSCENDENTAL} (f64 log1p, expm1)"),
    ],
    # bounded dynamic shapes (boolean_mask, where, unique): exact
    ("tensorflow", "dynamic_shapes"): [],
    # mixed_bfloat16: the loss and the logits needed 1.3e-8 at atol 1e-7; the updated variables and
    # Adam moments 5.6e-9 absolute (bf16 ops whose f32 converts get XLA CPU's unrounded f32 value:
    # interpreter/excess_precision.py; without it they were off by up to 2.3x relative)
    ("tensorflow", "keras_bf16_train_step"): [
        (r"^\[[01]\]$", 2e-6, 1e-7, f"{_DOT}; {_TRANSCENDENTAL} (erfc of GELU, softmax)"),
        (r"^variable ", 1e-6, 1e-7, f"{_DOT}; {_TRANSCENDENTAL} (Adam on f32 values of bf16 gradients)"),
    ],
    # GELU (erf), layer norm, cross-entropy, SGD momentum: needed 1.9e-7 at atol 1e-7
    ("torch_xla", "mlp_train_step"): [(r".*", 1e-6, 1e-7, f"{_DOT}; {_TRANSCENDENTAL}; {_OTHER_XLA}")],
    # conv, batch norm, max pool, Adam: needed 1.6e-7 at atol 1e-7
    ("torch_xla", "conv_train_step"): [(r".*", 1e-6, 1e-7, f"{_DOT}; {_TRANSCENDENTAL}; {_OTHER_XLA}")],
    ("torch_xla", "gather_scatter_sort"): [],
    # pools, interpolation, embedding and their gradients, bf16 matmul/softmax/layer norm returned as
    # f32, integer ops (exact): needed 2.9e-7 at atol 1e-7 (the loss, |x| ~ 400); the bf16 results go
    # through f32 as XLA CPU computes them (XLA's two builds agree to 1.2e-7)
    ("torch_xla", "pool_embed_bf16"): [(r"^(loss|max_pool|avg_pool|interpolate|grad_|bf16_)", 1e-6, 1e-7,
                                        f"{_DOT}; {_TRANSCENDENTAL}; {_OTHER_XLA}")],
    # bounded dynamic shapes, int64 division/remainder, bitwise, f16 and integer cumsum exact; complex64
    # exp and division 1 ulp (2.3e-8 relative at |x| ~ 1.8)
    ("torch_xla", "dynamic_dtypes"): [(r"^c64$", 2e-7, 0.0, f"{_TRANSCENDENTAL} (complex exp); complex division")],
    # rand, randint, bernoulli, dropout exact; randn (Box-Muller: log, sqrt, cos) 1 ulp (9.4e-8 at 0)
    ("torch_xla", "random_ops"): [(r"^randn$", 3e-7, 0.0, f"{_TRANSCENDENTAL} (Box-Muller)")],
}


def _cases():
    return [(p, c) for p in PRODUCERS for c in MANIFESTS[p]["cases"]]


def _samples():
    return [(p, c, s) for p, c in _cases() for s in (".hlo", ".opt.hlo")]


def _id(x):
    return f"{x[0]}/{x[1]}{x[2]}" if len(x) == 3 else f"{x[0]}/{x[1]}"


def _dir(producer: str) -> Path:
    return ROOT / "samples" / producer


def _tolerance(producer: str, case: str, path: str):
    for pattern, rtol, atol, reason in TOLERANCES.get((producer, case), []):
        if re.search(pattern, path):
            return rtol, atol, reason
    return None


def test_every_case_is_complete():
    assert set(TOLERANCES) == set(_cases()), "every case needs an entry in TOLERANCES (possibly empty)"
    for producer, case in _cases():
        meta = MANIFESTS[producer]["cases"][case]
        for name in meta["files"].values():
            assert (_dir(producer) / name).is_file(), f"{producer}/{name} is missing"
        for pattern, rtol, atol, reason in TOLERANCES[(producer, case)]:
            assert any(re.search(pattern, o["path"]) for o in meta["outputs"]), f"{case}: {pattern!r} matches nothing"
            assert 0 <= rtol <= 1e-5 and (0 <= atol <= 1e-6 or "bfloat16" in reason) and reason
    on_disk = {(p, f.name.split(".")[0]) for p in PRODUCERS for f in _dir(p).glob("*.hlo")}
    assert on_disk == set(_cases()), "samples and MANIFEST.json disagree"


@pytest.mark.parametrize("sample", _samples(), ids=_id)
def test_sample_checks_clean(sample):
    producer, case, suffix = sample
    path = _dir(producer) / f"{case}{suffix}"
    text = path.read_text()
    module = parse_file(str(path), use_cache=False)
    errors = [d for d in check_module(module, text) if d.severity == "error"]
    assert not errors, "\n".join(d.format() for d in errors)


def _run_case(producer: str, case: str, module, what: str):
    meta = MANIFESTS[producer]["cases"][case]
    params = module.entry_computation.parameters
    assert len(params) == len(meta["parameters"]), f"{what}: {len(params)} parameters"
    with np.load(_dir(producer) / meta["files"]["inputs"]) as z:
        args = [z[f"arg{k}"] for k in range(len(params))]
    outs = [np.asarray(o) for o in leaves(run(module, *args))]
    with np.load(_dir(producer) / meta["files"]["expected"]) as z:
        expected = [z[f"out{k}"] for k in range(len(meta["outputs"]))]
    assert len(outs) == len(expected), f"{what}: {len(outs)} results, the producer returned {len(expected)}"
    failures = []
    for k, (ours, xla, out) in enumerate(zip(outs, expected, meta["outputs"])):
        try:
            assert_matches_xla(ours, xla, _tolerance(producer, case, out["path"]),
                               f"{what} out{k} {out['path']} ({out['dtype']}{out['shape']})")
        except AssertionError as e:
            failures.append(str(e).strip())
    assert not failures, f"{len(failures)} of {len(outs)} outputs differ:\n" + "\n".join(failures)


@pytest.mark.parametrize("sample", _samples(), ids=_id)
def test_sample_matches_producer(sample):
    producer, case, suffix = sample
    path = _dir(producer) / f"{case}{suffix}"
    _run_case(producer, case, parse_file(str(path), use_cache=False), f"{producer}/{path.name}")


def _saved_graphs():
    return [(p, c) for p, c in _cases() if "graphs" in MANIFESTS[p]["cases"][c]["files"]]


@pytest.mark.parametrize("case", _saved_graphs(), ids=_id)
def test_saved_graphs_file(case):
    """PyTorch/XLA's XLA_SAVE_TENSORS_FILE (format hlo) as torch_xla writes it: several modules with
    frames, hashes and a 'Graph Hash:' line around them; each checks clean, and the first is the
    step the case dumped, so it reproduces the case's outputs from the case's inputs."""
    from hlo_cli.sources import parse_module, read_modules
    producer, name = case
    path = _dir(producer) / MANIFESTS[producer]["cases"][name]["files"]["graphs"]
    fm = read_modules(str(path))
    assert len(fm.modules) >= 2
    modules = [parse_module(src, use_cache=False) for src in fm.modules]
    for module, src in zip(modules, fm.modules):
        errors = [d for d in check_module(module, src.text) if d.severity == "error"]
        assert not errors, "\n".join(d.format() for d in errors)
    _run_case(producer, name, modules[0], f"{producer}/{path.name} module 0")


def _exact_samples():
    """Samples every output of which is compared bit for bit: the CLI must agree at rtol = atol = 0."""
    return [(p, c, s) for p, c, s in _samples() if not TOLERANCES[(p, c)]]


@pytest.mark.parametrize("sample", _exact_samples(), ids=_id)
def test_cli_run_expect(sample):
    """`hlo run --inputs --expect` as a user runs a sample (bounded dynamic results included)."""
    from click.testing import CliRunner

    from hlo_cli.cli import main
    producer, case, suffix = sample
    d = _dir(producer)
    r = CliRunner().invoke(main, ["run", str(d / f"{case}{suffix}"), "--inputs", str(d / f"{case}.inputs.npz"),
                                  "--expect", str(d / f"{case}.expected.npz"), "--rtol", "0", "--atol", "0"])
    assert r.exit_code == 0, r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr
