"""cuDNN fused attention (`__cudnn$fmha*`), as JAX writes it (jax/_src/cudnn/fused_attention_stablehlo.py)
and XLA GPU runs it (the cuDNN frontend SDPA graph built in stream_executor/cuda/cuda_dnn.cc).

Targets: fmhaSoftmax, fmhaScaleBiasSoftmax, fmhaSoftmaxDropout, fmhaScaleBiasSoftmaxDropout, their
...Backward forms, fmhaSoftmaxF8 and fmhaSoftmaxBackwardF8.  The CudnnfMHABackendConfig says where
each operand keeps its batch, head, sequence and feature dims (the bmm dot dimension numbers: BTNH or
BNTH), fmha_scale, mask_type, dropout_rate and seed, sliding_window_length, max_seg_per_batch
(packed segments) and is_paged_attention.

Forward operands: Q, K, V[, bias][, q_seqlen, kv_seqlen][, q_offsets, kv_offsets][, page_table_k,
page_table_v]; results: O (B, N, T, H)[, softmax statistics f32 (B*segments, N, T)], u8 scratch.
Backward operands: Q, K, V, statistics, dO[, bias], O[, q_seqlen, kv_seqlen][, q_offsets,
kv_offsets]; results: dQ, dK, dV[, dbias], u8 scratch.

Semantics (cuDNN flash attention): S = fmha_scale * Q K^T (+ bias), masked keys get -inf, P =
softmax(S) in f32, the statistics are its log-sum-exp m + log(sum exp(S - m)); O = P V with P
rounded to the I/O type before the product, f32 sums, O rounded once.  Masks: CAUSAL keeps keys
j <= i (top-left diagonal, cuDNN's causal mask), PADDING keeps queries i < q_seqlen[b] and keys
j < kv_seqlen[b] (padded query rows are 0), PADDING_CAUSAL both, a sliding window keeps j > i - w;
ALIBI adds nothing: XLA's graph does not ask cuDNN for ALiBi (cuda_dnn.cc sets only causal and
padding masks), so the mask kind is run as XLA GPU runs it.  Keys and values with fewer heads than
the queries are shared by consecutive query heads (grouped-query attention).  Packed segments
(max_seg_per_batch > 1): q_offsets/kv_offsets are element offsets of each segment in the BTNH
buffers (JAX multiplies token offsets by N*H), q_seqlen/kv_seqlen their lengths; each segment
attends within itself.  Paged attention: K and V are blocks [num_blocks, block, N, H] gathered per
batch through page tables [B, 1, pages, 1].

Backward (FlashAttention-2): P from the statistics operand, dV = P^T dO, dP = dO V^T,
D = rowsum(dO * O), dS = P * (dP - D), dbias = dS summed over the bias's broadcast dims,
dQ = scale dS K, dK = scale dS^T Q, with P and dS rounded to the I/O type before their products.

Dropout: cuDNN's random bits (Philox, seeded by the config's seed and an offset of the run) cannot be
reproduced here; the kernel runs with a mask of the right keep rate drawn from the config's seed
(forward and backward draw the same one) and a warning says that the values differ from the GPU's.

FP8 (fmhaSoftmaxF8, fmhaSoftmaxBackwardF8; operands and results in JAX's order): products of
descaled fp8 operands, P scaled by scale_s and rounded to the fp8 type of the inputs, outputs scaled
and saturated to their fp8 type, amax outputs (of P, O; of dQ, dK, dV, dS) measured before scaling.
"""
from __future__ import annotations

import warnings

import numpy as np

from ...errors import HloWarning
from ..values import np_dtype
from .convert import convert
from .custom_call import target
from .gpu_dnn import cfg_num, gpu_config, leaves, need, result_tuple, shape_text, to_type

F32 = np.dtype(np.float32)


class DropoutWarning(HloWarning):
    """A cuDNN attention with dropout ran with our own random mask (its values differ from the GPU's)."""


_FWD = {"__cudnn$fmhaSoftmax": (False, False), "__cudnn$fmhaScaleBiasSoftmax": (True, False),
        "__cudnn$fmhaSoftmaxDropout": (False, True), "__cudnn$fmhaScaleBiasSoftmaxDropout": (True, True)}
_BWD = {"__cudnn$fmhaSoftmaxBackward": (False, False), "__cudnn$fmhaScaleBiasSoftmaxBackward": (True, False),
        "__cudnn$fmhaSoftmaxDropoutBackward": (False, True),
        "__cudnn$fmhaScaleBiasSoftmaxDropoutBackward": (True, True)}
_MASKS = ("NO_MASK", "PADDING", "CAUSAL", "PADDING_CAUSAL", "ALIBI")


# ============================================================================ configuration

class _Cfg:
    """The parts of CudnnfMHABackendConfig the computation needs, checked."""

    def __init__(self, inst, name: str):
        c = gpu_config(inst, "cudnn_fmha_backend_config")
        need(bool(c), name, "needs backend_config's cudnn_fmha_backend_config")
        self.raw = c
        self.scale = cfg_num(c, "fmha_scale", 1.0, name)
        self.dropout = cfg_num(c, "dropout_rate", 0.0, name)
        self.seed = cfg_num(c, "seed", 42, name, int)
        mask = c.get("mask_type", "NO_MASK")
        mask = _MASKS[int(mask)] if str(mask).isdigit() and int(mask) < len(_MASKS) else str(mask)
        need(mask in _MASKS, name, f"mask_type {mask!r} is not one of {', '.join(_MASKS)}")
        if c.get("is_causal_mask") and mask == "NO_MASK":
            mask = "CAUSAL"
        self.mask = mask
        self.window = cfg_num(c, "sliding_window_length", 0, name, int)
        self.segments = max(cfg_num(c, "max_seg_per_batch", 1, name, int), 1)
        self.paged = bool(c.get("is_paged_attention", False))
        self.name = name
        self.where = f"{inst.name} ({name})"

    def dims(self, key: str) -> tuple[list[int], list[int], list[int], list[int]]:
        d = self.raw.get(key)
        need(isinstance(d, dict), self.name, f"the config has no {key}")
        get = (lambda k: [cfg_num({k: v}, k, 0, self.name, int) for v in (d.get(k) or [])])
        lb, lc, rb, rc = (get("lhs_batch_dimensions"), get("lhs_contracting_dimensions"),
                          get("rhs_batch_dimensions"), get("rhs_contracting_dimensions"))
        need(len(lb) == 2 and len(rb) == 2 and len(lc) == 1 and len(rc) == 1, self.name,
             f"{key} must name two batch dims (batch, heads) and one contracting dim per side, got {d}")
        return lb, lc, rb, rc

    @property
    def causal(self) -> bool:
        return self.mask in ("CAUSAL", "PADDING_CAUSAL")

    @property
    def padding(self) -> bool:
        return self.mask in ("PADDING", "PADDING_CAUSAL")


def _canon(x: np.ndarray, batch: list[int], last: int, name: str, what: str, free_last: bool = False) -> np.ndarray:
    """x (rank 4) -> (batch0, batch1, free, last) (or (batch0, batch1, last, free) with free_last)."""
    need(x.ndim == 4, name, f"{what} {shape_text(x)} must have rank 4 (batch, heads, sequence, features)")
    free = [d for d in range(4) if d not in batch and d != last]
    need(len(free) == 1, name, f"the config's dims {batch} + [{last}] do not leave one sequence dim of {what} "
                               f"{shape_text(x)}")
    perm = batch + ([last] + free if free_last else free + [last])
    return np.transpose(x, perm)


def _f32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).astype(F32)


def _io_round(x: np.ndarray, io: np.dtype) -> np.ndarray:
    """x rounded to the kernel's I/O type and back to f32 (the products' operands)."""
    if io == F32:
        return x
    return convert(convert(np.asarray(x, F32), io), F32)


# ============================================================================ masks

def _mask(cfg: _Cfg, b: int, t: int, s: int, q_len=None, kv_len=None) -> np.ndarray:
    """Keys each query may see: bool (B or 1, 1, T, S)."""
    i = np.arange(t)[:, None]
    j = np.arange(s)[None, :]
    m = np.ones((t, s), bool)
    if cfg.causal:
        m &= j <= i
    if cfg.window > 0:
        m &= j > i - cfg.window
    m = m[None, None]
    if q_len is not None:
        ql = np.asarray(q_len).reshape(-1)[:b].astype(np.int64)
        kl = np.asarray(kv_len).reshape(-1)[:b].astype(np.int64)
        m = m & (np.arange(t)[None, None, :, None] < ql[:, None, None, None]) \
              & (np.arange(s)[None, None, None, :] < kl[:, None, None, None])
    return m


def dropout_keep(cfg: _Cfg, shape) -> np.ndarray | None:
    """Our dropout mask (keep = True) drawn from the config's seed, with a warning."""
    if cfg.dropout <= 0:
        return None
    warnings.warn(f"{getattr(cfg, 'where', cfg.name)}: dropout (rate {cfg.dropout}) ran with hlo's own random mask drawn from seed "
                  f"{cfg.seed}; cuDNN's random bits cannot be reproduced, so these values differ from the GPU's",
                  DropoutWarning, stacklevel=2)
    rng = np.random.default_rng(cfg.seed & 0xFFFFFFFFFFFFFFFF)
    return rng.random(shape) >= cfg.dropout


# ============================================================================ the kernels

def _scores(cfg, q, k, bias, mask, scale_extra=1.0):
    """Masked scaled scores (f32, (B, N, T, S)) from q (B,N,T,D), k (B,N,S,D)."""
    with np.errstate(all="ignore"):
        s = np.matmul(q, np.swapaxes(k, -1, -2)) * np.float32(cfg.scale * scale_extra)
        if bias is not None:
            s = s + bias
        return np.where(mask, s, np.float32(-np.inf))


def attention_forward(cfg, q, k, v, bias, mask, io):
    """Softmax of one batch of attention: (P, lse (B,N,T), exp(S - row max), row sums, rows with every
    key masked), f32; a masked-out row has P = 0 and lse = -inf, a NaN score row stays NaN."""
    s = _scores(cfg, q, k, bias, mask)
    with np.errstate(all="ignore"):
        m = np.max(s, axis=-1, keepdims=True)
        dead = m == np.float32(-np.inf)         # every key masked (a NaN row stays NaN)
        m = np.where(dead, np.float32(0), m)
        e = np.exp(s - m)
        l = np.sum(e, axis=-1, keepdims=True, dtype=F32)
        lse = (m + np.log(l))[..., 0]
        lse = np.where(dead[..., 0], np.float32(-np.inf), lse)
        p = np.where(dead, np.float32(0), e / l)
    return p, lse.astype(F32), e, l, dead


def expand_heads(x: np.ndarray, n: int, name: str, what: str) -> np.ndarray:
    nk = x.shape[1]
    need(nk > 0 and n % nk == 0, name, f"{what} has {nk} heads, which must divide the query's {n}")
    return x if nk == n else np.repeat(x, n // nk, axis=1)


def fold_heads(dx: np.ndarray, nk: int) -> np.ndarray:
    n = dx.shape[1]
    return dx if n == nk else dx.reshape(dx.shape[0], nk, n // nk, *dx.shape[2:]).sum(axis=2, dtype=F32)


def _bias4(bias: np.ndarray | None, b, n, t, s, name) -> np.ndarray | None:
    if bias is None:
        return None
    need(bias.ndim == 4 and bias.shape[2:] == (t, s) and bias.shape[0] in (1, b) and bias.shape[1] in (1, n), name,
         f"the bias {shape_text(bias)} must be [B or 1, N or 1, T, S] = [{b}|1, {n}|1, {t}, {s}]")
    return _f32(bias)


def reduce_to(x: np.ndarray, shape) -> np.ndarray:
    axes = tuple(d for d in range(x.ndim) if shape[d] == 1 and x.shape[d] != 1)
    return x.sum(axis=axes, keepdims=True, dtype=F32) if axes else x


def _segments(cfg, q_len, kv_len, q_off, kv_off, per_token, name):
    """[(k, q_start, q_len, kv_start, kv_len)] of packed segments (tokens in the flattened B*T axis)."""
    ql, kl = np.asarray(q_len).reshape(-1), np.asarray(kv_len).reshape(-1)
    qo, ko = np.asarray(q_off).reshape(-1), np.asarray(kv_off).reshape(-1)
    out = []
    for k in range(ql.size):
        if ql[k] <= 0 or k >= qo.size or qo[k] < 0:
            continue
        need(qo[k] % per_token == 0 and ko[k] % per_token == 0, name,
             f"segment {k}'s offsets {int(qo[k])}, {int(ko[k])} are not multiples of N*H = {per_token}")
        out.append((k, int(qo[k]) // per_token, int(ql[k]), int(ko[k]) // per_token, int(kl[k])))
    return out


def _decoded(inst, table):
    """(target name, has a bias, has dropout, its config, the declared result's leaves) of a cuDNN
    attention call whose target `table` maps to (bias, dropout)."""
    name = inst.attrs.get("custom_call_target")
    has_bias, has_dropout = table[name]
    return name, has_bias, has_dropout, _Cfg(inst, name), leaves(inst.shape)


# ============================================================================ forward

@target(*_FWD)
def cc_fmha_forward(inst, args, ec):
    """cuDNN fused attention forward (see the module docstring)."""
    name, has_bias, has_dropout, cfg, outs = _decoded(inst, _FWD)
    need(len(outs) in (2, 3) and outs[-1].element_type == "u8", name,
         f"returns (O[, statistics], u8 scratch), declared {inst.shape.to_str(False)}")
    training = len(outs) == 3
    want = 3 + has_bias + 2 * (cfg.padding or cfg.segments > 1 or cfg.paged) + 2 * (cfg.segments > 1) + 2 * cfg.paged
    need(len(args) == want, name, f"with mask {cfg.mask}, bias={has_bias}, max_seg_per_batch={cfg.segments}, "
                                  f"paged={cfg.paged} it takes {want} operands, got {len(args)}")
    need(not has_dropout or cfg.dropout > 0, name, f"a dropout kernel needs dropout_rate > 0, got {cfg.dropout}")
    if not has_dropout:
        cfg.dropout = 0.0                  # XLA passes the rate to cuDNN only for the dropout kinds
    a = [np.asarray(x) for x in args]
    qa, ka, va = a[:3]
    pos = 3
    bias = a[pos] if has_bias else None
    pos += has_bias
    q_len = kv_len = q_off = kv_off = pt_k = pt_v = None
    if cfg.padding or cfg.segments > 1 or cfg.paged:
        q_len, kv_len = a[pos], a[pos + 1]
        pos += 2
    if cfg.segments > 1:
        q_off, kv_off = a[pos], a[pos + 1]
        pos += 2
    if cfg.paged:
        pt_k, pt_v = a[pos], a[pos + 1]
    lb, lc, rb, rc = cfg.dims("bmm1_dot_dimension_numbers")
    _, _, vb, vc = cfg.dims("bmm2_dot_dimension_numbers")
    q = _f32(_canon(qa, lb, lc[0], name, "Q"))                  # B N T D
    k = _f32(_canon(ka, rb, rc[0], name, "K"))                  # B N S D (or blocks)
    v = _f32(_canon(va, vb, vc[0], name, "V", free_last=True))  # B N S Dv
    io = qa.dtype
    block = k.shape[2]                 # JAX writes a paged kernel's S as the block size
    if cfg.paged:
        k = _pages(k, pt_k, name, "K")
        v = _pages(v, pt_v, name, "V")
    b, n, t, d = q.shape
    need(k.shape[0] == b and k.shape[3] == d and v.shape[:3] == k.shape[:3], name,
         f"Q {shape_text(qa)}, K {shape_text(ka)} and V {shape_text(va)} disagree on batch, heads, key length "
         f"or head size")
    s_len, dv = k.shape[2], v.shape[3]
    nk = k.shape[1]
    k, v = expand_heads(k, n, name, "K"), expand_heads(v, n, name, "V")
    o_shape = outs[0]
    need(tuple(o_shape.dims) == (b, n, t, dv), name,
         f"O must be [B, N, T, H] = [{b}, {n}, {t}, {dv}], declared {o_shape.to_str(False)}")
    _check_intermediate(cfg, b, n, t, block if cfg.paged else s_len, name)
    bias4 = _bias4(bias, b, n, t, s_len, name)
    seg_rows = cfg.segments * b if cfg.segments > 1 else b
    if training:
        need(tuple(outs[1].dims) == (seg_rows, n, t) and outs[1].element_type == "f32", name,
             f"the statistics must be f32[{seg_rows},{n},{t}], declared {outs[1].to_str(False)}")
    del nk
    if cfg.segments > 1:
        o, lse = _forward_segments(cfg, q, k, v, bias4, q_len, kv_len, q_off, kv_off, io, name, seg_rows)
    else:
        mask = _mask(cfg, b, t, s_len, q_len, kv_len)
        o, lse = forward_dense(cfg, q, k, v, bias4, mask, io)
    res = [to_type(o, np_dtype(o_shape))]
    if training:
        res.append(lse)
    return result_tuple(inst, res)


def _check_intermediate(cfg, b, n, t, s, name):
    ish = cfg.raw.get("intermediate_tensor_shape") or {}
    dims = [int(x) for x in ish.get("dimensions", [])]
    if dims:
        need(dims == [b, n, t, s], name, f"intermediate_tensor_shape {dims} must be [B, N, T, S] = {[b, n, t, s]}")


def _pages(x: np.ndarray, table: np.ndarray, name: str, what: str) -> np.ndarray:
    """Blocks (num_blocks, N, block, H) gathered per batch through a page table [B, 1, pages, 1]."""
    tb = np.asarray(table)
    need(tb.ndim == 4 and tb.shape[1] == 1 and tb.shape[3] == 1, name,
         f"the {what} page table {shape_text(tb)} must be [B, 1, pages, 1]")
    idx = tb[:, 0, :, 0].astype(np.int64)
    need(bool(((idx >= 0) & (idx < x.shape[0])).all()), name,
         f"the {what} page table holds block numbers outside 0..{x.shape[0] - 1}")
    g = x[idx]                                          # B, pages, N, block, H
    bsz, pages, n, blk, h = g.shape
    return np.ascontiguousarray(g.transpose(0, 2, 1, 3, 4).reshape(bsz, n, pages * blk, h))


def forward_dense(cfg, q, k, v, bias4, mask, io):
    p, lse, e, l, dead = attention_forward(cfg, q, k, v, bias4, mask, io)
    keep = dropout_keep(cfg, p.shape)
    with np.errstate(all="ignore"):
        pe = e if keep is None else np.where(keep, e, np.float32(0)) / np.float32(1 - cfg.dropout)
        o = np.matmul(_io_round(np.where(dead, np.float32(0), pe), io), v) / np.where(dead, np.float32(1), l)
    q_rows = mask.any(axis=-1, keepdims=True)
    o = np.where(q_rows, o, np.float32(0))
    return o.astype(F32), lse


def _forward_segments(cfg, q, k, v, bias4, q_len, kv_len, q_off, kv_off, io, name, seg_rows):
    b, n, t, d = q.shape
    s_len = k.shape[2]
    need(cfg.raw is not None and bias4 is None, name, "packed segments with a bias are not something JAX emits")
    qt = q.transpose(0, 2, 1, 3).reshape(b * t, n, d)        # tokens in the BTNH buffer order
    kt = k.transpose(0, 2, 1, 3).reshape(b * s_len, n, d)
    vt = v.transpose(0, 2, 1, 3).reshape(b * s_len, n, v.shape[3])
    o = np.zeros((b * t, n, v.shape[3]), F32)
    lse = np.zeros((seg_rows, n, t), F32)
    for kk, q0, ql, k0, kl in _segments(cfg, q_len, kv_len, q_off, kv_off, n * d, name):
        need(q0 + ql <= b * t and k0 + kl <= b * s_len, name, f"segment {kk} runs past the end of the buffers")
        qs = qt[q0:q0 + ql].transpose(1, 0, 2)[None]
        ks = kt[k0:k0 + kl].transpose(1, 0, 2)[None]
        vs = vt[k0:k0 + kl].transpose(1, 0, 2)[None]
        mask = _mask(cfg, 1, ql, kl)
        os_, ls = forward_dense(cfg, qs, ks, vs, None, mask, io)
        o[q0:q0 + ql] = os_[0].transpose(1, 0, 2)
        lse[kk, :, :ql] = ls[0]
    return o.reshape(b, t, n, -1).transpose(0, 2, 1, 3), lse


# ============================================================================ backward

@target(*_BWD)
def cc_fmha_backward(inst, args, ec):
    """cuDNN fused attention backward (see the module docstring)."""
    name, has_bias, has_dropout, cfg, outs = _decoded(inst, _BWD)
    want = 6 + has_bias + 2 * (cfg.padding or cfg.segments > 1) + 2 * (cfg.segments > 1)
    need(len(args) == want, name, f"with mask {cfg.mask}, bias={has_bias}, max_seg_per_batch={cfg.segments} it "
                                  f"takes {want} operands (Q, K, V, statistics, dO[, bias], O[, seqlens][, offsets]), "
                                  f"got {len(args)}")
    need(len(outs) in (4, 5) and outs[-1].element_type == "u8", name,
         f"returns (dQ, dK, dV[, dbias], u8 scratch), declared {inst.shape.to_str(False)}")
    has_dbias = len(outs) == 5
    need(not has_dropout or cfg.dropout > 0, name, f"a dropout kernel needs dropout_rate > 0, got {cfg.dropout}")
    if not has_dropout:
        cfg.dropout = 0.0
    need(not has_dbias or has_bias, name, "returns dbias without a bias operand")
    a = [np.asarray(x) for x in args]
    qa, ka, va, stats, doa = a[:5]
    pos = 5
    bias = a[pos] if has_bias else None
    pos += has_bias
    oa = a[pos]
    pos += 1
    q_len = kv_len = q_off = kv_off = None
    if cfg.padding or cfg.segments > 1:
        q_len, kv_len = a[pos], a[pos + 1]
        pos += 2
    if cfg.segments > 1:
        q_off, kv_off = a[pos], a[pos + 1]
    _, _, qb, qc = cfg.dims("bmm1_grad_gemm1_dot_dimension_numbers")     # dP^T Q -> dK: rhs is Q
    _, _, kb, kc = cfg.dims("bmm1_grad_gemm2_dot_dimension_numbers")     # dP K -> dQ: rhs is K
    dlb, dlc, vb, vc = cfg.dims("bmm2_grad_gemm2_dot_dimension_numbers")  # dO V^T -> dP
    q = _f32(_canon(qa, qb, qc[0], name, "Q", free_last=True))   # B N T D
    k = _f32(_canon(ka, kb, kc[0], name, "K", free_last=True))   # B N S D
    v = _f32(_canon(va, vb, vc[0], name, "V"))                   # B N S Dv
    do = _f32(_canon(doa, dlb, dlc[0], name, "dO"))              # B N T Dv
    need(oa.shape == doa.shape, name, f"O {shape_text(oa)} must have dO's shape {shape_text(doa)}")
    o = _f32(_canon(oa, dlb, dlc[0], name, "O"))
    io = qa.dtype
    b, n, t, d = q.shape
    nk, s_len = k.shape[1], k.shape[2]
    need(k.shape[0] == b and k.shape[3] == d and v.shape[:3] == k.shape[:3] and do.shape[:3] == (b, n, t)
         and do.shape[3] == v.shape[3], name,
         f"Q {shape_text(qa)}, K {shape_text(ka)}, V {shape_text(va)} and dO {shape_text(doa)} disagree")
    for kk, (arr, what) in enumerate(((qa, "dQ"), (ka, "dK"), (va, "dV"))):
        canon = (q, k, v)[kk].shape
        need(tuple(outs[kk].dims) == canon, name, f"{what} must be [B, N, seq, H] = {list(canon)}, declared "
                                                  f"{outs[kk].to_str(False)}")
    _check_intermediate(cfg, b, n, t, s_len, name)
    bias4 = _bias4(bias, b, n, t, s_len, name)
    seg_rows = cfg.segments * b if cfg.segments > 1 else b
    need(stats.shape == (seg_rows, n, t), name, f"the statistics {shape_text(stats)} must be f32[{seg_rows},{n},{t}]")
    ke, ve = expand_heads(k, n, name, "K"), expand_heads(v, n, name, "V")
    if cfg.segments > 1:
        dq, dk, dv = _backward_segments(cfg, q, ke, ve, do, o, _f32(stats), q_len, kv_len, q_off, kv_off, io, name)
        dbias = None
    else:
        mask = _mask(cfg, b, t, s_len, q_len, kv_len)
        dq, dk, dv, ds = backward_dense(cfg, q, ke, ve, do, o, _f32(stats), bias4, mask, io)
        dbias = reduce_to(ds, bias4.shape) if has_dbias else None
    dk, dv = fold_heads(dk, nk), fold_heads(dv, nk)
    res = [to_type(dq, np_dtype(outs[0])), to_type(dk, np_dtype(outs[1])), to_type(dv, np_dtype(outs[2]))]
    if has_dbias:
        need(tuple(outs[3].dims) == bias.shape, name, f"dbias must have the bias's shape {shape_text(bias)}, declared "
                                                      f"{outs[3].to_str(False)}")
        res.append(to_type(dbias, np_dtype(outs[3])))
    return result_tuple(inst, res)


def backward_dense(cfg, q, k, v, do, o, lse, bias4, mask, io):
    s = _scores(cfg, q, k, bias4, mask)
    with np.errstate(all="ignore"):
        dead = (lse == np.float32(-np.inf))[..., None]
        p = np.where(dead | ~mask, np.float32(0), np.exp(s - np.where(dead, 0, lse[..., None])))
        keep = dropout_keep(cfg, p.shape)
        inv = np.float32(1 / (1 - cfg.dropout)) if keep is not None else np.float32(1)
        pd = p if keep is None else np.where(keep, p, np.float32(0)) * inv
        dv = np.matmul(np.swapaxes(_io_round(pd, io), -1, -2), do)
        dp = np.matmul(do, np.swapaxes(v, -1, -2))
        if keep is not None:
            dp = np.where(keep, dp, np.float32(0)) * inv
        dd = np.sum(do * o, axis=-1, keepdims=True, dtype=F32)
        ds = p * (dp - dd)
        dsr = _io_round(ds, io)
        sc = np.float32(cfg.scale)
        dq = np.matmul(dsr, k) * sc
        dk = np.matmul(np.swapaxes(dsr, -1, -2), q) * sc
    return dq.astype(F32), dk.astype(F32), dv.astype(F32), ds.astype(F32)


def _backward_segments(cfg, q, k, v, do, o, lse, q_len, kv_len, q_off, kv_off, io, name):
    b, n, t, d = q.shape
    s_len, dvd = k.shape[2], v.shape[3]
    tok = (lambda x, m: x.transpose(0, 2, 1, 3).reshape(b * m, n, x.shape[3]))
    qt, kt, vt, dot, ot = tok(q, t), tok(k, s_len), tok(v, s_len), tok(do, t), tok(o, t)
    dq = np.zeros_like(qt)
    dk = np.zeros_like(kt)
    dv = np.zeros((b * s_len, n, dvd), F32)
    for kk, q0, ql, k0, kl in _segments(cfg, q_len, kv_len, q_off, kv_off, n * d, name):
        need(q0 + ql <= b * t and k0 + kl <= b * s_len, name, f"segment {kk} runs past the end of the buffers")
        sl = (lambda x, a0, ln: x[a0:a0 + ln].transpose(1, 0, 2)[None])
        mask = _mask(cfg, 1, ql, kl)
        gq, gk, gv, _ = backward_dense(cfg, sl(qt, q0, ql), sl(kt, k0, kl), sl(vt, k0, kl), sl(dot, q0, ql),
                                        sl(ot, q0, ql), lse[kk:kk + 1, :, :ql], None, mask, io)
        dq[q0:q0 + ql] += gq[0].transpose(1, 0, 2)
        dk[k0:k0 + kl] += gk[0].transpose(1, 0, 2)
        dv[k0:k0 + kl] += gv[0].transpose(1, 0, 2)
    back = (lambda x, m: x.reshape(b, m, n, x.shape[2]).transpose(0, 2, 1, 3))
    return back(dq, t), back(dk, s_len), back(dv, s_len)


# ============================================================================ FP8

def _scalar(x, name, what) -> np.float32:
    x = np.asarray(x)
    need(x.size == 1, name, f"{what} must hold one value, got {shape_text(x)}")
    return np.float32(x.astype(F32).reshape(()))


def _fp8(x: np.ndarray, dt) -> np.ndarray:
    """x saturated to fp8 type dt and back to f32."""
    return np.asarray(to_type(np.asarray(x, F32), dt)).astype(F32)


@target("__cudnn$fmhaSoftmaxF8")
def cc_fmha_f8_forward(inst, args, ec):
    """FP8 attention forward: operands Q, K, V, descale_q, descale_k, descale_v, descale_s, scale_s,
    scale_o; results O, amax_s, amax_o[, statistics], scratch (JAX's order)."""
    name = inst.attrs.get("custom_call_target")
    cfg = _Cfg(inst, name)
    outs = leaves(inst.shape)
    need(len(args) == 9, name, f"takes Q, K, V and six scale factors, got {len(args)} operands")
    need(len(outs) in (4, 5) and outs[-1].element_type == "u8", name,
         f"returns (O, amax_s, amax_o[, statistics], u8 scratch), declared {inst.shape.to_str(False)}")
    a = [np.asarray(x) for x in args]
    dq_, dk_, dv_, ds_, ss_, so_ = (_scalar(a[3 + i], name, w) for i, w in enumerate(
        ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o")))
    lb, lc, rb, rc = cfg.dims("bmm1_dot_dimension_numbers")
    _, _, vb, vc = cfg.dims("bmm2_dot_dimension_numbers")
    q = _f32(_canon(a[0], lb, lc[0], name, "Q"))
    k = _f32(_canon(a[1], rb, rc[0], name, "K"))
    v = _f32(_canon(a[2], vb, vc[0], name, "V", free_last=True))
    b, n, t, d = q.shape
    k, v = expand_heads(k, n, name, "K"), expand_heads(v, n, name, "V")
    s_len = k.shape[2]
    need(tuple(outs[0].dims) == (b, n, t, v.shape[3]), name,
         f"O must be [B, N, T, H] = {[b, n, t, v.shape[3]]}, declared {outs[0].to_str(False)}")
    mask = _mask(cfg, b, t, s_len)
    with np.errstate(all="ignore"):
        p, lse, _, _, _ = attention_forward(cfg, q * (dq_ * dk_), k, v, None, mask, F32)
        amax_s = np.max(p) if p.size else np.float32(0)
        p8 = _fp8(p * ss_, a[0].dtype)
        o = np.matmul(p8, v) * (ds_ * dv_)
        amax_o = np.max(np.abs(o)) if o.size else np.float32(0)
    res = [to_type(o * so_, np_dtype(outs[0])), np.full((1, 1, 1, 1), amax_s, F32), np.full((1, 1, 1, 1), amax_o, F32)]
    if len(outs) == 5:
        res.append(lse)
    return result_tuple(inst, res)


@target("__cudnn$fmhaSoftmaxBackwardF8")
def cc_fmha_f8_backward(inst, args, ec):
    """FP8 attention backward: operands Q, K, V, O, dO, statistics, descale_q, descale_k, descale_v,
    descale_o, descale_dO, descale_s, descale_dP, scale_s, scale_dQ, scale_dK, scale_dV, scale_dP;
    results dQ, dK, dV, amax_dQ, amax_dK, amax_dV, amax_dP, scratch."""
    name = inst.attrs.get("custom_call_target")
    cfg = _Cfg(inst, name)
    outs = leaves(inst.shape)
    need(len(args) == 18, name, f"takes Q, K, V, O, dO, the statistics and twelve scale factors, got {len(args)}")
    need(len(outs) == 8 and outs[-1].element_type == "u8", name,
         f"returns (dQ, dK, dV, four amax values, u8 scratch), declared {inst.shape.to_str(False)}")
    a = [np.asarray(x) for x in args]
    names = ("descale_q", "descale_k", "descale_v", "descale_o", "descale_dO", "descale_s", "descale_dP",
             "scale_s", "scale_dQ", "scale_dK", "scale_dV", "scale_dP")
    f = {w: _scalar(a[6 + i], name, w) for i, w in enumerate(names)}
    _, _, qb, qc = cfg.dims("bmm1_grad_gemm1_dot_dimension_numbers")
    _, _, kb, kc = cfg.dims("bmm1_grad_gemm2_dot_dimension_numbers")
    dlb, dlc, vb, vc = cfg.dims("bmm2_grad_gemm2_dot_dimension_numbers")
    q = _f32(_canon(a[0], qb, qc[0], name, "Q", free_last=True))
    k = _f32(_canon(a[1], kb, kc[0], name, "K", free_last=True))
    v = _f32(_canon(a[2], vb, vc[0], name, "V"))
    o = _f32(_canon(a[3], dlb, dlc[0], name, "O"))
    do = _f32(_canon(a[4], dlb, dlc[0], name, "dO"))
    lse = _f32(a[5])
    b, n, t, d = q.shape
    nk = k.shape[1]
    ke, ve = expand_heads(k, n, name, "K"), expand_heads(v, n, name, "V")
    s_len = ke.shape[2]
    need(lse.shape == (b, n, t), name, f"the statistics {shape_text(a[5])} must be f32[{b},{n},{t}]")
    mask = _mask(cfg, b, t, s_len)
    io = a[0].dtype
    with np.errstate(all="ignore"):
        s = _scores(cfg, q, ke, None, mask, scale_extra=float(f["descale_q"] * f["descale_k"]))
        p = np.where(mask, np.exp(s - lse[..., None]), np.float32(0))
        p8 = _fp8(p * f["scale_s"], io)
        dv = np.matmul(np.swapaxes(p8, -1, -2), do) * (f["descale_s"] * f["descale_dO"])
        dp = np.matmul(do, np.swapaxes(ve, -1, -2)) * (f["descale_dO"] * f["descale_v"])
        dd = np.sum(do * o, axis=-1, keepdims=True, dtype=F32) * (f["descale_dO"] * f["descale_o"])
        ds = p * (dp - dd)
        amax_dp = np.max(np.abs(ds)) if ds.size else np.float32(0)
        ds8 = _fp8(ds * f["scale_dP"], io)
        sc = np.float32(cfg.scale) * f["descale_dP"]
        dq = np.matmul(ds8, ke) * (sc * f["descale_k"])
        dk = np.matmul(np.swapaxes(ds8, -1, -2), q) * (sc * f["descale_q"])
    dk, dv = fold_heads(dk, nk), fold_heads(dv, nk)
    amax = [np.full((1, 1, 1, 1), np.max(np.abs(x)) if x.size else 0, F32) for x in (dq, dk, dv)]
    res = [to_type(dq * f["scale_dQ"], np_dtype(outs[0])), to_type(dk * f["scale_dK"], np_dtype(outs[1])),
           to_type(dv * f["scale_dV"], np_dtype(outs[2]))] + amax + [np.full((1, 1, 1, 1), amax_dp, F32)]
    return result_tuple(inst, res)
