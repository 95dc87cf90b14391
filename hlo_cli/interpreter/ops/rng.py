"""Random numbers: rng-bit-generator (bit-exact with XLA CPU), rng (uniform / normal, seeded from
the run's --seed), rng-get-and-update-state (XLA CPU's per-instruction counter).

What XLA CPU computes, read in XLA's ``prng.cc`` / ``rng_bit_generator_expander.cc`` /
``rng_state_thunk.cc`` (hlo_cli/SEMANTICS.md, "Random numbers"):

* ``rng_default`` is Philox4x32-10 on CPU (the expander's default algorithm).
* The state is ``u64[2]`` or ``u64[3]`` (Philox / default) and ``u64[2]`` only (ThreeFry); any other
  state shape or element type fails to compile.  ``state[0]`` is the key and is returned unchanged.
* ThreeFry2x32-20: counter ``c = state[1] + i`` (u64, wrapping), input words ``(lo32(c), hi32(c))``,
  key words ``(lo32(key), hi32(key))``.  32-bit (and narrower) results: the shape is split in
  halves along the first even dimension (else the largest, first on ties; a scalar is a [1] half);
  element ``j`` along that dimension is output word ``j % 2`` of counter ``j // 2`` (row-major
  counters over the half shape); the new ``state[1]`` is ``state[1] + elements of the half shape``.
  64-bit results: one counter per element (row-major), value ``lo | hi << 32``, new state + N.
* Philox4x32-10: key words ``(lo32(key), hi32(key))``; a 128-bit counter whose low u64 is
  ``state[1]`` and whose high u64 is ``state[0]`` for a ``u64[2]`` state (the key doubles as the
  high half) or ``state[2]`` for ``u64[3]``.  Block ``i`` is counter + i (carry into the high half);
  its four output words fill the result round-robin in row-major order (32-bit: words 0,1,2,3;
  64-bit: ``w0 | w1 << 32`` then ``w2 | w3 << 32``), the tail of the last block dropped.  Blocks:
  ``ceil(N / 4)`` (32-bit), ``ceil(N / 2)`` (64-bit).  New state: counter + blocks (u128); a
  ``u64[2]`` state keeps only the new low half (the carry is lost), ``u64[3]`` keeps both.
* Results narrower than 32 bits are the low bits of the 32-bit result of the same shape (same
  counters, same state update).  Signed and floating-point result types get the same bits as
  the unsigned type of their width.  (XLA CPU itself leaves the unsigned type in place after
  expansion, so its later ops read such a result as an unsigned integer — e.g. converting an
  ``f16`` result to ``f32`` gives 42825.0; we keep the declared type, the bits are identical.)
* rng-get-and-update-state: each instruction has its own 128-bit counter starting at 0x7012395;
  each execution returns ``[low64, high64]`` of it and then adds ``delta`` (XLA CPU's thunk).  One
  exception is not modelled: instructions XLA CPU compiles into a single LLVM module (e.g. a while
  loop it wraps in a small ``call``) share one module-wide counter there, so two of them in one loop
  body interleave their counts on XLA and do not here.
* rng: XLA's values are implementation-defined (and differ between processes), so they come from
  the run's Generator.  Uniform floats here stay strictly below b; XLA CPU's f16/bf16 draws can
  round up to b itself.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from ...errors import HloEvalError
from ...ir.dtypes import from_numpy
from ..registry import evaluator
from ..values import np_dtype
from .convert import UINT_OF_BITS

_U32 = np.uint32
_U64 = np.uint64
_MASK32 = _U64(0xFFFFFFFF)
_SHIFT32 = _U64(32)


# ----------------------------------------------------------------------------- the generators

def _split64(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """u64 -> (low u32, high u32)."""
    return (x & _MASK32).astype(_U32), (x >> _SHIFT32).astype(_U32)


def _join64(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return lo.astype(_U64) | (hi.astype(_U64) << _SHIFT32)


def _rotl32(v: np.ndarray, r: int) -> np.ndarray:
    return (v << _U32(r)) | (v >> _U32(32 - r))


_THREEFRY_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def threefry2x32(x0: np.ndarray, x1: np.ndarray, k0, k1) -> tuple[np.ndarray, np.ndarray]:
    """Threefry2x32 with 20 rounds (Salmon et al., SC 2011) on uint32 word arrays; key words k0, k1."""
    k0, k1 = _U32(k0), _U32(k1)
    ks = (k0, k1, _U32(0x1BD11BDA) ^ k0 ^ k1)
    with np.errstate(over="ignore"):          # uint32 arithmetic wraps around on purpose
        x0 = x0 + ks[0]
        x1 = x1 + ks[1]
        for i in range(5):
            for r in _THREEFRY_ROTATIONS[i % 2]:
                x0 = x0 + x1
                x1 = _rotl32(x1, r) ^ x0
            x0 = x0 + ks[(i + 1) % 3]
            x1 = x1 + ks[(i + 2) % 3] + _U32(i + 1)
    return x0, x1


_PHILOX_W = (_U32(0x9E3779B9), _U32(0xBB67AE85))
_PHILOX_M = (_U64(0xD2511F53), _U64(0xCD9E8D57))


def philox4x32(c: list[np.ndarray], k0, k1) -> list[np.ndarray]:
    """Philox4x32 with 10 rounds on four uint32 word arrays; key words k0, k1."""
    k0, k1 = _U32(k0), _U32(k1)
    c0, c1, c2, c3 = c
    with np.errstate(over="ignore"):          # the key schedule wraps around on purpose
        for _ in range(10):
            p0 = c0.astype(_U64) * _PHILOX_M[0]
            p1 = c2.astype(_U64) * _PHILOX_M[1]
            c0, c1, c2, c3 = ((p1 >> _SHIFT32).astype(_U32) ^ c1 ^ k0, (p1 & _MASK32).astype(_U32),
                              (p0 >> _SHIFT32).astype(_U32) ^ c3 ^ k1, (p0 & _MASK32).astype(_U32))
            k0 = k0 + _PHILOX_W[0]
            k1 = k1 + _PHILOX_W[1]
    return [c0, c1, c2, c3]


def _threefry_split_dim(dims: tuple[int, ...]) -> int:
    """XLA's SplitShapeIntoHalves: the first even dimension, else the first largest one."""
    for i, d in enumerate(dims):
        if d % 2 == 0:
            return i
    return max(range(len(dims)), key=lambda i: (dims[i], -i))


def threefry_bits(state: np.ndarray, dims: tuple[int, ...], width: int) -> tuple[np.ndarray, np.ndarray]:
    """(new state, uint32 or uint64 bits of `dims`) for ThreeFry with a u64[2] state."""
    key_lo, key_hi = (int(state[0]) & 0xFFFFFFFF), int(state[0]) >> 32
    if width == 64:
        n = int(np.prod(dims, dtype=np.int64))
        x0, x1 = threefry2x32(*_split64(state[1] + np.arange(n, dtype=_U64)), key_lo, key_hi)
        return _new_state(state, 1, n), _join64(x0, x1).reshape(dims)
    if not dims:
        x0, _ = threefry2x32(*_split64(state[1:2]), key_lo, key_hi)
        return _new_state(state, 1, 1), x0.reshape(())
    sd = _threefry_split_dim(dims)
    half = list(dims)
    half[sd] = -(-dims[sd] // 2)
    n = int(np.prod(half, dtype=np.int64))
    x0, x1 = threefry2x32(*_split64(state[1] + np.arange(n, dtype=_U64)), key_lo, key_hi)
    pair_shape = half[:sd + 1] + [1] + half[sd + 1:]
    both = np.concatenate([x0.reshape(pair_shape), x1.reshape(pair_shape)], axis=sd + 1)
    full = list(dims)
    full[sd] = 2 * half[sd]
    bits = both.reshape(full)[(slice(None),) * sd + (slice(0, dims[sd]),)]
    return _new_state(state, 1, n), bits


def philox_bits(state: np.ndarray, dims: tuple[int, ...], width: int) -> tuple[np.ndarray, np.ndarray]:
    """(new state, uint32 or uint64 bits of `dims`) for Philox with a u64[2] or u64[3] state."""
    n = int(np.prod(dims, dtype=np.int64))
    key_lo, key_hi = (int(state[0]) & 0xFFFFFFFF), int(state[0]) >> 32
    lo, hi = state[1], state[0] if state.shape[0] == 2 else state[2]
    blocks = -(-n // 4) if width == 32 else -(-n // 2)
    ctr_lo = lo + np.arange(blocks, dtype=_U64)
    ctr_hi = np.where(ctr_lo < lo, hi + _U64(1), hi).astype(_U64)
    w = philox4x32([*_split64(ctr_lo), *_split64(ctr_hi)], key_lo, key_hi)
    if width == 64:
        w = [_join64(w[0], w[1]), _join64(w[2], w[3])]
    bits = np.stack(w, axis=1).reshape(-1)[:n].reshape(dims)
    new = state.copy()
    new_lo = lo + _U64(blocks)
    new[1] = new_lo
    if state.shape[0] == 3:
        new[2] = hi + _U64(1) if new_lo < lo else hi
    return new, bits


def _new_state(state: np.ndarray, index: int, add: int) -> np.ndarray:
    new = state.copy()
    new[index] = state[index] + _U64(add % (1 << 64))
    return new


def _from_unsigned_bits(u: np.ndarray, dtype: np.dtype, bits: int) -> np.ndarray:
    """Unsigned bit patterns (in a wide enough unsigned container) -> an array of `dtype` with those
    bits (sub-byte types: the low `bits` bits)."""
    if bits >= 8:
        return np.ascontiguousarray(u.astype(UINT_OF_BITS[bits])).reshape(u.shape).view(dtype)
    u8 = np.asarray(u.astype(np.uint8) & np.uint8((1 << bits) - 1))
    kind = from_numpy(dtype).kind
    if kind == "uint":
        return u8.astype(dtype)
    if kind == "int":
        half = np.int8(1 << (bits - 1))
        return np.asarray((u8.view(np.int8) ^ half) - half).astype(dtype)
    return u8.view(dtype)          # sub-byte floats live in the low bits of a byte


_ALGORITHMS = {"rng_default": "rng_philox", "rng_philox": "rng_philox", "rng_three_fry": "rng_three_fry"}


def rng_bit_generator(algorithm: str, state: np.ndarray, element_type: str, dims) -> tuple[np.ndarray, np.ndarray]:
    """(new state, bits) exactly as XLA CPU computes them; see the module docstring."""
    name = _ALGORITHMS.get(str(algorithm))
    if name is None:
        raise HloEvalError(f"rng-bit-generator: unknown algorithm {algorithm}")
    if state.dtype != np.uint64 or state.ndim != 1 or state.shape[0] not in (2, 3):
        raise HloEvalError(f"rng-bit-generator: XLA CPU takes a u64[2] or u64[3] state, got "
                           f"{from_numpy(state.dtype).name}{list(state.shape)}")
    if name == "rng_three_fry" and state.shape[0] != 2:
        raise HloEvalError(f"rng-bit-generator: rng_three_fry takes a u64[2] state, got u64[{state.shape[0]}]")
    et = from_numpy(np_dtype(element_type))
    if et.kind not in ("int", "uint", "float") or et.bits not in (2, 4, 8, 16, 32, 64):
        raise HloEvalError(f"rng-bit-generator: XLA CPU cannot generate {element_type} bits")
    dims = tuple(int(d) for d in dims)
    gen = philox_bits if name == "rng_philox" else threefry_bits
    with np.errstate(over="ignore"):
        new_state, bits = gen(state, dims, 64 if et.bits == 64 else 32)
    return new_state, _from_unsigned_bits(bits, et.numpy, et.bits)


@evaluator("rng-bit-generator")
def eval_rng_bit_generator(inst, args, ec):
    """(new state, random bits of the declared shape) from the u64 state by ThreeFry or Philox
    (rng_default = Philox on CPU), bit-exact with XLA's expander; signed and float results carry
    the bits of the unsigned type of their width."""
    shape = inst.shape
    bits_shape = shape.tuple_shapes[1] if shape.is_tuple else shape
    new_state, bits = rng_bit_generator(inst.attrs["algorithm"], args[0], bits_shape.element_type, bits_shape.dims)
    return (new_state, bits) if shape.is_tuple else bits


# ----------------------------------------------------------------------------- rng

@evaluator("rng")
def eval_rng(inst, args, ec):
    """rng_uniform: uniform on [a, b) (integers: each of a..b-1 equally likely); rng_normal:
    N(mu, sigma).  XLA's values are implementation-defined, so these come from the run's numpy
    Generator (--seed): deterministic for a seed, not XLA's numbers.  With b <= a (uniform) the
    result is implementation-defined: floats give a + (b - a) * u, integers draw from the wrapped
    range [a, b) modulo 2^bits (all a when a == b)."""
    a, b = args
    dtype = np_dtype(inst.shape)
    dims = tuple(inst.shape.dims)
    et = from_numpy(dtype)
    if str(inst.attrs["distribution"]) == "rng_normal":
        mu, sigma = float(a), float(b)
        with np.errstate(over="ignore", invalid="ignore"):
            return np.asarray(mu + sigma * ec.rng.standard_normal(dims)).astype(dtype)
    if et.kind == "pred":
        return np.full(dims, bool(a), dtype)            # [a, b) of pred holds a alone (or nothing)
    if et.kind == "float":
        return _uniform_float(a, b, dtype, dims, ec.rng)
    return _uniform_int(a, b, dtype, et, dims, ec.rng)


def _uniform_float(a, b, dtype, dims, rng) -> np.ndarray:
    """a + (b - a) * u in float64, rounded down onto `dtype`'s grid (so each representable value v
    gets the share of [a, b) between v and the next one), kept below b."""
    lo, hi = float(a), float(b)
    floor_target = np.asarray(ml_dtypes.finfo(dtype).min, dtype)   # finite: the f8 types have no -inf
    with np.errstate(over="ignore", invalid="ignore"):
        x = lo + (hi - lo) * rng.random(dims)
        r = np.asarray(x).astype(dtype)
        r = np.where(r.astype(np.float64) > x, np.nextafter(r, floor_target), r).astype(dtype)
        if hi > lo:
            below = np.nextafter(np.asarray(hi, dtype), floor_target)
            r = np.where(r.astype(np.float64) >= hi, below, r).astype(dtype)
    return r


def _uniform_int(a, b, dtype, et, dims, rng) -> np.ndarray:
    bits = et.bits
    mod = 1 << bits
    lo, hi = int(a), int(b)
    span = (hi - lo) % mod
    if span == 0:
        return np.full(dims, lo, dtype)
    draw = rng.integers(0, span, size=dims, dtype=np.uint64)
    vals = (draw + _U64(lo % mod)) & _U64(mod - 1) if bits < 64 else draw + _U64(lo % mod)
    if et.kind == "uint" and bits >= 8:
        return vals.astype(dtype)
    return _from_unsigned_bits(vals, dtype, bits)


# ----------------------------------------------------------------------------- rng state

_RNG_STATE_INITIAL = 0x7012395


@evaluator("rng-get-and-update-state")
def eval_rng_get_and_update_state(inst, args, ec):
    """u64[2] {low, high} of this instruction's 128-bit counter, which then grows by `delta`.
    As on XLA CPU every rng-get-and-update-state has its own counter, starting at 0x7012395 in
    each run."""
    states = ec.rng_states
    key = id(inst)
    value = states.get(key, _RNG_STATE_INITIAL)
    states[key] = (value + int(inst.attrs["delta"])) % (1 << 128)
    return np.array([value & ((1 << 64) - 1), value >> 64], dtype=np.uint64)
