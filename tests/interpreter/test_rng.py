"""The rng family: rng-bit-generator (bit-exact with XLA CPU), rng (uniform / normal from --seed),
rng-get-and-update-state, against XLA-made goldens (tests/programs/rng) plus unit tests.

What XLA CPU does, read in XLA's prng.cc / rng_bit_generator_expander.cc / rng_state_thunk.cc and
measured (jaxlib 0.10.2), pinned by the programs and the tests below:
- rng_default is Philox4x32-10; states are u64[2] or u64[3] (Philox), u64[2] (ThreeFry), state[0] is
  the key and comes back unchanged;
- ThreeFry2x32-20, 32-bit and narrower: the shape is halved along its first even dimension (else its
  first largest one); element j of that dimension is word j % 2 of counter state[1] + (row-major
  index in the half shape with j // 2); new state[1] += elements of the half shape (a scalar: 1).
  64-bit: one counter per element, lo | hi << 32, state[1] += N;
- Philox: 128-bit counter (low = state[1], high = state[0] for u64[2] / state[2] for u64[3]), one
  block per 4 (32-bit) or 2 (64-bit) elements, words round-robin in row-major order; new counter =
  counter + blocks, of which a u64[2] state keeps only the low half;
- narrower results are the low bits of the u32 result; signed and float results carry the bits of
  the unsigned type (XLA CPU even leaves them typed unsigned after expansion);
- rng-get-and-update-state: a 128-bit counter per instruction from 0x7012395, {low, high}, += delta.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from golden import check_program, programs  # noqa: E402

from hlo_cli.errors import HloEvalError  # noqa: E402
from hlo_cli.interpreter import run  # noqa: E402
from hlo_cli.interpreter.ops.rng import philox4x32, rng_bit_generator, threefry2x32  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("path", programs("rng"), ids=lambda p: p.stem)
def test_program(path):
    check_program(path)


def test_every_rng_opcode_has_a_program():
    names = {p.name.split(".")[0] for p in programs("rng")}
    assert {"rng", "rng-bit-generator", "rng-get-and-update-state"} <= names


# ----------------------------------------------------------------------------- the block functions

def _words(*v):
    return [np.array([x], np.uint32) for x in v]


@pytest.mark.parametrize("ctr, key, want", [
    ((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
    ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
    ((0x243F6A88, 0x85A308D3), (0x13198A2E, 0x03707344), (0xC4923A9C, 0x483DF7A0)),
])
def test_threefry2x32_known_answers(ctr, key, want):
    """Random123's known-answer vectors for Threefry2x32-20."""
    got = threefry2x32(*_words(*ctr), *key)
    assert tuple(int(w[0]) for w in got) == want


@pytest.mark.parametrize("ctr, key, want", [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF, 0xFFFFFFFF), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
])
def test_philox4x32_known_answers(ctr, key, want):
    """Random123's known-answer vectors for Philox4x32-10."""
    got = philox4x32(_words(*ctr), *key)
    assert tuple(int(w[0]) for w in got) == want


# ----------------------------------------------------------------------------- fill order and state

KEY = 0x0123456789ABCDEF


def _tf(counters, key=KEY):
    c = np.asarray(counters, np.uint64)
    x0, x1 = threefry2x32((c & np.uint64(0xFFFFFFFF)).astype(np.uint32), (c >> np.uint64(32)).astype(np.uint32),
                          key & 0xFFFFFFFF, key >> 32)
    return x0, x1


@pytest.mark.parametrize("dims, split", [((3, 4), 1), ((5, 3), 0), ((3, 5), 1), ((3, 3), 0), ((7,), 0),
                                         ((3, 5, 7), 2), ((1, 9), 1)])
def test_threefry_halves_along_first_even_else_first_largest_dim(dims, split):
    state = np.array([KEY, 100], np.uint64)
    new, bits = rng_bit_generator("rng_three_fry", state, "u32", dims)
    half = list(dims)
    half[split] = -(-dims[split] // 2)
    x = _tf(100 + np.arange(int(np.prod(half))))
    idx = np.indices(dims)
    j = idx[split]
    hidx = list(idx)
    hidx[split] = j // 2
    flat = np.ravel_multi_index(hidx, half)
    want = np.where(j % 2 == 0, x[0][flat], x[1][flat])
    np.testing.assert_array_equal(bits, want)
    assert new.tolist() == [KEY, 100 + int(np.prod(half))]


def test_threefry_scalar_and_64_bit():
    state = np.array([KEY, 7], np.uint64)
    new, bits = rng_bit_generator("rng_three_fry", state, "u32", ())
    assert bits.shape == () and int(bits) == int(_tf([7])[0][0]) and new.tolist() == [KEY, 8]
    new, bits = rng_bit_generator("rng_three_fry", state, "u64", (2, 3))
    x0, x1 = _tf(7 + np.arange(6))
    want = (x0.astype(np.uint64) | (x1.astype(np.uint64) << np.uint64(32))).reshape(2, 3)
    np.testing.assert_array_equal(bits, want)
    assert new.tolist() == [KEY, 13]


def test_philox_fills_blocks_round_robin():
    state = np.array([KEY, 2**64 - 1], np.uint64)          # block 1 carries into the high half
    new, bits = rng_bit_generator("rng_philox", state, "u32", (7,))
    lo = np.array([2**64 - 1, 0], np.uint64)
    hi = np.array([KEY, KEY + 1], np.uint64)
    split = [(lo & np.uint64(0xFFFFFFFF)).astype(np.uint32), (lo >> np.uint64(32)).astype(np.uint32),
             (hi & np.uint64(0xFFFFFFFF)).astype(np.uint32), (hi >> np.uint64(32)).astype(np.uint32)]
    w = philox4x32(split, KEY & 0xFFFFFFFF, KEY >> 32)
    np.testing.assert_array_equal(bits, np.stack(w, 1).reshape(-1)[:7])
    assert new.tolist() == [KEY, 1]                          # u64[2]: the carry is dropped
    new, bits64 = rng_bit_generator("rng_philox", state, "u64", (3,))
    want = [w[0].astype(np.uint64) | (w[1].astype(np.uint64) << np.uint64(32)),
            w[2].astype(np.uint64) | (w[3].astype(np.uint64) << np.uint64(32))]
    np.testing.assert_array_equal(bits64, np.stack(want, 1).reshape(-1)[:3])
    assert new.tolist() == [KEY, 1]


def test_philox_three_word_state_keeps_the_carry():
    new, _ = rng_bit_generator("rng_philox", np.array([1, 2**64 - 2, 5], np.uint64), "u32", (9,))
    assert new.tolist() == [1, 1, 6]                         # 3 blocks: low wraps, high + 1
    new, _ = rng_bit_generator("rng_philox", np.array([1, 2**64 - 1, 2**64 - 1], np.uint64), "u64", (2,))
    assert new.tolist() == [1, 0, 0]                         # the 128-bit counter wraps to 0


def test_rng_default_is_philox():
    for state in (np.array([3, 4], np.uint64), np.array([3, 4, 5], np.uint64)):
        a = rng_bit_generator("rng_default", state, "u32", (5, 3))
        b = rng_bit_generator("rng_philox", state, "u32", (5, 3))
        assert all(np.array_equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("alg", ["rng_philox", "rng_three_fry"])
@pytest.mark.parametrize("et, ut, dt", [
    ("s32", "u32", np.int32), ("f32", "u32", np.float32), ("s64", "u64", np.int64), ("f64", "u64", np.float64),
    ("u16", "u32", np.uint16), ("f16", "u32", np.float16), ("bf16", "u32", ml_dtypes.bfloat16),
    ("u8", "u32", np.uint8), ("f8e4m3fn", "u32", ml_dtypes.float8_e4m3fn),
])
def test_other_types_carry_the_unsigned_bits(alg, et, ut, dt):
    state = np.array([11, 12], np.uint64)
    new, bits = rng_bit_generator(alg, state, et, (5, 3))
    new_u, ref = rng_bit_generator(alg, state, ut, (5, 3))
    assert bits.dtype == np.dtype(dt) and bits.shape == (5, 3)
    width = bits.dtype.itemsize * 8
    raw = bits.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[bits.dtype.itemsize])
    np.testing.assert_array_equal(raw, ref.astype(np.uint64) & np.uint64((1 << width) - 1 if width < 64 else 2**64 - 1))
    assert new.tolist() == new_u.tolist()


@pytest.mark.parametrize("et, dt, bits", [("s4", ml_dtypes.int4, 4), ("u4", ml_dtypes.uint4, 4),
                                          ("s2", ml_dtypes.int2, 2), ("f4e2m1fn", ml_dtypes.float4_e2m1fn, 4)])
def test_sub_byte_types_take_the_low_bits(et, dt, bits):
    state = np.array([11, 12], np.uint64)
    _, got = rng_bit_generator("rng_philox", state, et, (9,))
    _, ref = rng_bit_generator("rng_philox", state, "u32", (9,))
    assert got.dtype == np.dtype(dt)
    low = (ref & np.uint32((1 << bits) - 1)).astype(np.int64)
    if et.startswith("s"):
        np.testing.assert_array_equal(got.astype(np.int64), np.where(low >= 1 << (bits - 1), low - (1 << bits), low))
    elif et.startswith("u"):
        np.testing.assert_array_equal(got.astype(np.int64), low)
    else:
        np.testing.assert_array_equal(got.view(np.uint8), low.astype(np.uint8))
    _, scalar = rng_bit_generator("rng_three_fry", state, et, ())
    assert isinstance(scalar, np.ndarray) and scalar.shape == () and scalar.dtype == np.dtype(dt)


def test_bare_bits_result_shape():
    """XLA also accepts a bare bits shape (no new state) and returns the bits."""
    text = ("HloModule m\nENTRY e {\n  s = u64[2] parameter(0)\n"
            "  ROOT r = u32[5] rng-bit-generator(s), algorithm=rng_philox\n}\n")
    got = run(text, np.array([1, 2], np.uint64))
    np.testing.assert_array_equal(got, [2100602697, 2847456232, 2074354647, 800269529, 1828267006])


@pytest.mark.parametrize("alg, state", [
    ("rng_philox", "u64[4]"), ("rng_philox", "u64[1]"), ("rng_three_fry", "u64[3]"),
    ("rng_default", "s64[2]"), ("rng_three_fry", "u32[4]"),
])
def test_states_xla_cpu_cannot_compile_are_refused(alg, state):
    text = (f"HloModule m\nENTRY e {{\n  s = {state} parameter(0)\n"
            f"  ROOT r = ({state}, u32[5]) rng-bit-generator(s), algorithm={alg}\n}}\n")
    n = int(state.split("[")[1][:-1])
    dt = {"u64": np.uint64, "s64": np.int64, "u32": np.uint32}[state[:3]]
    with pytest.raises(HloEvalError, match="state"):
        run(text, np.arange(n, dtype=dt))


def test_rng_bit_generator_is_vectorized():
    state = np.array([5, 6], np.uint64)
    t0 = time.perf_counter()
    for alg in ("rng_philox", "rng_three_fry"):
        for et in ("u32", "u64"):
            rng_bit_generator(alg, state, et, (1000, 1000))
    assert time.perf_counter() - t0 < 5.0


def test_no_overflow_warnings():
    with np.errstate(all="raise"):
        rng_bit_generator("rng_philox", np.array([2**64 - 1] * 3, np.uint64), "u64", (5,))
        rng_bit_generator("rng_three_fry", np.array([2**64 - 1] * 2, np.uint64), "u32", (5,))


# ----------------------------------------------------------------------------- rng

def _rng(dist, et, dims, a, b, seed=0):
    d = ",".join(map(str, dims))
    text = (f"HloModule m\nENTRY e {{\n  a = {et}[] parameter(0)\n  b = {et}[] parameter(1)\n"
            f"  ROOT r = {et}[{d}] rng(a, b), distribution={dist}\n}}\n")
    from hlo_cli.interpreter.values import np_dtype
    dt = np_dtype(et)
    return run(text, np.array(a).astype(dt), np.array(b).astype(dt), seed=seed)


@pytest.mark.parametrize("et", ["f32", "f64", "f16", "bf16", "f8e4m3fn"])
def test_uniform_float_range_and_moments(et):
    x = _rng("rng_uniform", et, (200, 100), 2, 3)
    assert x.shape == (200, 100)
    w = x.astype(np.float64)
    assert w.min() >= 2 and w.max() < 3                      # strictly below b, also after rounding
    spacing = float(ml_dtypes.finfo(x.dtype).eps) * 2        # the grid's step in [2, 3)
    assert abs(w.mean() - (2.5 - spacing / 2)) < 0.02       # values round down onto the grid
    assert abs(w.std() - 12 ** -0.5) < 0.03 + spacing
    if et in ("f32", "f64"):
        assert len(np.unique(w)) > 19000
    if et == "f8e4m3fn":                                     # 2, 2.25, 2.5, 2.75 equally likely
        values, counts = np.unique(w, return_counts=True)
        assert values.tolist() == [2, 2.25, 2.5, 2.75] and counts.min() > 0.23 * w.size


@pytest.mark.parametrize("et", ["s32", "u32", "s64", "u64", "s8", "u8", "s16", "u16", "s4", "u4"])
def test_uniform_int_covers_exactly_a_to_b_minus_1(et):
    a, b = (-3, 4) if et.startswith("s") else (2, 9)
    x = _rng("rng_uniform", et, (500,), a, b).astype(np.int64)
    assert set(np.unique(x).tolist()) == set(range(a, b))
    assert abs(x.mean() - (a + b - 1) / 2) < 0.4


def test_uniform_int_full_64_bit_range():
    x = _rng("rng_uniform", "s64", (1000,), -2**63, 2**63 - 1)
    assert x.dtype == np.int64 and (x < 0).any() and (x > 0).any() and len(np.unique(x)) == 1000
    x = _rng("rng_uniform", "u64", (1000,), 0, 2**64 - 1)
    assert x.dtype == np.uint64 and (x > 2**63).any()


def test_uniform_degenerate_ranges():
    np.testing.assert_array_equal(_rng("rng_uniform", "f32", (4,), 3, 3), np.full(4, 3, np.float32))
    np.testing.assert_array_equal(_rng("rng_uniform", "s32", (4,), -5, -5), np.full(4, -5, np.int32))
    x = _rng("rng_uniform", "f32", (1000,), 3, 1)             # b < a: implementation-defined, in [b, a]
    assert x.min() >= 1 and x.max() <= 3
    x = _rng("rng_uniform", "u8", (1000,), 250, 3)           # the wrapped range 250..255, 0..2
    assert set(np.unique(x).tolist()) == {250, 251, 252, 253, 254, 255, 0, 1, 2}
    assert not _rng("rng_uniform", "pred", (5,), False, True).any()


@pytest.mark.parametrize("et", ["f32", "f64", "f16", "bf16"])
def test_normal_moments(et):
    x = _rng("rng_normal", et, (300, 100), 3, 2).astype(np.float64)
    assert x.shape == (300, 100) and np.isfinite(x).all()
    assert abs(x.mean() - 3) < 0.05 and abs(x.std() - 2) < 0.05
    np.testing.assert_array_equal(_rng("rng_normal", et, (3,), -1.5, 0).astype(np.float64), [-1.5] * 3)


def test_rng_is_deterministic_for_a_seed():
    for dist, et in (("rng_uniform", "f32"), ("rng_uniform", "s32"), ("rng_normal", "f64")):
        a = _rng(dist, et, (50,), 0, 10, seed=7)
        b = _rng(dist, et, (50,), 0, 10, seed=7)
        c = _rng(dist, et, (50,), 0, 10, seed=8)
        np.testing.assert_array_equal(a, b)
        assert not np.array_equal(a, c)


def test_two_rng_instructions_draw_different_values():
    text = ("HloModule m\nENTRY e {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
            "  x = f32[8] rng(a, b), distribution=rng_uniform\n  y = f32[8] rng(a, b), distribution=rng_uniform\n"
            "  ROOT t = (f32[8], f32[8]) tuple(x, y)\n}\n")
    x, y = run(text, np.float32(0), np.float32(1))
    assert not np.array_equal(x, y)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("name", ["rng.uniform", "rng.normal"])
def test_property_programs_hold_for_other_seeds(name, seed):
    from golden import load_golden
    from hlo_cli.parser import parse
    path = ROOT / "tests" / "programs" / "rng" / f"{name}.hlo"
    module = parse(path.read_text(), str(path))
    args, want = load_golden(path, module)
    got = run(module, *args, seed=seed)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g).astype(np.float64), w.astype(np.float64))


# ----------------------------------------------------------------------------- rng-get-and-update-state

_STATE = ("HloModule m\nENTRY e {\n  a = u64[2] rng-get-and-update-state(), delta=5\n"
          "  b = u64[2] rng-get-and-update-state(), delta=-1\n  ROOT t = (u64[2], u64[2]) tuple(a, b)\n}\n")


def test_rng_state_starts_at_xla_cpus_initial_value_in_every_run():
    for _ in range(2):
        a, b = run(_STATE)
        assert a.tolist() == [0x7012395, 0] and b.tolist() == [0x7012395, 0]


def test_rng_state_counts_per_instruction_with_128_bit_carry():
    from hlo_cli.interpreter import EvalContext
    from hlo_cli.parser import parse
    module = parse(_STATE)
    ec = EvalContext(module)
    ec.call(module.entry, [])
    a, b = ec.call(module.entry, [])
    assert a.tolist() == [0x7012395 + 5, 0] and b.tolist() == [0x7012395 - 1, 0]
    big = parse("HloModule m\nENTRY e {\n  ROOT a = u64[2] rng-get-and-update-state(), "
                "delta=9223372036854775807\n}\n")
    ec = EvalContext(big)
    values = [ec.call(big.entry, []).tolist() for _ in range(4)]
    assert values[3] == [(0x7012395 + 3 * (2**63 - 1)) % 2**64, 1]


# ----------------------------------------------------------------------------- the JAX sample

def test_jax_rng_sample():
    """samples/jax/rng.hlo: jax.random with threefry2x32, rbg and unsafe_rbg keys (the last two lower
    to rng-bit-generator, algorithm=rng_default).  Every integer output (the rbg bits, key data,
    threefry bits and splits) is bit-exact; the float outputs go through uniform -> erf_inv and are
    compared within 1 ulp, since log-plus-one (elementwise family) may differ from XLA by 1 ulp."""
    import json
    base = ROOT / "samples" / "jax"
    manifest = json.loads((base / "MANIFEST.json").read_text())["cases"]["rng"]
    inputs = np.load(base / "rng.inputs.npz")
    expected = np.load(base / "rng.expected.npz")
    rbg_values = []

    def hook(ev):
        if ev.instruction.opcode == "rng-bit-generator":
            rbg_values.append(ev.value)

    # check_values=False: the shape checks of other families' rules are theirs to test
    got = run((base / "rng.hlo").read_text(), inputs["arg0"], check_values=False, hook=hook)
    assert len(rbg_values) == 4
    for value in rbg_values:
        assert value[0].dtype == np.uint64 and value[0].shape == (2,)
    for k, out in enumerate(manifest["outputs"]):
        g, w = np.asarray(got[k]), expected[out["key"]]
        assert g.shape == w.shape, out["path"]
        if w.dtype.kind in "ui":
            np.testing.assert_array_equal(g, w, err_msg=out["path"])
        else:
            np.testing.assert_allclose(g, w, rtol=2.5e-7, atol=0, err_msg=out["path"])
