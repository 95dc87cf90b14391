"""Shape rules of the linear-algebra and normalization families.

dot, ragged-dot, scaled-dot, convolution, fft, triangular-solve, cholesky,
batch-norm-training, batch-norm-inference, batch-norm-grad.

Mixed precision: like XLA's verifier, dot / ragged-dot / scaled-dot / convolution take the declared
result element type as the preferred element type (so `f32 dot(bf16, bf16)` is valid); without a
declared shape the result type is the higher-precision operand type.

Sources: XLA's ``ShapeInference::Infer{Dot,RaggedDot,Convolve,Fft,TriangularSolve,Cholesky,
BatchNorm*}Shape`` and ``ShapeVerifier::HandleScaledDot`` (xla/service/shape_inference.cc,
xla/service/hlo_verifier.cc), StableHLO's ragged-dot constraints for batched group sizes, and the
operation semantics (../shared/spec/004_*).
"""
from __future__ import annotations

from ...ir.shape import UNBOUNDED
from ..registry import fail, rule
from .reduction import (array, compatible_dim, dims_attr, expect_array, expect_operands, higher_precision,
                        is_array, is_complex, is_float, strip, tup, txt, window_output)


def _dims_text(dims) -> str:
    return "{" + ",".join(map(str, dims)) + "}"


def _result_type(ctx, lhs, rhs) -> str:
    """The preferred element type: the declared one when there is one (XLA's verifier passes the
    instruction's element type), else the higher-precision operand type."""
    d = ctx.declared
    if d is not None and is_array(d):
        return d.element_type
    return higher_precision(lhs.element_type, rhs.element_type)


def _check_precision(ctx, attrs, operands, count: int = 2) -> None:
    prec = attrs.get("operand_precision")
    if prec and len(prec) != count:
        fail(ctx.opcode, "operand_precision", f"have {count} entries (one per lhs/rhs operand)",
             len(prec), operands)


def _dot_dims(ctx, operands, lhs, rhs, attrs):
    """Validate dot dimension numbers (XLA's ValidateDotDimensionNumbers and
    CheckDotDimensionConstraints); returns (lhs_batch, lhs_contracting, rhs_batch, rhs_contracting)."""
    op = ctx.opcode
    lb, lc = dims_attr(attrs, "lhs_batch_dims"), dims_attr(attrs, "lhs_contracting_dims")
    rb, rc = dims_attr(attrs, "rhs_batch_dims"), dims_attr(attrs, "rhs_contracting_dims")
    for side, shape, dims in (("lhs", lhs, lb + lc), ("rhs", rhs, rb + rc)):
        for d in dims:
            if not 0 <= d < shape.rank:
                fail(op, f"{side} batch and contracting dimensions", f"be in [0, {shape.rank})", d, operands)
        if len(set(dims)) != len(dims):
            fail(op, f"{side} batch and contracting dimensions", "be unique", _dims_text(dims), operands)
    if len(lc) != len(rc):
        fail(op, "the number of contracting dimensions", f"be the same for lhs ({len(lc)}) and rhs",
             len(rc), operands)
    for a, b in zip(lc, rc):
        if not compatible_dim(lhs.dims[a], rhs.dims[b]):
            fail(op, "contracting dimension sizes", "be equal",
                 f"lhs dimension {a} of size {lhs.dims[a]} vs rhs dimension {b} of size {rhs.dims[b]}", operands)
    if len(lb) != len(rb):
        fail(op, "the number of batch dimensions", f"be the same for lhs ({len(lb)}) and rhs", len(rb), operands)
    for a, b in zip(lb, rb):
        if not compatible_dim(lhs.dims[a], rhs.dims[b]):
            fail(op, "batch dimension sizes", "be equal",
                 f"lhs dimension {a} of size {lhs.dims[a]} vs rhs dimension {b} of size {rhs.dims[b]}", operands)
    return lb, lc, rb, rc


def _dot_result_dims(lhs, rhs, lb, lc, rb, rc, rhs_group=()):
    """Batch dimensions, then lhs free dimensions, then rhs free dimensions."""
    dims, dyn = [], []
    for d in lb:
        dims.append(lhs.dims[d])
        dyn.append(lhs.dynamic[d])
    for i in range(lhs.rank):
        if i not in lc and i not in lb:
            dims.append(lhs.dims[i])
            dyn.append(lhs.dynamic[i])
    for i in range(rhs.rank):
        if i not in rc and i not in rb and i not in rhs_group:
            dims.append(rhs.dims[i])
            dyn.append(rhs.dynamic[i])
    return dims, dyn


@rule("dot")
def infer_dot(operands, attrs, ctx):
    """dot(lhs, rhs): batch dims, lhs free dims, rhs free dims; contracting dims are summed away."""
    lhs, rhs = expect_operands(ctx, operands, 2, "lhs", "rhs")
    _check_precision(ctx, attrs, operands)
    lb, lc, rb, rc = _dot_dims(ctx, operands, lhs, rhs, attrs)
    dims, dyn = _dot_result_dims(lhs, rhs, lb, lc, rb, rc)
    return array(_result_type(ctx, lhs, rhs), dims, dyn)


@rule("ragged-dot")
def infer_ragged_dot(operands, attrs, ctx):
    """ragged-dot(lhs, rhs, group_sizes): a dot whose lhs ragged dimension is split into groups.

    Modes (by the kind of the lhs ragged dimension): non-contracting [b,m,k]x[g,b,k,n] -> [b,m,n];
    contracting [b,m,k]x[b,k,n] -> [g,b,m,n]; batch [b,m,k]x[b,k,n] -> [b,m,n].  group_sizes is
    [g] or [prefix..., g] (the lhs batch dims, then the lhs dims of the same kind before the ragged
    one)."""
    op = ctx.opcode
    lhs, rhs, gs = expect_operands(ctx, operands, 3, "lhs", "rhs", "group_sizes")
    _check_precision(ctx, attrs, operands)
    lb, lc, rb, rc = _dot_dims(ctx, operands, lhs, rhs, attrs)
    ragged = dims_attr(attrs, "lhs_ragged_dims")
    group = dims_attr(attrs, "rhs_group_dims")
    if len(ragged) != 1:
        fail(op, "lhs_ragged_dims", "name exactly one lhs dimension", _dims_text(ragged), operands)
    r = ragged[0]
    if not 0 <= r < lhs.rank:
        fail(op, "the lhs ragged dimension", f"be in [0, {lhs.rank})", r, operands)
    if r in lb:
        mode = "batch"
        prefix = list(lb[:lb.index(r)])
    elif r in lc:
        mode = "contracting"
        prefix = list(lb) + list(lc[:lc.index(r)])
    else:
        mode = "non-contracting"
        prefix = list(lb) + [i for i in range(r) if i not in lb and i not in lc]
    if gs.rank < 1:
        fail(op, "group_sizes", "have rank 1 or more", txt(gs), operands)
    expected = [lhs.dims[d] for d in prefix]
    if gs.rank != 1:
        if gs.rank != len(expected) + 1:
            fail(op, "group_sizes", f"have rank 1 or {len(expected) + 1}", txt(gs), operands)
        if list(gs.dims[:-1]) != expected:
            want = ",".join(map(str, expected + [gs.dims[-1]]))
            fail(op, "group_sizes", f"have shape [{want}]", txt(gs), operands)
    num_groups = gs.dims[-1]
    for g in group:
        if not 0 <= g < rhs.rank:
            fail(op, "rhs_group_dims", f"be in [0, {rhs.rank})", g, operands)
        if g in rb or g in rc:
            fail(op, "the rhs group dimension", "not be a batch or contracting dimension", g, operands)
    if mode in ("batch", "contracting"):
        if group:
            fail(op, "rhs_group_dims", f"be empty when the ragged dimension is {mode}", _dims_text(group), operands)
    else:
        if len(group) != 1:
            fail(op, "rhs_group_dims", "name exactly one rhs dimension when the ragged dimension is non-contracting",
                 _dims_text(group), operands)
        if not compatible_dim(num_groups, rhs.dims[group[0]]):
            fail(op, "the rhs group dimension", f"have size {num_groups} (the number of groups)",
                 rhs.dims[group[0]], operands)
    dims, dyn = [], []
    if mode == "contracting":
        dims.append(num_groups)
        dyn.append(gs.dynamic[-1])
    d2, y2 = _dot_result_dims(lhs, rhs, lb, lc, rb, rc, group)
    return array(_result_type(ctx, lhs, rhs), dims + d2, dyn + y2)


def _is_noop_scale(operand, scale) -> bool:
    """XLA's IsNoOpScale (xla/service/hlo_verifier.cc): a bf16 scale of a bf16 operand whose dims
    are all 1 (a scalar counts) while the operand has some dim other than 1 stands for "no scale"
    and escapes the other scale checks, its rank included."""
    return (scale.element_type == operand.element_type == "bf16"
            and all(d == 1 for d in scale.dims) and any(d != 1 for d in operand.dims))


@rule("scaled-dot")
def infer_scaled_dot(operands, attrs, ctx):
    """scaled-dot(lhs, rhs, lhs_scale, rhs_scale): the dot of lhs and rhs, each multiplied first by
    its scale repeated blockwise (the operand order of XLA's HloScaledDotInstruction and builder).

    XLA's ShapeVerifier::HandleScaledDot (xla/service/hlo_verifier.cc), in its order: per side,
    unless the scale is a no-op (_is_noop_scale), the scale has the operand's rank, the side names
    exactly one contracting dimension, and every operand dimension is a multiple of the scale's
    (the quotient is that dimension's block size; a block may span any dimension, and a scale
    dimension larger than an empty operand dimension is allowed); the scales are not both
    scalars; then the ordinary dot rule on lhs and rhs with the declared result type.  Element
    types are free (the verifier checks none; XLA's GPU rewrites expect f8e4m3fn/f8e5m2/f4e2m1fn
    with f8e8m0fnu scales, or bf16 with a bf16 1.0 no-op scale)."""
    op = ctx.opcode
    lhs, rhs, lscale, rscale = expect_operands(ctx, operands, 4, "lhs", "rhs", "lhs_scale", "rhs_scale")
    _check_precision(ctx, attrs, operands)
    for side, x, s in (("lhs", lhs, lscale), ("rhs", rhs, rscale)):
        if _is_noop_scale(x, s):
            continue
        if s.rank != x.rank:
            fail(op, f"{side}_scale", f"have the rank of {side} ({x.rank}), or be a bf16 no-op scale of a bf16 "
                 f"{side} (all dimensions 1)", txt(s), operands)
        contracting = dims_attr(attrs, f"{side}_contracting_dims")
        if len(contracting) != 1:
            fail(op, f"{side}_contracting_dims", f"name exactly one dimension when {side} has a scale",
                 _dims_text(contracting), operands)
        for i, (a, b) in enumerate(zip(x.dims, s.dims)):
            if a == UNBOUNDED or b == UNBOUNDED:
                continue
            if b == 0:
                fail(op, f"dimension {i} of {side}_scale", f"not be 0 (dimension {i} of {side}, {a}, is divided "
                     "by it)", txt(s), operands)
            if a % b:
                fail(op, f"dimension {i} of {side}", f"be a multiple of dimension {i} of {side}_scale ({b})",
                     a, operands)
    if not lscale.dims and not rscale.dims:
        fail(op, "the scales", "not both be scalars", f"{txt(lscale)} and {txt(rscale)}", operands)
    lb, lc, rb, rc = _dot_dims(ctx, operands, lhs, rhs, attrs)
    dims, dyn = _dot_result_dims(lhs, rhs, lb, lc, rb, rc)
    return array(_result_type(ctx, lhs, rhs), dims, dyn)


def _sparse_rhs(ctx, attrs, operands):
    """The rhs side of sparsity_config (or None), checked as XLA's InferConvolveShape checks it:
    a tuple rhs is (values, indices), of two elements; a sparse rhs is 1:N.  The values and indices
    themselves are checked where XLA checks them, when the kernel is expanded (MaterializeSparseOperand)."""
    from ...ir.attributes import AttrError, sparsity_sides
    op = ctx.opcode
    rhs = operands[1]
    if rhs.is_tuple and len(rhs.tuple_shapes) != 2:
        fail(op, "rhs", "be an array, or a (values, indices) tuple of 2 elements for sparsity", txt(rhs), operands)
    try:
        side = sparsity_sides(attrs.get("sparsity_config")).get("rhs")
    except AttrError as e:
        fail(op, "sparsity_config", "be readable", str(e), operands)
    if side is None:
        if rhs.is_tuple:
            fail(op, "rhs", "be an array unless sparsity_config has an rhs (a tuple is a sparse kernel)",
                 txt(rhs), operands)
        return None
    if side["num_non_zero"] != 1:
        fail(op, "the rhs sparsity", "be 1:N (XLA supports only one non-zero element a block)",
             f"{side['num_non_zero']}:{side['block_size']}", operands)
    if side["block_size"] <= 0:
        fail(op, "the rhs sparsity block size", "be positive", side["block_size"], operands)
    if rhs.is_tuple:
        expect_array(ctx, list(rhs.tuple_shapes), 0, "the sparse kernel's values")
    return side


@rule("convolution")
def infer_convolution(operands, attrs, ctx):
    """convolution(lhs, rhs): batch / feature / spatial dims placed by dim_labels; spatial sizes
    from the window arithmetic; batch divided by batch_group_count."""
    op = ctx.opcode
    lhs, = expect_operands(ctx, operands, 2, "lhs")
    sparse_rhs = _sparse_rhs(ctx, attrs, operands)
    rhs = operands[1].tuple_shapes[0] if operands[1].is_tuple else expect_array(ctx, operands, 1, "rhs")
    _check_precision(ctx, attrs, operands)
    fgc = attrs.get("feature_group_count", 1)
    bgc = attrs.get("batch_group_count", 1)
    if fgc <= 0:
        fail(op, "feature_group_count", "be positive", fgc, operands)
    if bgc <= 0:
        fail(op, "batch_group_count", "be positive", bgc, operands)
    if fgc > 1 and bgc > 1:
        fail(op, "feature_group_count and batch_group_count", "not both be greater than 1",
             f"{fgc} and {bgc}", operands)
    dn = attrs.get("dim_labels")
    if dn is None:
        fail(op, "dim_labels", "be given", "nothing", operands)
    n = len(dn.input_spatial_dimensions)
    if len(dn.kernel_spatial_dimensions) != n or len(dn.output_spatial_dimensions) != n:
        fail(op, "dim_labels", "give input, kernel and output the same number of spatial dimensions",
             str(dn), operands)
    window = attrs.get("window")
    wdims = tuple(window.dimensions) if window is not None else ()
    if len(wdims) != n:
        fail(op, "window", f"have one dimension per spatial dimension ({n})", len(wdims), operands)
    rank = n + 2
    if lhs.rank != rank:
        fail(op, "lhs", f"have rank {rank} (dim_labels {dn})", txt(lhs), operands)
    if rhs.rank != rank:
        fail(op, "rhs", f"have rank {rank} (dim_labels {dn})", txt(rhs), operands)
    for what, nums in (("input", [dn.input_batch_dimension, dn.input_feature_dimension, *dn.input_spatial_dimensions]),
                       ("kernel", [dn.kernel_input_feature_dimension, dn.kernel_output_feature_dimension,
                                   *dn.kernel_spatial_dimensions]),
                       ("output", [dn.output_batch_dimension, dn.output_feature_dimension,
                                   *dn.output_spatial_dimensions])):
        if sorted(nums) != list(range(rank)):
            fail(op, f"the {what} dimension numbers", "name each dimension exactly once", str(dn), operands)
    in_features = lhs.dims[dn.input_feature_dimension]
    in_batch = lhs.dims[dn.input_batch_dimension]
    k_in = rhs.dims[dn.kernel_input_feature_dimension]
    if sparse_rhs is not None:
        # XLA's InferConvolveShape: a 1:N sparse kernel holds one of every N input features
        k_in *= sparse_rhs["block_size"]
    k_out = rhs.dims[dn.kernel_output_feature_dimension]
    if k_out % bgc:
        fail(op, "the kernel output feature dimension", f"be a multiple of batch_group_count ({bgc})",
             k_out, operands)
    if in_features % fgc or in_features // fgc != k_in:
        fail(op, "the lhs feature dimension",
             f"be feature_group_count ({fgc}) times the kernel input feature dimension ({k_in})",
             in_features, operands)
    if k_out % fgc:
        fail(op, "the kernel output feature dimension", f"be a multiple of feature_group_count ({fgc})",
             k_out, operands)
    if in_batch % bgc:
        fail(op, "the lhs batch dimension", f"be a multiple of batch_group_count ({bgc})", in_batch, operands)
    kernel_spatial = [rhs.dims[d] for d in dn.kernel_spatial_dimensions]
    sizes = [w.size for w in wdims]
    if kernel_spatial != sizes:
        fail(op, "the window size", f"match the kernel spatial dimensions ({'x'.join(map(str, kernel_spatial))})",
             "x".join(map(str, sizes)), operands)
    if rhs.dynamic[dn.kernel_output_feature_dimension]:
        fail(op, "the kernel output feature dimension", "be static", txt(rhs), operands)
    in_spatial = [lhs.dims[d] for d in dn.input_spatial_dimensions]
    base = array(lhs.element_type, in_spatial, [d == UNBOUNDED for d in in_spatial])
    spatial_out = window_output(ctx, operands, base, window, lhs.element_type)
    dims = [0] * rank
    dyn = [False] * rank
    dims[dn.output_batch_dimension] = in_batch // bgc if in_batch != UNBOUNDED else UNBOUNDED
    dims[dn.output_feature_dimension] = k_out
    for j, d in enumerate(dn.output_spatial_dimensions):
        dims[d] = spatial_out.dims[j]
    for i in range(rank):
        if lhs.dynamic[i]:
            if i == dn.input_batch_dimension:
                dyn[dn.output_batch_dimension] = True
            elif i in dn.input_spatial_dimensions:
                dyn[dn.output_spatial_dimensions[dn.input_spatial_dimensions.index(i)]] = True
        if rhs.dynamic[i] and i in dn.kernel_spatial_dimensions:
            dyn[dn.output_spatial_dimensions[dn.kernel_spatial_dimensions.index(i)]] = True
    return array(_result_type(ctx, lhs, rhs), dims, dyn)


_REAL_OF = {"c64": "f32", "c128": "f64"}
_COMPLEX_OF = {"f32": "c64", "f64": "c128"}


@rule("fft")
def infer_fft(operands, attrs, ctx):
    """fft(operand): FFT/IFFT keep the shape; RFFT real->complex halves the innermost dimension
    to fft_length[-1]/2+1; IRFFT complex->real restores it to fft_length[-1]."""
    op = ctx.opcode
    x, = expect_operands(ctx, operands, 1, "operand")
    fft_type = str(attrs.get("fft_type"))
    length = dims_attr(attrs, "fft_length")
    n = len(length)
    if not 1 <= n <= 3:
        fail(op, "fft_length", "have 1 to 3 entries", _dims_text(length), operands)

    def check_rank():
        if x.rank < n:
            fail(op, "operand", f"have rank at least {n} (the FFT rank)", txt(x), operands)

    if fft_type in ("FFT", "IFFT"):
        if not is_complex(x.element_type):
            fail(op, f"the {fft_type} operand", "have a complex element type", x.element_type, operands)
        check_rank()
        return strip(x)
    if fft_type == "RFFT":
        if x.element_type not in _COMPLEX_OF:
            fail(op, "the RFFT operand", "have element type f32 or f64", x.element_type, operands)
        check_rank()
        for i in range(n):
            d = x.rank - n + i
            if x.dims[d] != UNBOUNDED and x.dims[d] != length[i]:
                fail(op, f"operand dimension {d}", f"equal fft_length[{i}]={length[i]}", x.dims[d], operands)
        dims, dyn = list(x.dims), list(x.dynamic)
        if length[-1] != 0:
            dims[-1] = length[-1] // 2 + 1
            if x.dims[-1] == UNBOUNDED:
                dyn[-1] = False
        return array(_COMPLEX_OF[x.element_type], dims, dyn)
    if fft_type == "IRFFT":
        if not is_complex(x.element_type):
            fail(op, "the IRFFT operand", "have a complex element type", x.element_type, operands)
        check_rank()
        for i in range(n - 1):
            d = x.rank - n + i
            if x.dims[d] != length[i]:
                fail(op, f"operand dimension {d}", f"equal fft_length[{i}]={length[i]}", x.dims[d], operands)
        last = x.dims[-1]
        if (last != 0 or length[-1] != 0) and last != UNBOUNDED and last != length[-1] // 2 + 1:
            fail(op, f"operand dimension {x.rank - 1}", f"be fft_length[-1]/2+1={length[-1] // 2 + 1}",
                 last, operands)
        dims, dyn = list(x.dims), list(x.dynamic)
        dims[-1] = length[-1]
        if last == UNBOUNDED:
            dyn[-1] = False
        return array(_REAL_OF[x.element_type], dims, dyn)
    fail(op, "fft_type", "be one of FFT, IFFT, RFFT, IRFFT", fft_type, operands)


@rule("triangular-solve")
def infer_triangular_solve(operands, attrs, ctx):
    """triangular-solve(a, b): b's shape; a is a batch of square matrices sharing b's batch dims."""
    op = ctx.opcode
    a, b = expect_operands(ctx, operands, 2, "a", "b")
    if not (is_float(a.element_type) or is_complex(a.element_type)) or a.element_type != b.element_type:
        fail(op, "the element types of a and b", "be the same floating-point or complex type",
             f"{a.element_type} and {b.element_type}", operands)
    if a.rank < 2:
        fail(op, "a", "have rank at least 2", txt(a), operands)
    if b.rank != a.rank:
        fail(op, "b", f"have the rank of a ({a.rank})", txt(b), operands)
    if not compatible_dim(a.dims[-2], a.dims[-1]):
        fail(op, "the two minor dimensions of a", "be equal", f"{a.dims[-2]} and {a.dims[-1]}", operands)
    left = bool(attrs.get("left_side", False))
    shared = b.dims[-2] if left else b.dims[-1]
    if not compatible_dim(a.dims[-1], shared):
        fail(op, f"dimension {b.rank - (2 if left else 1)} of b (left_side={str(left).lower()})",
             f"equal the size of a ({a.dims[-1]})", shared, operands)
    if a.dims[:-2] != b.dims[:-2]:
        fail(op, "the batch dimensions of a and b", "be equal", f"{txt(a)} and {txt(b)}", operands)
    transpose = attrs.get("transpose_a")
    if transpose is None or str(transpose) == "TRANSPOSE_INVALID":
        fail(op, "transpose_a", "be NO_TRANSPOSE, TRANSPOSE or ADJOINT",
             "TRANSPOSE_INVALID" if transpose is not None else "nothing (TRANSPOSE_INVALID)", operands)
    return strip(b)


@rule("cholesky")
def infer_cholesky(operands, attrs, ctx):
    """cholesky(a): a's shape; a is a batch of square floating-point or complex matrices."""
    op = ctx.opcode
    a, = expect_operands(ctx, operands, 1, "a")
    if not (is_float(a.element_type) or is_complex(a.element_type)):
        fail(op, "the element type of a", "be floating-point or complex", a.element_type, operands)
    if a.rank < 2:
        fail(op, "a", "have rank at least 2", txt(a), operands)
    if not compatible_dim(a.dims[-2], a.dims[-1]):
        fail(op, "the two minor dimensions of a", "be equal", f"{a.dims[-2]} and {a.dims[-1]}", operands)
    return strip(a)


# ---------------------------------------------------------------------------- batch norm

def _bn_common(ctx, operands, attrs, x, vectors):
    """Checks shared by the batch-norm ops; `vectors` are (name, shape) of the per-feature operands."""
    op = ctx.opcode
    fi = attrs.get("feature_index")
    if fi is None:
        fail(op, "feature_index", "be given", "nothing", operands)
    if fi >= x.rank:
        fail(op, "feature_index", f"be smaller than the operand rank ({x.rank})", fi, operands)
    if fi < 0:
        fail(op, "feature_index", "be non-negative", fi, operands)
    if x.rank < 1:
        fail(op, "operand", "have rank at least 1", txt(x), operands)
    for name, v in vectors:
        if v.rank != 1:
            fail(op, name, "have rank 1", txt(v), operands)
    if not is_float(x.element_type):
        fail(op, "the operand element type", "be floating-point", x.element_type, operands)
    for name, v in vectors:
        if not is_float(v.element_type):  # the operand is floating-point: same type up to precision
            fail(op, f"the element type of {name}", f"be the operand's ({x.element_type})", v.element_type, operands)
    count = x.dims[fi]
    for name, v in vectors:
        if not compatible_dim(v.dims[0], count):
            fail(op, f"the size of {name}", f"equal the feature count ({count})", v.dims[0], operands)
    return fi


def _feature_vector(x, fi):
    return array(x.element_type, [x.dims[fi]], [x.dynamic[fi]])


@rule("batch-norm-training")
def infer_batch_norm_training(operands, attrs, ctx):
    """batch-norm-training(operand, scale, offset) -> (normalized, batch mean, batch variance)."""
    x, scale, offset = expect_operands(ctx, operands, 3, "operand", "scale", "offset")
    fi = _bn_common(ctx, operands, attrs, x, [("offset", offset), ("scale", scale)])
    v = _feature_vector(x, fi)
    return tup([strip(x), v, v])


@rule("batch-norm-inference")
def infer_batch_norm_inference(operands, attrs, ctx):
    """batch-norm-inference(operand, scale, offset, mean, variance) -> normalized operand."""
    x, = expect_operands(ctx, operands, 5, "operand")
    names = ["scale", "offset", "mean", "variance"]
    vecs = [(names[i - 1], expect_array(ctx, operands, i, names[i - 1])) for i in range(1, 5)]
    _bn_common(ctx, operands, attrs, x, vecs)
    return strip(x)


@rule("batch-norm-grad")
def infer_batch_norm_grad(operands, attrs, ctx):
    """batch-norm-grad(operand, scale, mean, variance, grad_output) -> (grad operand, grad scale,
    grad offset)."""
    op = ctx.opcode
    x, = expect_operands(ctx, operands, 5, "operand")
    names = ["scale", "mean", "variance", "grad_output"]
    arrs = [expect_array(ctx, operands, i, names[i - 1]) for i in range(1, 5)]
    grad = arrs[3]
    if grad.rank != x.rank:
        fail(op, "grad_output", f"have the operand's rank ({x.rank})", txt(grad), operands)
    if not is_float(grad.element_type):
        fail(op, "the grad_output element type", "be floating-point", grad.element_type, operands)
    fi = _bn_common(ctx, operands, attrs, x, list(zip(names[:3], arrs[:3])))
    for i in range(x.rank):
        if not compatible_dim(x.dims[i], grad.dims[i]):
            fail(op, "grad_output", f"have the operand's dimensions ({txt(x)})", txt(grad), operands)
    v = _feature_vector(x, fi)
    return tup([strip(x), v, v])

