"""The custom-call targets `hlo run` runs, known without loading their handlers.

The custom-call registry (interpreter/ops/custom_call.py) fills itself as its handler modules are
imported, with NumPy, ctypes and LAPACK's bindings: a tenth to a fifth of a second.  `hlo check`,
`hlo info` and `hlo run`'s pre-flight only ask whether a target runs; they ask this table, which the
registry keeps true (`target()` refuses to register a name or pattern missing here, and
tests/test_custom_call_targets.py checks that every entry has its handler).  A handler that declares
`refuses` (a configuration it does not implement) is listed in REFUSING: for those targets the
registry itself is asked.

    registered("__cublas$gemm")      # True: a handler runs it (by name or by family pattern)
    refusal(inst, ask)               # why INST's target cannot run here, None when it can (`ask`:
                                     # the registry's own refusal, called for a REFUSING target)
"""
from __future__ import annotations

import re

# the shard_map / Shardy markers: the device layer (devices/spmd.py) runs these, not the registry
SHARD_TARGETS = frozenset({"xla.sdy.GlobalToLocalShape", "xla.sdy.LocalToGlobalShape", "SPMDFullToShardShape",
                           "SPMDShardToFullShape", "xla.sdy.ManualComputation"})

# targets registered by exact name
NAMES = frozenset({
    "Eigh", "LayoutConstraint", "LuDecomposition", "MoveToDevice", "MoveToHost", "PadToStatic",
    "PartialReduce", "ProductOfElementaryHouseholderReflectors", "Qr", "SPMDFullToShardShape",
    "SPMDShardToFullShape", "SetBound", "Sharding", "SliceToDynamic", "TopK", "__cub$DeviceRadixSort",
    "__cub$DeviceRadixSortUnassignedScratchSize", "__cublas$gemm", "__cublas$lt$groupedMatmul",
    "__cublas$lt$matmul", "__cublas$lt$matmul$f8", "__cublas$lt$matmul$mx", "__cublas$triangularSolve",
    "__cudnn$blockScaledDot", "__cudnn$convBackwardFilter", "__cudnn$convBackwardInput",
    "__cudnn$convBiasActivationForward", "__cudnn$convForward", "__cudnn$convForwardGraph",
    "__cudnn$convReorderFilter", "__cudnn$convReorderFilterAndBias", "__cudnn$fmhaScaleBiasSoftmax",
    "__cudnn$fmhaScaleBiasSoftmaxBackward", "__cudnn$fmhaScaleBiasSoftmaxDropout",
    "__cudnn$fmhaScaleBiasSoftmaxDropoutBackward", "__cudnn$fmhaSoftmax", "__cudnn$fmhaSoftmaxBackward",
    "__cudnn$fmhaSoftmaxBackwardF8", "__cudnn$fmhaSoftmaxDropout", "__cudnn$fmhaSoftmaxDropoutBackward",
    "__cudnn$fmhaSoftmaxF8", "__cudnn$norm", "__gpu$TopK", "__nop", "annotate_device_placement",
    "te_act_lu_ffi", "te_dact_dbias_quantize_ffi", "te_dbias_quantize_ffi", "te_dequantize_ffi",
    "te_fused_attn_backward_ffi", "te_fused_attn_forward_ffi", "te_gemm_ffi", "te_norm_backward_ffi",
    "te_norm_forward_ffi", "te_scaled_masked_softmax_backward_ffi", "te_scaled_masked_softmax_forward_ffi",
    "te_scaled_softmax_backward_ffi", "te_scaled_softmax_forward_ffi",
    "te_scaled_upper_triang_masked_softmax_backward_ffi", "te_scaled_upper_triang_masked_softmax_forward_ffi",
    "tridiagonal_solve_perturbed_ffi", "xla.gpu.ext.cub_scan", "xla.gpu.ext.cub_scan_unassigned_scratch_size",
    "xla.gpu.ext.cub_sort_keys", "xla.gpu.ext.cub_sort_pairs", "xla.gpu.ext.cub_sort_unassigned_scratch_size",
    "xla.sdy.FuncResultSharding",
})

# families registered by pattern (each matched against the whole target name), in registration order
PATTERNS = (
    "lapack_[sdcz]potrf_ffi",
    "lapack_[sdcz]potrf",
    "lapack_[sdcz]trsm_ffi",
    "blas_[sdcz]trsm",
    "lapack_[sdcz]getrf(_ffi)?",
    "lapack_[sdcz]geqrf_ffi",
    "lapack_[sdcz]geqrf",
    "lapack_[sdcz]geqp3_ffi",
    "lapack_(?:[sd]orgqr|[cz]ungqr)_ffi",
    "lapack_(?:[sd]orgqr|[cz]ungqr)",
    "lapack_(?:[sd]syevd|[cz]heevd)_ffi",
    "lapack_(?:[sd]syevd|[cz]heevd)",
    "lapack_[sdcz]gesdd_ffi",
    "lapack_[sdcz]gesvd_ffi",
    "lapack_[sdcz]gesdd",
    "lapack_[sdcz]geev_ffi",
    "lapack_[sdcz]geev",
    "lapack_[sdcz]gees_ffi",
    "lapack_[sdcz]gehrd_ffi",
    "lapack_(?:[sd]sytrd|[cz]hetrd)_ffi",
    "lapack_(?:[sd]ormqr|[cz]unmqr)_ffi",
    "lapack_[sdcz]gtsv_ffi",
    "(?:cu|hip)solver_potrf_ffi",
    "(?:cu|hip)solver_getrf_ffi",
    "(?:cu|hip)solver_geqrf_ffi",
    "(?:cu|hip)solver_orgqr_ffi",
    "(?:cu|hip)solver_ormqr_ffi",
    "(?:cu|hip)solver_syevd_ffi",
    "(?:cu|hip)solver_sytrd_ffi",
    "(?:cu|hip)solver_(gesvd|gesvdj|gesvdp|gesdd)_ffi",
    "(?:cu|hip)solver_syrk_ffi",
    "(?:cu|hip)solver_csrlsvqr_ffi",
    "(?:cu|hip)solver_geev_ffi",
    "(?:cu|hip)hybrid_eig_(real|comp)",
    "(?:cu|hip)sparse_gtsv2_ffi",
    "(?:cu|hip)_tridiagonal_solve_perturbed",
    "(?:cu|hip)_lu_pivots_to_permutation",
    "(?:cu|hip)_cholesky_update_ffi",
    "(?:cu|hip)_threefry2x32(_ffi)?",
    "(?:cu|hip)solver_(potrf|getrf|geqrf|orgqr|syevd|syevj|gesvd|gesvdj)|(?:cu|hip)blas_(getrf|geqrf)_batched",
)

# targets (names or patterns) whose handler declares `refuses(inst)`
REFUSING: frozenset = frozenset()


def registered(name: str) -> bool:
    """Whether the registry has a handler for target `name` (exact name, then the patterns)."""
    return name in NAMES or any(re.fullmatch(p, name) for p in PATTERNS)


def _pattern_of(name: str) -> str | None:
    return next((p for p in PATTERNS if re.fullmatch(p, name)), None)


def refusal(inst, ask) -> str | None:
    """Why the custom call INST cannot run here, None when it can: what the registry's `refusal`
    answers, from this table, unless the target's handler has a check of its own: then `ask(inst)`
    (the registry's refusal, which loads the handlers)."""
    name = inst.attrs.get("custom_call_target", "") or ""
    key = name if name in NAMES else _pattern_of(name)
    if key is None:
        from .custom_call_known import unsupported_message
        return unsupported_message(name, "see `hlo info MODULE`")
    return ask(inst) if key in REFUSING else None
