"""Shape rules of the linalg and normalization families: dot, ragged-dot, scaled-dot, convolution,
fft, triangular-solve, cholesky, batch-norm-training / -inference / -grad.

Valid cases: every instruction of these opcodes in samples/{ops,syntax,jax} infers its declared
shape (layouts ignored), plus the examples of the operation semantics.  Invalid cases: a table of
(operands, instruction, expected message fragment) per opcode, written as small HLO modules; every
message follows the house template `<opcode>: <what> must <constraint>, got <actual> for <operand shapes>`.
"""
from __future__ import annotations


import pytest

from .rules_harness import S, RuleTests, context, opcode_of, samples  # noqa: F401

from hlo_cli.shapes import RULES, infer_shape
from hlo_cli.shapes.registry import RuleContext


OPCODES = ("dot", "ragged-dot", "scaled-dot", "convolution", "fft", "triangular-solve", "cholesky",
           "batch-norm-training", "batch-norm-inference", "batch-norm-grad")

# Samples XLA itself rejects; our rules must reject them too (an error, or an inferred shape that
# differs from the declared one).
XLA_REJECTS = {
    "syntax/attr_window_conv.hlo:c5":
        "dim_labels fb01 make dimension 1 (size 1) the batch, so the output is f32[1,16,6,6], not the "
        "declared f32[4,16,6,6] (StableHLO: inferred shape '[1, 16, 6, 6]' is incompatible)",
}


# ----------------------------------------------------------------------------- harness


COMPS: dict[str, str] = {}

_H = RuleTests(COMPS, XLA_REJECTS)
_context, _samples, _check_sample = context, samples, _H.check_sample
_module, infer, expect_error = _H.module, _H.infer, _H.expect_error


# ----------------------------------------------------------------------------- valid cases

def test_every_opcode_has_a_rule():
    assert all(op in RULES for op in OPCODES)


@pytest.mark.parametrize("path", _samples(OPCODES), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_samples_infer_their_declared_shape(path):
    assert _check_sample(path, OPCODES) > 0


@pytest.mark.parametrize("operands, line, expected", [
    # DotGeneral, contracting dimensions example: {{1,2,3},{4,5,6}} . {{1,1,1},{2,2,2}} -> 2x2
    (["f32[2,3]", "f32[2,3]"], "f32[2,2] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={1}",
     "f32[2,2]"),
    # batch dimensions example: batch 2 of 2x2 matrices
    (["f32[2,2,2]", "f32[2,2,2]"], "f32[2,2,2] dot(p0, p1), lhs_batch_dims={0}, lhs_contracting_dims={2}, "
     "rhs_batch_dims={0}, rhs_contracting_dims={1}", "f32[2,2,2]"),
    # the table: [b0, m, k] dot [b0, k, n] -> [b0, m, n]; [b0, b1, m, k] dot [b0, b1, k, n] -> [b0, b1, m, n]
    (["f32[7,3,5]", "f32[7,5,4]"], "f32[7,3,4] dot(p0, p1), lhs_batch_dims={0}, lhs_contracting_dims={2}, "
     "rhs_batch_dims={0}, rhs_contracting_dims={1}", "f32[7,3,4]"),
    (["f32[7,6,3,5]", "f32[7,6,5,4]"], "f32[7,6,3,4] dot(p0, p1), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, "
     "rhs_batch_dims={0,1}, rhs_contracting_dims={2}", "f32[7,6,3,4]"),
    # the result: batch dims, then lhs free dims, then rhs free dims (outer product: no contraction)
    (["f32[3]", "f32[4]"], "f32[3,4] dot(p0, p1)", "f32[3,4]"),
    # mixed precision: the declared type is the preferred element type
    (["bf16[2,3]", "bf16[3,4]"], "f32[2,4] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
     "f32[2,4]"),
    (["s8[2,3]", "s8[3,4]"], "s32[2,4] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
     "s32[2,4]"),
    # dynamic dimensions follow their dimension
    (["f32[<=8,3]", "f32[3,4]"], "f32[<=8,4] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
     "f32[<=8,4]"),
    # ConvWithGeneralPadding: output [batch, z=output-z, spatial...] with padding and strides
    (["f32[1,4,5,5]", "f32[6,4,3,3]"], "f32[1,6,3,3] convolution(p0, p1), window={size=3x3 stride=2x2 pad=1_1x1_1}, "
     "dim_labels=bf01_oi01->bf01", "f32[1,6,3,3]"),
    # lhs (base) and rhs (window) dilation
    (["f32[1,1,4]", "f32[1,1,3]"], "f32[1,1,5] convolution(p0, p1), window={size=3 lhs_dilate=2}, "
     "dim_labels=bf0_oi0->bf0", "f32[1,1,5]"),
    (["f32[1,1,9]", "f32[1,1,3]"], "f32[1,1,5] convolution(p0, p1), window={size=3 rhs_dilate=2}, "
     "dim_labels=bf0_oi0->bf0", "f32[1,1,5]"),
    # feature_group_count: the kernel's input feature size is the lhs feature size / groups (depthwise)
    (["f32[2,8,8,6]", "f32[3,3,1,12]"], "f32[2,6,6,12] convolution(p0, p1), window={size=3x3}, "
     "dim_labels=b01f_01io->b01f, feature_group_count=6", "f32[2,6,6,12]"),
    # batch_group_count: the output batch is the input batch / batch_group_count
    (["f32[4,5,5,3]", "f32[3,3,3,8]"], "f32[2,3,3,8] convolution(p0, p1), window={size=3x3}, "
     "dim_labels=b01f_01io->b01f, batch_group_count=2", "f32[2,3,3,8]"),
    # a dynamic input batch or spatial dimension makes the matching output dimension dynamic
    (["f32[<=4,1,7]", "f32[2,1,3]"], "f32[<=4,2,5] convolution(p0, p1), window={size=3}, dim_labels=bf0_oi0->bf0",
     "f32[<=4,2,5]"),
    (["f32[4,1,<=7]", "f32[2,1,3]"], "f32[4,2,<=5] convolution(p0, p1), window={size=3}, dim_labels=bf0_oi0->bf0",
     "f32[4,2,<=5]"),
    # Fft: FFT/IFFT keep the shape; RFFT(fft_length=[16]) and RFFT(fft_length=[17]) have the same
    # output shape; IRFFT expands the innermost dimension to fft_length[-1]
    (["c64[4,8]"], "c64[4,8] fft(p0), fft_type=FFT, fft_length={8}", "c64[4,8]"),
    (["c128[2,4,8]"], "c128[2,4,8] fft(p0), fft_type=IFFT, fft_length={4,8}", "c128[2,4,8]"),
    (["f32[3,16]"], "c64[3,9] fft(p0), fft_type=RFFT, fft_length={16}", "c64[3,9]"),
    (["f32[3,17]"], "c64[3,9] fft(p0), fft_type=RFFT, fft_length={17}", "c64[3,9]"),
    (["f64[2,4,6]"], "c128[2,4,4] fft(p0), fft_type=RFFT, fft_length={4,6}", "c128[2,4,4]"),
    (["c64[3,9]"], "f32[3,16] fft(p0), fft_type=IRFFT, fft_length={16}", "f32[3,16]"),
    (["c64[3,9]"], "f32[3,17] fft(p0), fft_type=IRFFT, fft_length={17}", "f32[3,17]"),
    # TriangularSolve / Cholesky keep b's / a's shape
    (["f32[2,4,4]", "f32[2,4,3]"], "f32[2,4,3] triangular-solve(p0, p1), left_side=true, lower=true, "
     "transpose_a=NO_TRANSPOSE", "f32[2,4,3]"),
    (["c64[3,3]", "c64[5,3]"], "c64[5,3] triangular-solve(p0, p1), transpose_a=ADJOINT", "c64[5,3]"),
    (["f64[2,5,5]"], "f64[2,5,5] cholesky(p0), lower=true", "f64[2,5,5]"),
    # BatchNormTraining: (normalized, mean, variance) of the feature dimension
    (["f32[2,4,4,3]", "f32[3]", "f32[3]"], "(f32[2,4,4,3], f32[3], f32[3]) batch-norm-training(p0, p1, p2), "
     "epsilon=0.001, feature_index=3", "(f32[2,4,4,3], f32[3], f32[3])"),
    (["f32[2,3,4]", "f32[3]", "f32[3]", "f32[3]", "f32[3]"], "f32[2,3,4] batch-norm-inference(p0, p1, p2, p3, p4), "
     "epsilon=0.001, feature_index=1", "f32[2,3,4]"),
    (["f32[2,3,4]", "f32[4]", "f32[4]", "f32[4]", "f32[2,3,4]"], "(f32[2,3,4], f32[4], f32[4]) "
     "batch-norm-grad(p0, p1, p2, p3, p4), epsilon=0.001, feature_index=2", "(f32[2,3,4], f32[4], f32[4])"),
    # RaggedDot, the three modes
    (["f32[11,5]", "f32[3,5,7]", "s32[3]"], "f32[11,7] ragged-dot(p0, p1, p2), lhs_contracting_dims={1}, "
     "rhs_contracting_dims={1}, lhs_ragged_dims={0}, rhs_group_dims={0}", "f32[11,7]"),
    (["f32[2,10]", "f32[10,4]", "s32[3]"], "f32[3,2,4] ragged-dot(p0, p1, p2), lhs_contracting_dims={1}, "
     "rhs_contracting_dims={0}, lhs_ragged_dims={1}", "f32[3,2,4]"),
    (["f32[6,2,5]", "f32[6,5,4]", "s32[3]"], "f32[6,2,4] ragged-dot(p0, p1, p2), lhs_batch_dims={0}, "
     "rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={1}, lhs_ragged_dims={0}", "f32[6,2,4]"),
])
def test_semantics_examples(operands, line, expected):
    assert infer(operands, line).without_layout() == S(expected).without_layout()


def test_result_type_without_a_declared_shape():
    """Without a declared shape, dot and convolution take the higher-precision operand type."""
    ctx = RuleContext("dot")
    got = infer_shape("dot", [S("bf16[2,3]"), S("f32[3,4]")],
                      {"lhs_contracting_dims": (1,), "rhs_contracting_dims": (0,)}, ctx)
    assert got.without_layout() == S("f32[2,4]").without_layout()
    got = infer_shape("dot", [S("s8[2]"), S("s32[2]")], {}, RuleContext("dot"))
    assert got.without_layout() == S("s32[2,2]").without_layout()


# ----------------------------------------------------------------------------- invalid cases

DOT = "lhs_contracting_dims={1}, rhs_contracting_dims={0}"

INVALID = [
    # --- dot (operation semantics: contracting / batch dimension sizes must match)
    ("dot-contracting-size", ["f32[2,3]", "f32[2,3]"], f"f32[2,3] dot(p0, p1), {DOT}",
     "contracting dimension sizes must be equal, got lhs dimension 1 of size 3 vs rhs dimension 0 of size 2"),
    ("dot-batch-size", ["f32[2,2,2]", "f32[3,2,2]"], "f32[2,2,2] dot(p0, p1), lhs_batch_dims={0}, "
     "lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}",
     "batch dimension sizes must be equal, got lhs dimension 0 of size 2 vs rhs dimension 0 of size 3"),
    ("dot-dimension-range", ["f32[2,3]", "f32[3,4]"],
     "f32[2,4] dot(p0, p1), lhs_contracting_dims={2}, rhs_contracting_dims={0}",
     "lhs batch and contracting dimensions must be in [0, 2), got 2"),
    ("dot-dimension-repeated", ["f32[3,3]", "f32[3,3]"], "f32[3] dot(p0, p1), lhs_batch_dims={0}, "
     "lhs_contracting_dims={0}, rhs_batch_dims={0}, rhs_contracting_dims={1}",
     "lhs batch and contracting dimensions must be unique, got {0,0}"),
    ("dot-contracting-count", ["f32[2,3]", "f32[3,4]"], "f32[2,3,4] dot(p0, p1), lhs_contracting_dims={1}",
     "the number of contracting dimensions must be the same for lhs (1) and rhs, got 0"),
    ("dot-batch-count", ["f32[2,3]", "f32[2,3]"], "f32[2,2] dot(p0, p1), lhs_batch_dims={0}, "
     "lhs_contracting_dims={1}, rhs_contracting_dims={1}",
     "the number of batch dimensions must be the same for lhs (1) and rhs, got 0"),
    ("dot-precision-count", ["f32[2,3]", "f32[3,4]"], f"f32[2,4] dot(p0, p1), {DOT}, "
     "operand_precision={high,high,high}", "operand_precision must have 2 entries"),
    ("dot-tuple-operand", ["(f32[2,3])", "f32[3,4]"], f"f32[2,4] dot(p0, p1), {DOT}", "lhs must be an array"),
    # --- ragged-dot
    ("ragged-dot-no-ragged-dim", ["f32[11,5]", "f32[3,5,7]", "s32[3]"], "f32[11,7] ragged-dot(p0, p1, p2), "
     "lhs_contracting_dims={1}, rhs_contracting_dims={1}, rhs_group_dims={0}",
     "lhs_ragged_dims must name exactly one lhs dimension, got {}"),
    ("ragged-dot-missing-group-dim", ["f32[11,5]", "f32[5,7]", "s32[3]"], "f32[11,7] ragged-dot(p0, p1, p2), "
     "lhs_contracting_dims={1}, rhs_contracting_dims={0}, lhs_ragged_dims={0}",
     "rhs_group_dims must name exactly one rhs dimension when the ragged dimension is non-contracting, got {}"),
    ("ragged-dot-group-count", ["f32[11,5]", "f32[3,5,7]", "s32[4]"], "f32[11,7] ragged-dot(p0, p1, p2), "
     "lhs_contracting_dims={1}, rhs_contracting_dims={1}, lhs_ragged_dims={0}, rhs_group_dims={0}",
     "the rhs group dimension must have size 4 (the number of groups), got 3"),
    ("ragged-dot-group-sizes-shape", ["f32[2,11,5]", "f32[3,2,5,7]", "s32[5,3]"],
     "f32[2,11,7] ragged-dot(p0, p1, p2), lhs_batch_dims={0}, rhs_batch_dims={1}, lhs_contracting_dims={2}, "
     "rhs_contracting_dims={2}, lhs_ragged_dims={1}, rhs_group_dims={0}",
     "group_sizes must have shape [2,3], got s32[5,3]"),
    ("ragged-dot-contracting-with-group", ["f32[2,10]", "f32[3,10,4]", "s32[3]"], "f32[3,2,4] ragged-dot(p0, p1, p2), "
     "lhs_contracting_dims={1}, rhs_contracting_dims={1}, lhs_ragged_dims={1}, rhs_group_dims={0}",
     "rhs_group_dims must be empty when the ragged dimension is contracting"),
    ("ragged-dot-group-is-contracting", ["f32[11,5]", "f32[3,5,7]", "s32[3]"], "f32[11,7] ragged-dot(p0, p1, p2), "
     "lhs_contracting_dims={1}, rhs_contracting_dims={1}, lhs_ragged_dims={0}, rhs_group_dims={1}",
     "the rhs group dimension must not be a batch or contracting dimension, got 1"),
    # --- scaled-dot (operands lhs, rhs, lhs_scale, rhs_scale; XLA's ShapeVerifier::HandleScaledDot)
    ("scaled-dot-scale-rank", ["f8e4m3fn[4,64]", "f8e4m3fn[8,64]", "f8e8m0fnu[4]", "f8e8m0fnu[8,2]"],
     "bf16[4,8] scaled-dot(p0, p1, p2, p3), lhs_contracting_dims={1}, rhs_contracting_dims={1}",
     "lhs_scale must have the rank of lhs (2), or be a bf16 no-op scale of a bf16 lhs (all dimensions 1), "
     "got f8e8m0fnu[4]"),
    ("scaled-dot-block-size", ["f8e4m3fn[4,64]", "f8e4m3fn[8,64]", "f8e8m0fnu[4,2]", "f8e8m0fnu[8,3]"],
     "bf16[4,8] scaled-dot(p0, p1, p2, p3), lhs_contracting_dims={1}, rhs_contracting_dims={1}",
     "dimension 1 of rhs must be a multiple of dimension 1 of rhs_scale (3), got 64"),
    ("scaled-dot-contracting-size", ["f8e4m3fn[4,64]", "f8e4m3fn[8,32]", "f8e8m0fnu[4,2]", "f8e8m0fnu[8,2]"],
     "bf16[4,8] scaled-dot(p0, p1, p2, p3), lhs_contracting_dims={1}, rhs_contracting_dims={1}",
     "contracting dimension sizes must be equal"),
    ("scaled-dot-scalar-scales", ["bf16[4,64]", "bf16[8,64]", "bf16[]", "bf16[]"],
     "bf16[4,8] scaled-dot(p0, p1, p2, p3), lhs_contracting_dims={1}, rhs_contracting_dims={1}",
     "the scales must not both be scalars, got bf16[] and bf16[]"),
    # --- convolution (operation semantics: the kernel's input-z times feature_group_count is the
    # lhs z; batch_group_count divides the lhs batch; window sizes are the kernel spatial sizes)
    ("convolution-features", ["f32[1,8,8,4]", "f32[3,3,3,16]"], "f32[1,6,6,16] convolution(p0, p1), "
     "window={size=3x3}, dim_labels=b01f_01io->b01f",
     "the lhs feature dimension must be feature_group_count (1) times the kernel input feature dimension (3), got 4"),
    ("convolution-group-features", ["f32[1,8,8,6]", "f32[3,3,2,8]"], "f32[1,6,6,8] convolution(p0, p1), "
     "window={size=3x3}, dim_labels=b01f_01io->b01f, feature_group_count=3",
     "the kernel output feature dimension must be a multiple of feature_group_count (3), got 8"),
    ("convolution-batch-groups", ["f32[3,8,8,4]", "f32[3,3,4,4]"], "f32[1,6,6,4] convolution(p0, p1), "
     "window={size=3x3}, dim_labels=b01f_01io->b01f, batch_group_count=2",
     "the lhs batch dimension must be a multiple of batch_group_count (2), got 3"),
    ("convolution-both-groups", ["f32[4,8,8,4]", "f32[3,3,2,4]"], "f32[2,6,6,4] convolution(p0, p1), "
     "window={size=3x3}, dim_labels=b01f_01io->b01f, feature_group_count=2, batch_group_count=2",
     "feature_group_count and batch_group_count must not both be greater than 1, got 2 and 2"),
    ("convolution-window-vs-kernel", ["f32[1,8,8,4]", "f32[3,3,4,16]"], "f32[1,7,7,16] convolution(p0, p1), "
     "window={size=2x2}, dim_labels=b01f_01io->b01f",
     "the window size must match the kernel spatial dimensions (3x3), got 2x2"),
    ("convolution-window-rank", ["f32[1,8,8,4]", "f32[3,3,4,16]"], "f32[1,6,6,16] convolution(p0, p1), "
     "window={size=3}, dim_labels=b01f_01io->b01f", "window must have one dimension per spatial dimension (2), got 1"),
    ("convolution-lhs-rank", ["f32[8,8,4]", "f32[3,3,4,16]"], "f32[1,6,6,16] convolution(p0, p1), "
     "window={size=3x3}, dim_labels=b01f_01io->b01f", "lhs must have rank 4"),
    ("convolution-stride", ["f32[1,8,8,4]", "f32[3,3,4,16]"], "f32[1,6,6,16] convolution(p0, p1), "
     "window={size=3x3 stride=0x1}, dim_labels=b01f_01io->b01f", "window stride must be positive, got 0"),
    ("convolution-precision", ["f32[1,8,8,4]", "f32[3,3,4,16]"], "f32[1,6,6,16] convolution(p0, p1), "
     "window={size=3x3}, dim_labels=b01f_01io->b01f, operand_precision={high}", "operand_precision must have 2"),
    # --- fft
    ("fft-real-input", ["f32[8]"], "c64[8] fft(p0), fft_type=FFT, fft_length={8}",
     "the FFT operand must have a complex element type, got f32"),
    ("fft-rfft-complex-input", ["c64[8]"], "c64[5] fft(p0), fft_type=RFFT, fft_length={8}",
     "the RFFT operand must have element type f32 or f64, got c64"),
    ("fft-rfft-length", ["f32[4,8]"], "c64[4,9] fft(p0), fft_type=RFFT, fft_length={16}",
     "operand dimension 1 must equal fft_length[0]=16, got 8"),
    ("fft-irfft-innermost", ["c64[4,8]"], "f32[4,8] fft(p0), fft_type=IRFFT, fft_length={8}",
     "operand dimension 1 must be fft_length[-1]/2+1=5, got 8"),
    ("fft-irfft-outer", ["c64[3,5]"], "f32[4,8] fft(p0), fft_type=IRFFT, fft_length={4,8}",
     "operand dimension 0 must equal fft_length[0]=4, got 3"),
    ("fft-rank-4", ["c64[2,2,2,2]"], "c64[2,2,2,2] fft(p0), fft_type=FFT, fft_length={2,2,2,2}",
     "fft_length must have 1 to 3 entries, got {2,2,2,2}"),
    ("fft-operand-rank", ["c64[8]"], "c64[8] fft(p0), fft_type=FFT, fft_length={8,8}",
     "operand must have rank at least 2 (the FFT rank), got c64[8]"),
    # --- triangular-solve
    ("triangular-solve-types", ["f32[4,4]", "f64[4,3]"], "f64[4,3] triangular-solve(p0, p1), left_side=true, "
     "transpose_a=NO_TRANSPOSE", "the element types of a and b must be the same floating-point or complex type"),
    ("triangular-solve-integer", ["s32[4,4]", "s32[4,3]"], "s32[4,3] triangular-solve(p0, p1), left_side=true, "
     "transpose_a=NO_TRANSPOSE", "must be the same floating-point or complex type, got s32 and s32"),
    ("triangular-solve-square", ["f32[4,3]", "f32[4,3]"], "f32[4,3] triangular-solve(p0, p1), left_side=true, "
     "transpose_a=NO_TRANSPOSE", "the two minor dimensions of a must be equal, got 4 and 3"),
    ("triangular-solve-shared", ["f32[4,4]", "f32[4,3]"], "f32[4,3] triangular-solve(p0, p1), "
     "transpose_a=NO_TRANSPOSE", "dimension 1 of b (left_side=false) must equal the size of a (4), got 3"),
    ("triangular-solve-rank", ["f32[4]", "f32[4]"], "f32[4] triangular-solve(p0, p1), transpose_a=NO_TRANSPOSE",
     "a must have rank at least 2, got f32[4]"),
    ("triangular-solve-batch", ["f32[2,4,4]", "f32[3,4,4]"], "f32[3,4,4] triangular-solve(p0, p1), "
     "left_side=true, transpose_a=NO_TRANSPOSE", "the batch dimensions of a and b must be equal"),
    ("triangular-solve-no-transpose-a", ["f32[4,4]", "f32[4,3]"], "f32[4,3] triangular-solve(p0, p1), "
     "left_side=true, lower=true", "transpose_a must be NO_TRANSPOSE, TRANSPOSE or ADJOINT"),
    # --- cholesky
    ("cholesky-integer", ["s32[4,4]"], "s32[4,4] cholesky(p0)", "the element type of a must be floating-point"),
    ("cholesky-rank", ["f32[4]"], "f32[4] cholesky(p0)", "a must have rank at least 2, got f32[4]"),
    ("cholesky-square", ["f32[4,5]"], "f32[4,5] cholesky(p0)", "the two minor dimensions of a must be equal"),
    # --- batch norm
    ("batch-norm-training-feature-index", ["f32[2,3]", "f32[3]", "f32[3]"],
     "(f32[2,3], f32[3], f32[3]) batch-norm-training(p0, p1, p2), epsilon=0.001, feature_index=2",
     "feature_index must be smaller than the operand rank (2), got 2"),
    ("batch-norm-training-scale-size", ["f32[2,3]", "f32[4]", "f32[3]"],
     "(f32[2,3], f32[3], f32[3]) batch-norm-training(p0, p1, p2), epsilon=0.001, feature_index=1",
     "the size of scale must equal the feature count (3), got 4"),
    ("batch-norm-training-integer", ["s32[2,3]", "s32[3]", "s32[3]"],
     "(s32[2,3], s32[3], s32[3]) batch-norm-training(p0, p1, p2), epsilon=0.001, feature_index=1",
     "the operand element type must be floating-point, got s32"),
    ("batch-norm-training-offset-rank", ["f32[2,3]", "f32[3]", "f32[3,1]"],
     "(f32[2,3], f32[3], f32[3]) batch-norm-training(p0, p1, p2), epsilon=0.001, feature_index=1",
     "offset must have rank 1, got f32[3,1]"),
    ("batch-norm-inference-mean-size", ["f32[2,3]", "f32[3]", "f32[3]", "f32[2]", "f32[3]"],
     "f32[2,3] batch-norm-inference(p0, p1, p2, p3, p4), epsilon=0.001, feature_index=1",
     "the size of mean must equal the feature count (3), got 2"),
    ("batch-norm-inference-variance-type", ["f32[2,3]", "f32[3]", "f32[3]", "f32[3]", "s32[3]"],
     "f32[2,3] batch-norm-inference(p0, p1, p2, p3, p4), epsilon=0.001, feature_index=1",
     "the element type of variance must be the operand's (f32), got s32"),
    ("batch-norm-grad-output-rank", ["f32[2,3]", "f32[3]", "f32[3]", "f32[3]", "f32[6]"],
     "(f32[2,3], f32[3], f32[3]) batch-norm-grad(p0, p1, p2, p3, p4), epsilon=0.001, feature_index=1",
     "grad_output must have the operand's rank (2), got f32[6]"),
    ("batch-norm-grad-output-dims", ["f32[2,3]", "f32[3]", "f32[3]", "f32[3]", "f32[3,3]"],
     "(f32[2,3], f32[3], f32[3]) batch-norm-grad(p0, p1, p2, p3, p4), epsilon=0.001, feature_index=1",
     "grad_output must have the operand's dimensions (f32[2,3]), got f32[3,3]"),
]


@pytest.mark.parametrize("operands, line, fragment", [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid(operands, line, fragment):
    expect_error(fragment, operands, line)


def test_invalid_table_covers_every_opcode():
    covered = {opcode_of(line) for _, _, line, _ in INVALID}
    assert covered == set(OPCODES)


# ----------------------------------------------------------------------------- scaled-dot
# XLA's order is scaled-dot(lhs, rhs, lhs_scale, rhs_scale) (HloScaledDotInstruction, the builder,
# every scaled-dot in XLA's tests); ShapeVerifier::HandleScaledDot checks each side's scale unless
# it is a bf16 no-op scale, then that the scales are not both scalars, then the dot rule.
_MX = "lhs_contracting_dims={1}, rhs_contracting_dims={0}"


@pytest.mark.parametrize("operands, line, expected", [
    # MXFP8: a scale per block of 32 along the contracting dim
    (["f8e4m3fn[4,64]", "f8e4m3fn[64,8]", "f8e8m0fnu[4,2]", "f8e8m0fnu[2,8]"],
     f"f32[4,8] scaled-dot(p0, p1, p2, p3), {_MX}", "f32[4,8]"),
    # element types are free: the verifier checks none (an e8m0 rhs, an f8 scale)
    (["f8e5m2[2,10]", "f8e8m0fnu[10,2]", "f8e5m2[2,2]", "f8e8m0fnu[2,2]"],
     f"f32[2,2] scaled-dot(p0, p1, p2, p3), {_MX}", "f32[2,2]"),
    # blocks along non-contracting dims too: 2 rows share a scale
    (["f32[2,10]", "f32[10,2]", "f32[1,5]", "f32[5,1]"], f"f32[2,2] scaled-dot(p0, p1, p2, p3), {_MX}",
     "f32[2,2]"),
    # a bf16 no-op scale: a scalar, or all-ones dims of any rank, of a bf16 operand
    (["bf16[4,64]", "f8e4m3fn[64,8]", "bf16[]", "f8e8m0fnu[2,8]"],
     f"bf16[4,8] scaled-dot(p0, p1, p2, p3), {_MX}", "bf16[4,8]"),
    (["bf16[4,64]", "f8e4m3fn[64,8]", "bf16[1,1,1]", "f8e8m0fnu[2,8]"],
     f"bf16[4,8] scaled-dot(p0, p1, p2, p3), {_MX}", "bf16[4,8]"),
    # no-op scales skip the one-contracting-dimension check
    (["bf16[4,8,8]", "bf16[8,8,5]", "bf16[]", "bf16[1,1,1]"],
     "f32[4,5] scaled-dot(p0, p1, p2, p3), lhs_contracting_dims={1,2}, rhs_contracting_dims={0,1}", "f32[4,5]"),
    # an f32 [1,1] scale of an f32 operand is no no-op but an ordinary scale: one block
    (["f32[2,10]", "f32[10,2]", "f32[1,1]", "f32[5,2]"], f"f32[2,2] scaled-dot(p0, p1, p2, p3), {_MX}", "f32[2,2]"),
    # a scale dim larger than an empty operand dim divides it (0 % 4 == 0)
    (["f8e4m3fn[0,64]", "f8e4m3fn[64,8]", "f8e8m0fnu[4,2]", "f8e8m0fnu[2,8]"],
     f"f32[0,8] scaled-dot(p0, p1, p2, p3), {_MX}", "f32[0,8]"),
    # batch dims, contracting dims elsewhere, the declared type as the preferred type
    (["f8e4m3fn[2,64,3]", "f8e5m2[2,5,64]", "f8e8m0fnu[2,2,3]", "f8e8m0fnu[2,5,2]"],
     "bf16[2,3,5] scaled-dot(p0, p1, p2, p3), lhs_batch_dims={0}, lhs_contracting_dims={1}, rhs_batch_dims={0}, "
     "rhs_contracting_dims={2}", "bf16[2,3,5]"),
])
def test_scaled_dot_valid(operands, line, expected):
    assert infer(operands, line).without_layout() == S(expected).without_layout()


@pytest.mark.parametrize("operands, line, fragment", [
    # (lhs, lhs_scale, rhs, rhs_scale), the order this project used to assume, read in XLA's
    (["f8e4m3fn[4,64]", "f8e8m0fnu[4,2]", "f8e4m3fn[8,64]", "f8e8m0fnu[8,2]"],
     "bf16[4,8] scaled-dot(p0, p1, p2, p3), lhs_contracting_dims={1}, rhs_contracting_dims={1}",
     "dimension 0 of lhs must be a multiple of dimension 0 of lhs_scale (8), got 4"),
    # XLA's ScaledDotInvalidScaleShapeFails: a scale of another rank
    (["f32[2,10]", "f32[10,2]", "f32[2,2,2]", "f32[2,2,2]"], f"f32[2,2] scaled-dot(p0, p1, p2, p3), {_MX}",
     "lhs_scale must have the rank of lhs (2)"),
    # XLA's ScaledDotWithInvalidScaleContractingDimSizeFails: 10 is no multiple of 6
    (["f32[2,10]", "f32[10,2]", "f32[2,6]", "f32[6,2]"], f"f32[2,2] scaled-dot(p0, p1, p2, p3), {_MX}",
     "dimension 1 of lhs must be a multiple of dimension 1 of lhs_scale (6), got 10"),
    # XLA's ScaledDotWithNoScalesFails: two no-op scalars
    (["bf16[2,10]", "bf16[10,2]", "bf16[]", "bf16[]"], f"f32[2,2] scaled-dot(p0, p1, p2, p3), {_MX}",
     "the scales must not both be scalars"),
    # no-op scales are bf16 scales of bf16 operands only, and need an operand dim other than 1
    (["f32[2,10]", "f32[10,2]", "f32[]", "f32[5,2]"], f"f32[2,2] scaled-dot(p0, p1, p2, p3), {_MX}",
     "lhs_scale must have the rank of lhs (2)"),
    (["f8e4m3fn[2,64]", "f8e4m3fn[64,2]", "f8e8m0fnu[2,2]", "bf16[]"], f"f32[2,2] scaled-dot(p0, p1, p2, p3), {_MX}",
     "rhs_scale must have the rank of rhs (2)"),
    (["bf16[1,1]", "f8e4m3fn[1,32]", "bf16[]", "f8e8m0fnu[1,1]"], f"f32[1,32] scaled-dot(p0, p1, p2, p3), {_MX}",
     "lhs_scale must have the rank of lhs (2)"),
    # a scaled side names exactly one contracting dimension
    (["f8e4m3fn[4,8,8]", "f8e4m3fn[8,8,5]", "f8e8m0fnu[4,2,4]", "f8e8m0fnu[8,2,5]"],
     "f32[4,5] scaled-dot(p0, p1, p2, p3), lhs_contracting_dims={1,2}, rhs_contracting_dims={0,1}",
     "lhs_contracting_dims must name exactly one dimension when lhs has a scale, got {1,2}"),
    # a zero scale dim would divide by zero in XLA's verifier
    (["f8e4m3fn[0,64]", "f8e4m3fn[64,8]", "f8e8m0fnu[0,2]", "f8e8m0fnu[2,8]"],
     f"f32[0,8] scaled-dot(p0, p1, p2, p3), {_MX}", "dimension 0 of lhs_scale must not be 0"),
    # the dot rule on lhs and rhs (not on the scales), arrays, operand_precision
    (["f8e4m3fn[4,64]", "f8e4m3fn[32,8]", "f8e8m0fnu[4,2]", "f8e8m0fnu[1,8]"],
     f"f32[4,8] scaled-dot(p0, p1, p2, p3), {_MX}",
     "contracting dimension sizes must be equal, got lhs dimension 1 of size 64 vs rhs dimension 0 of size 32"),
    (["f8e4m3fn[4,64]", "f8e4m3fn[64,8]", "(f8e8m0fnu[4,2])", "f8e8m0fnu[2,8]"],
     f"f32[4,8] scaled-dot(p0, p1, p2, p3), {_MX}", "lhs_scale must be an array"),
    (["f8e4m3fn[4,64]", "f8e4m3fn[64,8]", "f8e8m0fnu[4,2]", "f8e8m0fnu[2,8]"],
     f"f32[4,8] scaled-dot(p0, p1, p2, p3), {_MX}, operand_precision={{high,high,high,high}}",
     "operand_precision must have 2 entries"),
])
def test_scaled_dot_invalid(operands, line, fragment):
    expect_error(fragment, operands, line)


def test_scaled_dot_in_the_old_order_fails_the_check(tmp_path, monkeypatch):
    """A module written (lhs, lhs_scale, rhs, rhs_scale) is reported where the instruction is, with
    exit code 1 (the module is wrong), like XLA's verifier rejects it."""
    from click.testing import CliRunner
    from hlo_cli.cli import main
    monkeypatch.setenv("HLO_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "old.hlo"
    path.write_text("HloModule m\n\nENTRY main {\n  a = f8e4m3fn[4,64] parameter(0)\n"
                    "  sa = f8e8m0fnu[4,2] parameter(1)\n  b = f8e4m3fn[64,8] parameter(2)\n"
                    "  sb = f8e8m0fnu[2,8] parameter(3)\n"
                    f"  ROOT d = f32[4,8] scaled-dot(a, sa, b, sb), {_MX}\n}}\n")
    result = CliRunner().invoke(main, ["check", str(path)], catch_exceptions=False)
    assert result.exit_code == 1
    assert f"{path}:8:21: error: %d: scaled-dot: dimension 0 of lhs must be a multiple of dimension 0 of " \
           "lhs_scale (64), got 4" in result.output
    assert "Traceback" not in result.output
    path.write_text(path.read_text().replace("scaled-dot(a, sa, b, sb)", "scaled-dot(a, b, sa, sb)"))
    assert CliRunner().invoke(main, ["check", str(path)], catch_exceptions=False).exit_code == 0
