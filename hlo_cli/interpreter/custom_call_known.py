"""What a custom-call target we cannot run is, for the message that refuses it.

The names come from XLA's and JAX's sources (xla/service/gpu/cublas_cudnn.h, the GPU thunk
emitter, jaxlib's GPU/TPU kernels and callbacks, TensorFlow's XLA bridge); the first matching
pattern wins.
"""
from __future__ import annotations

import re

_GPU = "a GPU library call"
_KNOWN: list[tuple[str, str]] = [
    (r"__cublas\$lt\$matmul.*|__cublas\$lt\$groupedMatmul", f"a cuBLASLt matrix multiplication ({_GPU})"),
    (r"__cublas\$gemm", f"a cuBLAS GEMM ({_GPU})"),
    (r"__cublas\$triangularSolve", f"a cuBLAS triangular solve ({_GPU})"),
    (r"__cublas\$.*", f"a cuBLAS kernel ({_GPU})"),
    (r"__cudnn\$conv.*", f"a cuDNN convolution ({_GPU})"),
    (r"__cudnn\$fmha.*", f"a cuDNN fused multi-head attention kernel ({_GPU})"),
    (r"__cudnn\$norm", f"a cuDNN normalization kernel ({_GPU})"),
    (r"__cudnn\$blockScaledDot", f"a cuDNN block-scaled dot ({_GPU})"),
    (r"__cudnn\$.*", f"a cuDNN kernel ({_GPU})"),
    (r"__gpu\$xla\.gpu\.triton|triton_kernel_call(_ffi)?", "a Triton kernel (compiled GPU code)"),
    (r"__gpu\$xla\.gpu\.ptx", "a hand-written PTX kernel (GPU code)"),
    (r"__gpu\$.*", "an XLA GPU runtime kernel"),
    (r"xla\.gpu\..*", "an XLA GPU runtime kernel"),
    (r"mosaic_gpu(_v2)?", "a Mosaic GPU kernel (Pallas on GPU)"),
    (r"tpu_custom_call", "a Mosaic TPU kernel (Pallas on TPU), which only TPUs run"),
    (r"te_.*|.*transformer_engine.*", "a Transformer Engine kernel (NVIDIA GPUs)"),
    (r"(cu|hip)hybrid_.*", "a MAGMA/LAPACK hybrid kernel from jaxlib (GPU)"),
    (r"cu(solver|sparse|blas)_.*|cu_.*", "a CUDA library call from jaxlib (GPU)"),
    (r"hip(solver|sparse|blas)_.*|hip_.*", "a ROCm library call from jaxlib (AMD GPU)"),
    (r"(cusolver|hipsolver|solver|sparse|cusparse|hipsparse)_.*", "a GPU solver/sparse kernel from jaxlib"),
    (r"dnn_rnn(_bwd)?(_ffi)?", "a cuDNN/MIOpen recurrent network kernel from jaxlib (GPU)"),
    (r"cpu_csr_sparse_dense_ffi", "jaxlib's CPU sparse-times-dense kernel"),
    (r"xla_(ffi_|buffer_)?(partitioned_)?python_[cg]pu_callback.*",
     "a Python host callback (jax.pure_callback / io_callback / debug.print): the Python function "
     "lives in the process that traced the program"),
    (r"lapack_.*|blas_.*", "a LAPACK/BLAS kernel from jaxlib that hlo does not run"),
    (r"xla_builder\..*|xla\.(?!gpu\.).*", "a helper of XLA's builder library that XLA expands only on "
                                          "backends that register it"),
    (r"__onednn\$.*", "a oneDNN kernel that XLA CPU creates itself (x86 builds with oneDNN); a module "
                      "saved after XLA's optimizations, which hlo runs only from the text before them"),
    (r"__op\$.*", "an XLA operation wrapped as a custom call, for a GPU rewrite"),
    (r"_SPMDInternalOp_.*", "an internal operation of XLA's SPMD partitioner"),
    (r"Dynamic(ReduceWindowSamePadding|ConvolutionInputGrad|ConvolutionKernelGrad|ConvolutionForward)"
     r"|DynamicGatherV2|DynamicWhereOp",
     "an operation of TensorFlow's XLA bridge on dynamic shapes, which XLA's dynamic padder rewrites"),
    (r"AllocateBuffer|ConcatBitcast|X64Split(Low|High)|X64Combine", "an internal XLA marker for buffers "
                                                                     "or host offloading"),
    (r"ShardBarrier(From|To)|xla\.sdy\..*|sdy_.*|local_xla\.sdy\..*", "a sharding annotation of Shardy"),
]


def describe(name: str) -> str | None:
    """What target `name` is, or None when it is not a known kind."""
    for pat, what in _KNOWN:                    # (compiled on the first call: re's cache)
        if re.fullmatch(pat, name):
            return what
    return None


def unsupported_message(name: str, supported: str) -> str:
    """The message refusing target `name`: what it is when we know, then what hlo runs."""
    if not name:
        return f"custom-call has an empty custom_call_target; hlo runs: {supported}"
    what = describe(name)
    kind = f" is {what}, which hlo cannot run" if what else " is not one hlo knows"
    return f"custom-call target '{name}'{kind}; hlo runs: {supported}"


def advice(targets) -> str:
    """What to do about custom-call targets hlo cannot run, by their kind: TARGETS are (name, what it
    is or None) pairs."""
    whats = [(t, w or "") for t, w in targets]
    tips = []
    gpu = [t for t, w in whats if "GPU" in w or t.startswith(("__cublas", "__cudnn", "__gpu", "__triton", "__cub"))]
    jaxlib_gpu = [t for t, w in whats if "from jaxlib" in w and ("GPU" in w or "ROCm" in w or "CUDA" in w)]
    if gpu and len(jaxlib_gpu) < len(gpu):
        tips.append("XLA GPU calls these libraries only after its optimizations: run the module's text before "
                    "them (an --xla_dump_to directory's before_optimizations stage: `--stage before_optimizations`; "
                    "from JAX, jax.jit(f).lower(...).as_text()), and compare with XLA itself there with "
                    "`--reference xla`")
    if jaxlib_gpu:
        tips.append("jaxlib put its GPU kernels into the program when JAX lowered it for a GPU: lower it for the "
                    "CPU (JAX_PLATFORMS=cpu) and jaxlib calls its LAPACK kernels, which hlo runs")
    if any("callback" in w for _, w in whats):
        tips.append("a Python callback's function is not in the module: no tool can run it from the text")
    if any(not w for _, w in whats):
        tips.append("a target hlo does not know needs an implementation in hlo's custom-call registry "
                    "(hlo_cli/interpreter/ops/custom_call.py)")
    if not tips:
        tips.append("run the module's text before XLA's optimizations, or compare with XLA itself "
                    "(`--reference xla`)")
    return "what to do: " + "; ".join(tips)
