"""XLA GPU's sort and top-k calls (CUB radix sort, __gpu$TopK), the TPU's PartialReduce, and the
H200's sort_topk goldens."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from hlo_cli.errors import HloError, HloEvalError
from hlo_cli.interpreter import run

from .gpu_cases import assert_refused, compare, flat, load

ET = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64", np.dtype(np.int32): "s32",
      np.dtype(np.uint32): "u32", np.dtype(np.int16): "s16", np.dtype(np.float16): "f16"}


def cub(keys, values=None, descending=False, target="__cub$DeviceRadixSort"):
    kt = f"{ET[keys.dtype]}[{','.join(map(str, keys.shape))}]"
    ops = [f"  k = {kt} parameter(0)"]
    res = [kt]
    args = [keys]
    if values is not None:
        vt = f"{ET[values.dtype]}[{','.join(map(str, values.shape))}]"
        ops.append(f"  v = {vt} parameter(1)")
        res.append(vt)
        args.append(values)
    res.append("u8[64]")
    names = "k, v" if values is not None else "k"
    text = (f"HloModule m\n\nENTRY e {{\n" + "\n".join(ops) + f"\n  ROOT s = ({', '.join(res)}) custom-call({names}), "
            f"custom_call_target=\"{target}\", backend_config={{\"descending\":{str(descending).lower()}}}\n}}\n")
    return run(text, *args)


def radix_order(x, descending):
    """The order cub::DeviceRadixSort gives, written out by cases: NaNs by sign at the ends, -0 == +0,
    stable."""
    x = np.asarray(x)
    if x.dtype.kind != "f":
        key = x.astype(np.float64)
        cls = np.zeros(x.shape)
    else:
        neg = np.signbit(x)
        nan = np.isnan(x)
        cls = np.where(nan & neg, -1, np.where(nan, 1, 0))       # -NaN first, +NaN last
        key = np.where(nan, 0.0, x.astype(np.float64)) + 0.0      # -0 -> +0
    if descending:
        cls, key = -cls, -key
    idx = np.broadcast_to(np.arange(x.shape[-1]), x.shape)
    return np.lexsort((idx, key, cls), axis=-1)


FLOATS = hnp.arrays(np.float32, st.tuples(st.integers(1, 3), st.integers(1, 9)),
                    elements=st.sampled_from([0.0, -0.0, 1.0, -1.0, 2.5, np.inf, -np.inf, np.nan, -np.nan, 1e-30]))


@settings(max_examples=40, deadline=None)
@given(FLOATS, st.booleans(), st.sampled_from(["__cub$DeviceRadixSort", "xla.gpu.ext.cub_sort_pairs"]))
def test_radix_sort_orders_floats_like_cub(x, desc, target):
    vals = np.arange(x.size, dtype=np.int32).reshape(x.shape)
    k, v, scratch = cub(x, vals, desc, target)
    order = radix_order(x, desc)
    np.testing.assert_array_equal(v, np.take_along_axis(vals, order, -1))
    np.testing.assert_array_equal(k.view(np.uint32), np.take_along_axis(x, order, -1).view(np.uint32))
    assert scratch.dtype == np.uint8 and scratch.shape == (64,)


@settings(max_examples=25, deadline=None)
@given(hnp.arrays(st.sampled_from([np.int32, np.uint32, np.int16]), st.tuples(st.integers(1, 3), st.integers(1, 12)),
                  elements=st.integers(-5, 5).map(abs)), st.booleans())
def test_radix_sort_keys_only_integers(x, desc):
    (k, _) = cub(x, None, desc, "xla.gpu.ext.cub_sort_keys")
    want = np.sort(x, axis=-1)
    np.testing.assert_array_equal(k, want[..., ::-1] if desc else want)


def test_radix_sort_signed_integers_and_ties_keep_input_order():
    x = np.array([[3, -1, 3, -7, 0, -1]], np.int32)
    v = np.arange(6, dtype=np.int32)[None]
    k, vv, _ = cub(x, v, True)
    np.testing.assert_array_equal(k, [[3, 3, 0, -1, -1, -7]])
    np.testing.assert_array_equal(vv, [[0, 2, 4, 1, 5, 3]])


def test_jax_sort_through_the_numpy_order_key_matches_xla_cpu():
    """SortRewriter's rewrite of jnp.sort: u32 keys made from the floats (zeros and NaNs canonical,
    sign flipped / bits inverted), sorted as pairs with the floats: the same as XLA CPU's sort."""
    jax = pytest.importorskip("jax")
    x = np.array([[2.0, -0.0, np.nan, 0.0, -np.inf, 1.0, -np.nan, -3.0]], np.float32)
    with jax.default_device(jax.devices("cpu")[0]):
        want = np.asarray(jax.numpy.sort(x, axis=-1))
    canon = np.where(np.isnan(x), np.float32(np.nan), np.where(x == 0, np.float32(0), x))
    bits = canon.view(np.uint32)
    key = np.where(canon < 0, ~bits, bits ^ np.uint32(0x80000000)).astype(np.uint32)
    _, got, _ = cub(key, x)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[~np.isnan(got)], want[~np.isnan(want)])


def topk_module(shape, k, dt="f32"):
    dims = ",".join(map(str, shape))
    kd = ",".join(map(str, shape[:-1] + (k,)))
    return (f"HloModule m\n\ncmp {{\n  a = {dt}[] parameter(0)\n  b = {dt}[] parameter(1)\n  ROOT g = pred[] "
            f"compare(a, b), direction=GT\n}}\n\nENTRY e {{\n  x = {dt}[{dims}] parameter(0)\n  ROOT t = ({dt}[{kd}], "
            f"s32[{kd}]) custom-call(x), custom_call_target=\"__gpu$TopK\", to_apply=cmp, "
            f"api_version=API_VERSION_TYPED_FFI\n}}\n")


@pytest.mark.slow
@settings(max_examples=15, deadline=None)
@given(hnp.arrays(np.float32, st.tuples(st.integers(1, 3), st.integers(4, 40)),
                  elements=st.sampled_from([0.0, 1.0, -1.0, 2.0, 3.5, -np.inf, np.inf])), st.integers(1, 4))
def test_gpu_topk_matches_xla_cpu_top_k(x, k):
    """Without NaN and -0, XLA GPU's kernel and lax.top_k on XLA CPU agree: descending, ties to the
    lower index."""
    jax = pytest.importorskip("jax")
    with jax.default_device(jax.devices("cpu")[0]):
        wv, wi = (np.asarray(v) for v in jax.lax.top_k(x, k))
    v, i = run(topk_module(x.shape, k), x)
    np.testing.assert_array_equal(i, wi)
    np.testing.assert_array_equal(v, wv)


def test_gpu_topk_takes_minus_zero_equal_to_zero():
    """The GPU kernel compares with ==, so -0 and +0 tie and the lower index wins; XLA CPU's total
    order puts +0 first."""
    x = np.array([[-0.0, 0.0, -1.0]], np.float32)
    v, i = run(topk_module(x.shape, 2), x)
    np.testing.assert_array_equal(i, [[0, 1]])
    assert np.signbit(v[0, 0]) and not np.signbit(v[0, 1])


def test_gpu_topk_puts_a_nan_first():
    x = np.array([[1, np.nan, 3, 2]], np.float32)
    v, i = run(topk_module(x.shape, 2), x)
    np.testing.assert_array_equal(i, [[1, 2]])
    assert np.isnan(v[0, 0]) and v[0, 1] == 3


def test_gpu_topk_rank_1_and_bf16():
    import ml_dtypes
    x = np.array([0.5, 4, -1, 4, 2], ml_dtypes.bfloat16)
    text = topk_module((5,), 3, "bf16")
    v, i = run(text, x)
    np.testing.assert_array_equal(i, [1, 3, 4])
    assert v.dtype == ml_dtypes.bfloat16


@pytest.mark.parametrize("text, fragment", [
    ("  k = f32[4] parameter(0)\n  ROOT s = (f32[4], u8[4]) custom-call(k), custom_call_target=\"__cub$DeviceRadixSort\", "
     "backend_config={\"descending\":1}", "'descending' must be a bool"),
    ("  k = f32[4] parameter(0)\n  ROOT s = (f32[3], u8[4]) custom-call(k), custom_call_target=\"__cub$DeviceRadixSort\"",
     "result 0 must be f32[4] like operand 0"),
    ("  k = f32[4] parameter(0)\n  ROOT s = (f32[4], f32[4]) custom-call(k), custom_call_target=\"xla.gpu.ext.cub_sort_keys\"",
     "the last result must be the u8[n] scratch buffer"),
    ("  k = pred[4] parameter(0)\n  ROOT s = (pred[4], u8[4]) custom-call(k), custom_call_target=\"xla.gpu.ext.cub_sort_keys\"",
     "keys must be integers or floats"),
    ("  x = f32[2,2,8] parameter(0)\n  ROOT t = (f32[2,2,2], s32[2,2,2]) custom-call(x), custom_call_target=\"__gpu$TopK\"",
     "takes an f32 or bf16 array of rank 1 or 2"),
    ("  x = f32[8] parameter(0)\n  ROOT t = (f32[9], s32[9]) custom-call(x), custom_call_target=\"__gpu$TopK\"",
     "k <= 8"),
])
def test_bad_sort_and_topk_calls_are_located_errors(text, fragment):
    module = f"HloModule m\n\nENTRY e {{\n{text}\n}}\n"
    dt = np.bool_ if "pred" in text else np.float32
    shape = tuple(int(d) for d in text.split("[", 1)[1].split("]", 1)[0].split(","))
    assert_refused(module, [np.zeros(shape, dt)], fragment, 5)


def partial_reduce(x, L, r):
    n = x.shape[-1]
    text = (f"HloModule m\n\ncmp {{\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  c = s32[] parameter(2)\n"
            f"  d = s32[] parameter(3)\n  ROOT g = pred[] compare(a, b), direction=GT\n}}\n\nENTRY e {{\n"
            f"  x = f32[{x.shape[0]},{n}] parameter(0)\n  i = s32[{x.shape[0]},{n}] iota(), iota_dimension=1\n"
            f"  ninf = f32[] constant(-inf)\n  m1 = s32[] constant(-1)\n  ROOT p = (f32[{x.shape[0]},{L}], "
            f"s32[{x.shape[0]},{L}]) custom-call(x, i, ninf, m1), custom_call_target=\"PartialReduce\", to_apply=cmp, "
            f"backend_config=\"{{\\\"log2_reduction\\\": {r}, \\\"reduction_dim\\\": 1, \\\"to_apply_type\\\": "
            f"\\\"comparator\\\", \\\"top_k\\\": 2, \\\"recall_target\\\": 0.950000}}\"\n}}\n")
    return run(text, x)


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 8), st.integers(0, 3), st.integers(0, 2**31 - 1))
def test_partial_reduce_keeps_the_best_of_each_bin(L, r, seed):
    rng = np.random.default_rng(seed)
    n = max(1, L * (1 << r) - int(rng.integers(0, L)))
    x = rng.permutation(n * 2).reshape(2, n).astype(np.float32)
    v, i = partial_reduce(x, L, r)
    for j in range(L):
        members = x[:, j::L]
        if members.shape[1]:
            np.testing.assert_array_equal(v[:, j], members.max(axis=1))
            np.testing.assert_array_equal(x[np.arange(2), i[:, j]], v[:, j])
        else:
            assert np.all(v[:, j] == -np.inf) and np.all(i[:, j] == -1)


def test_partial_reduce_that_cannot_cover_the_input_is_refused():
    with pytest.raises(HloEvalError, match=r"L \* 2\^1 >= 9"):
        partial_reduce(np.zeros((2, 9), np.float32), 4, 1)


# ------------------------------------------------------------------------------------------ goldens

def test_sort_topk_after_optimization_matches_the_gpu():
    spec, text, args, want = load("sort_topk", "post")
    compare(flat(run(text, *args)), want, spec)


def test_sort_topk_before_optimization_matches_the_gpu():
    """JAX 0.11.2's text writes compare's order=TOTAL and topk's is_stable (the newest XLA's text, a
    separate change); until the parser reads them, reading must fail exactly there."""
    spec, text, args, want = load("sort_topk", "pre")
    try:
        outs = run(text, *args)
    except HloError as e:
        assert "is_stable" in str(e) or "order" in str(e), str(e)
        return
    compare(flat(outs), want, spec)


TPU = Path(__file__).resolve().parents[1] / "data" / "tpu"


def _bins(x, L, best):
    """The model: element i of a row in bin i mod L; each bin keeps its best (lowest index on ties)."""
    n = x.shape[-1]
    idx = np.arange(n).reshape(-1, L)                         # (2^r, L)
    vals = x[:, idx]                                          # (rows, 2^r, L)
    pick = best(vals, axis=1)
    return np.take_along_axis(vals, pick[:, None, :], 1)[:, 0], idx[pick, np.arange(L)]


def test_tpu_approx_max_k_with_aggregation():
    """jax.lax.approx_max_k(x, 8, recall_target=0.9) lowered for a TPU (JAX 0.10.2,
    lowering_platforms=('tpu',)): PartialReduce to 128 bins (log2_reduction 5), then sort + slice."""
    text = (TPU / "approx_max_k_aggregate.hlo").read_text()
    assert '"log2_reduction": 5' in text and "PartialReduce" in text
    x = np.random.default_rng(0).permutation(4 * 4096).reshape(4, 4096).astype(np.float32)
    v, i = run(text, x)
    bv, _ = _bins(x, 128, np.argmax)
    np.testing.assert_array_equal(v, -np.sort(-bv, axis=1)[:, :8])
    np.testing.assert_array_equal(np.take_along_axis(x, i, 1), v)
    exact = -np.sort(-x, axis=1)[:, :8]
    recall = np.mean([len(np.intersect1d(a, b)) / 8 for a, b in zip(v, exact)])
    assert recall >= 0.75                                      # the target is 0.9 in expectation


def test_tpu_approx_min_k_without_aggregation_returns_the_bins():
    """approx_min_k(x, 8, recall_target=0.95, aggregate_to_topk=False) for a TPU: the 256 bin winners
    (log2_reduction 4) as they are, with the LT comparator."""
    text = (TPU / "approx_min_k_partial.hlo").read_text()
    x = np.random.default_rng(1).standard_normal((4, 4096)).astype(np.float32)
    v, i = run(text, x)
    bv, bi = _bins(x, 256, np.argmin)
    np.testing.assert_array_equal(v, bv)
    np.testing.assert_array_equal(i, np.broadcast_to(bi, i.shape))


def test_hlo_run_cli_on_the_gpu_text_matches_the_gpu():
    from click.testing import CliRunner

    from hlo_cli.cli import main

    from .gpu_cases import CASES
    r = CliRunner().invoke(main, ["run", str(CASES / "sort_topk.post.hlo"), "--inputs", str(CASES / "sort_topk.inputs.npz"),
                                  "--expect", str(CASES / "sort_topk.expected.npz"), "--rtol", "1e-4", "--atol", "1e-4"])
    assert r.exit_code == 0, r.output
    assert "Traceback" not in r.output


def cub_scan_module(shape, layout, row, col, extra=""):
    dims = ",".join(map(str, shape))
    lay = ",".join(map(str, layout))
    return (f"HloModule m\n\nENTRY e {{\n  x = f32[{dims}]{{{lay}}} parameter(0)\n  ROOT s = (f32[{dims}]{{{lay}}}, u8[16]{{0}}) "
            f"custom-call(x), custom_call_target=\"xla.gpu.ext.cub_scan\", backend_config={{\"vector_length\":\"1\","
            f"\"row_length\":\"{row}\",\"column_length\":\"{col}\",\"kind\":\"SUM\"{extra}}}\n}}\n")


@pytest.mark.parametrize("shape, layout, dim", [((3, 5), (1, 0), 1), ((3, 5), (0, 1), 0), ((2, 3, 4), (2, 1, 0), 2)])
def test_cub_scan_sums_along_the_minor_dimension(shape, layout, dim):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    row = shape[dim]
    y, scratch = run(cub_scan_module(shape, layout, row, x.size // row), x)
    np.testing.assert_allclose(y, np.cumsum(x, axis=dim), rtol=1e-6, atol=1e-6)
    assert scratch.dtype == np.uint8


def test_cub_scan_refuses_what_its_kernel_refuses():
    x = np.zeros((3, 5), np.float32)
    with pytest.raises(HloEvalError, match="is_reverse"):
        run(cub_scan_module((3, 5), (1, 0), 5, 3, ',"is_reverse":true'), x)
    with pytest.raises(HloEvalError, match="must describe rows along the minor-most dimension"):
        run(cub_scan_module((3, 5), (1, 0), 3, 5), x)
