"""The opcode table: the one place that declares every HLO opcode XLA knows.

Each row names an opcode's text spelling, its family, how many operands it
takes and which attributes it accepts (with the kind of value each attribute
holds).  The parser uses the table to reject unknown opcodes and unknown
attributes; shape and evaluation rules register against it by name.

Source of truth: XLA's HLO parser (`xla/hlo/parser/hlo_parser.cc`,
`HloParserImpl::ParseInstructionRhs` / `CreateInstruction`) and opcode list
(`xla/hlo/ir/hlo_opcode.h`), as built into the installed jaxlib (0.10.2, 133
opcodes).  The attribute names of every row were checked against that parser
(its "unexpected attribute ... Allowed attributes: ..." message), and the
required ones by leaving each out.  Beyond that parser: compare's `order` and topk's
`is_stable`, which the XLA in JAX 0.11.2 prints (its GPU dumps in ../shared/gpu); the opcode list
was compared with the newest `hlo_opcode.h` at hand (an XLA snapshot of May 2026, 132 opcodes:
hlo has every one; `atan`, `shuffle` and `collective-reduce` are not in it).

Text-format notes the table cannot express:
  * `<op>-start` / `<op>-update` / `<op>-done` for an `<op>` that is not itself
    an opcode spelling (e.g. `custom-call-start`, `fusion-start`, `call-done`)
    is sugar for async-start / async-update / async-done wrapping `<op>`; the
    -start form takes `<op>`'s attributes plus async-start's.  XLA's printer
    emits this sugar whenever the async computation is a single instruction.
  * `parameter(N)` and `constant(literal)` carry their number / literal inside
    the parentheses; they have no operands (min = max = 0).
  * Some requirements depend on operands: broadcast's `dimensions` may be
    omitted when the operand is a scalar; conditional needs
    `true_computation` + `false_computation` for a pred[] selector but
    `branch_computations` for an s32[] one; async-update / async-done take
    `calls` / `async_execution_thread` only to check them against the start.
  * Names that lex as keywords cannot name instructions: `inf`, `nan`, `true`,
    `false`, `ROOT`, `ENTRY`, `HloModule`, `token`, ...
"""
from __future__ import annotations

from dataclasses import dataclass, field

# ---------------------------------------------------------------------------
# Attribute kinds.  Every attribute value in HLO text is decoded by the kind
# named here (see hlo_cli/ir/attributes.py for the decoders):
#
#   int, float, bool, string ("..." quoted), name (bare identifier),
#   enum:A|B|C            bare identifier, one of the listed spellings
#   dims                  {1,2,3}  (possibly empty {})
#   dims_list             {{0,1},{2,3}}
#   computation           %comp or comp (or an inline { ... } body)
#   computations          {%a, %b}
#   instructions          {%a, %b}            (control-predecessors)
#   window                {size=3x3 stride=2x2 pad=1_1x1_1 lhs_dilate=.. rhs_dilate=.. rhs_reversal=..}
#   conv_dnums            b01f_01io->b01f
#   slice                 {[0:2], [1:5:2]}
#   padding               0_0x1_2_1
#   replica_groups        {{0,1},{2,3}} or [2,4]<=[8] or [4,2]<=[2,4]T(1,0)
#   source_target_pairs   {{0,1},{1,2}}
#   sharding              {replicated} {maximal device=0} {devices=[2,1]0,1} {{..},{..}} ...
#   metadata              {op_name="..." source_file="..." source_line=3 ...}
#   backend_config        "escaped string" or raw {json}
#   frontend_attributes   {key="value", ...}   (a value may also be a raw {...} group)
#   precision_list        {default, highest}
#   shape                 f32[2]{0}
#   shape_list            {f32[2]{0}, s32[]}
#   output_to_operand_aliasing  {{0}: (1, {}), {1}: (0, {0})}
#   literal               a literal value, led by its shape: f32[3]{0} {1, 2, 3}
#   statistics            {visualizing_index=1,stat-0=0.5}
#   result_accuracy       {tolerance={atol=0,rtol=0,ulps=1}} or {mode=highest}
#                         (tolerance fields are comma-separated)
#   sparsity              L.0@2:4 (old dot sparsity descriptors, '_'-separated;
#                         not accepted by this XLA version, kept for old dumps)
#   original_value        {{"name"}} / {({0}, "name", {})} ...   (printed as origin=)
#   raw                   anything; kept as its source text
#
# Kinds added with the table:
#   bool_list             {true, false}        (parameter_replication)
#   domain                {kind="sharding", entry={maximal device=0}, exit={replicated}}
#   sparsity_config       {lhs={sparsity=2x4 dimension=1 stride=2} rhs={...}}
#                         (lhs/rhs and their fields are space-separated)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class OpSpec:
    name: str                      # text spelling, e.g. "get-tuple-element"
    family: str                    # see FAMILIES
    min_operands: int = 0
    max_operands: int | None = None  # None: variadic
    attrs: dict[str, str] = field(default_factory=dict)   # attribute name -> kind
    required: frozenset[str] = frozenset()                # attributes that must be present

    def __hash__(self) -> int:  # attrs is a dict; identity by name is enough
        return hash(self.name)


# Attributes every instruction may carry, whatever its opcode (the parser
# declares these in ParseInstructionRhs before dispatching on the opcode).
COMMON_ATTRS: dict[str, str] = {
    "sharding": "sharding",
    "frontend_attributes": "frontend_attributes",
    "statistics": "statistics",
    # Meant for entry parameters, but accepted on any instruction; it must have
    # one entry per leaf buffer of the instruction's shape.
    "parameter_replication": "bool_list",
    "control-predecessors": "instructions",
    "origin": "original_value",
    "metadata": "metadata",
    "backend_config": "backend_config",
}

FAMILIES = (
    "elementwise_unary",    # one array in, same-shaped array out
    "elementwise_binary",
    "elementwise_ternary",  # select, clamp
    "compare",
    "convert",              # element-type changes
    "shape",                # layout / shape manipulation without arithmetic
    "dynamic_shape",        # dynamic dimension sizes
    "reduction",            # ops driven by a to_apply-style computation over elements
    "linalg",
    "normalization",        # batch-norm-*
    "indexing",
    "tuple",
    "control",              # ops that call computations or run asynchronously
    "collective",
    "io",                   # infeed / outfeed / send / recv
    "rng",
    "memory",               # copies between buffers / memory spaces
    "misc",
)

# ----------------------------------------------------------------------------- enum spellings

# Spellings as XLA prints them.  XLA reads precision, rng distribution, rng
# algorithm and result-accuracy mode case-insensitively; the others must match.
_DIRECTION = "enum:EQ|NE|GE|GT|LE|LT"
_COMPARISON_TYPE = "enum:FLOAT|TOTALORDER|SIGNED|UNSIGNED"
_COMPARISON_ORDER = "enum:TOTAL|PARTIAL|WEAK"       # the newest XLA's spelling beside type=
_FFT_TYPE = "enum:FFT|IFFT|RFFT|IRFFT"
_FUSION_KIND = "enum:kLoop|kInput|kOutput|kCustom"
_CONVOLUTION_KIND = "enum:fprop|wgrad|dgrad|unset"
_DISTRIBUTION = "enum:rng_uniform|rng_normal|rng_invalid"
_RNG_ALGORITHM = "enum:rng_default|rng_three_fry|rng_philox"
_TRANSPOSE = "enum:NO_TRANSPOSE|TRANSPOSE|ADJOINT|TRANSPOSE_INVALID"
_PADDING_TYPE = "enum:PADDING_VALID|PADDING_SAME|PADDING_INVALID"
_SCHEDULE = "enum:SCHEDULE_NONE|SCHEDULE_LATEST|SCHEDULE_EARLIEST"
# API_VERSION_UNSPECIFIED is rejected by the parser.
_API_VERSION = ("enum:API_VERSION_ORIGINAL|API_VERSION_STATUS_RETURNING|"
                "API_VERSION_STATUS_RETURNING_UNIFIED|API_VERSION_TYPED_FFI")
# Collective op group mode: parsed (and ignored) on all-reduce, all-reduce-start
# and reduce-scatter only.
_GROUP_MODE = "enum:cross_replica|cross_partition|cross_replica_and_partition|flattened_id"
_DOT_ALGORITHM = (
    "enum:unset|dot_any_f8_any_f8_f32|dot_any_f8_any_f8_f32_fast_accum|"
    "dot_f16_f16_f16|dot_f16_f16_f32|dot_bf16_bf16_bf16|dot_bf16_bf16_f32|"
    "dot_bf16_bf16_f32_x3|dot_bf16_bf16_f32_x6|dot_bf16_bf16_f32_x9|"
    "dot_tf32_tf32_f32|dot_tf32_tf32_f32_x3|dot_f32_f32_f32|dot_f64_f64_f64"
)

# ----------------------------------------------------------------------------- shared attribute groups

_RESULT_ACCURACY = {"result_accuracy": "result_accuracy"}

_DOT_DIMS = {
    "lhs_batch_dims": "dims",
    "lhs_contracting_dims": "dims",
    "rhs_batch_dims": "dims",
    "rhs_contracting_dims": "dims",
    "operand_precision": "precision_list",
}

_ALL_GATHER = {
    "replica_groups": "replica_groups",
    "channel_id": "int",
    "dimensions": "dims",               # exactly one dimension
    "constrain_layout": "bool",
    "use_global_device_ids": "bool",
}

_ALL_REDUCE = {
    "to_apply": "computation",
    "replica_groups": "replica_groups",
    "channel_id": "int",
    "constrain_layout": "bool",
    "use_global_device_ids": "bool",   # needs channel_id
    "mode": _GROUP_MODE,
}

_COLLECTIVE_PERMUTE = {
    "source_target_pairs": "source_target_pairs",
    "channel_id": "int",
    # with slice_sizes the op takes exactly 4 operands:
    # input, output, input start indices, output start indices
    "slice_sizes": "dims_list",
}

_CHANNEL = {"channel_id": "int", "is_host_transfer": "bool"}   # send/recv: -done must repeat the channel_id

_ASYNC = {"async_execution_thread": "string", "calls": "computation"}


def _op(name: str, family: str, min_operands: int, max_operands: int | None,
        attrs: dict[str, str] | None = None, required: tuple[str, ...] = ()) -> OpSpec:
    return OpSpec(name, family, min_operands, max_operands, dict(attrs or {}), frozenset(required))


def _unary(name: str, attrs: dict[str, str] | None = None) -> OpSpec:
    return _op(name, "elementwise_unary", 1, 1, attrs)


def _binary(name: str) -> OpSpec:
    return _op(name, "elementwise_binary", 2, 2)


_SPECS = (
    # --- elementwise unary --------------------------------------------------
    # These accept result_accuracy (XLA's "unary ops with result accuracy").
    *(_unary(n, _RESULT_ACCURACY) for n in (
        "acos", "acosh", "asin", "asinh", "atanh", "cbrt", "cosine", "cosh", "erf",
        "exponential", "exponential-minus-one", "log", "log-plus-one", "logistic",
        "rsqrt", "sine", "sinh", "sqrt", "tan", "tanh",
    )),
    *(_unary(n) for n in (
        "abs", "ceil", "count-leading-zeros", "floor", "imag", "is-finite", "negate",
        "not", "popcnt", "real", "round-nearest-afz", "round-nearest-even", "sign",
    )),

    # --- elementwise binary / ternary ---------------------------------------
    *(_binary(n) for n in (
        "add", "subtract", "multiply", "divide", "remainder", "power", "maximum",
        "minimum", "atan2", "complex", "and", "or", "xor", "shift-left",
        "shift-right-arithmetic", "shift-right-logical", "mulhi",
    )),
    _op("select", "elementwise_ternary", 3, 3),
    _op("clamp", "elementwise_ternary", 3, 3),          # clamp(min, operand, max)

    # --- compare / convert --------------------------------------------------
    _op("compare", "compare", 2, 2, {"direction": _DIRECTION, "type": _COMPARISON_TYPE,
                                              "order": _COMPARISON_ORDER},
        required=("direction",)),
    _op("convert", "convert", 1, 1),
    _op("bitcast-convert", "convert", 1, 1),
    _op("stochastic-convert", "convert", 2, 2),         # (operand, random bits)
    _op("reduce-precision", "convert", 1, 1, {"exponent_bits": "int", "mantissa_bits": "int"},
        required=("exponent_bits", "mantissa_bits")),

    # --- shape --------------------------------------------------------------
    # dimensions is optional when the operand is a scalar (then it means {}).
    _op("broadcast", "shape", 1, 1, {"dimensions": "dims"}),
    _op("reshape", "shape", 1, 1, {"inferred_dimension": "int"}),
    _op("transpose", "shape", 1, 1, {"dimensions": "dims"}, required=("dimensions",)),
    _op("slice", "shape", 1, 1, {"slice": "slice"}, required=("slice",)),
    _op("pad", "shape", 2, 2, {"padding": "padding"}, required=("padding",)),
    _op("concatenate", "shape", 1, None, {"dimensions": "dims"}, required=("dimensions",)),
    _op("reverse", "shape", 1, 1, {"dimensions": "dims"}, required=("dimensions",)),
    _op("iota", "shape", 0, 0, {"iota_dimension": "int"}, required=("iota_dimension",)),
    _op("bitcast", "shape", 1, 1),

    # --- dynamic shapes -----------------------------------------------------
    # dynamic-reshape(operand, one s32[] size per result dimension)
    _op("dynamic-reshape", "dynamic_shape", 1, None),
    _op("get-dimension-size", "dynamic_shape", 1, 1, {"dimensions": "dims"},
        required=("dimensions",)),
    _op("set-dimension-size", "dynamic_shape", 2, 2, {"dimensions": "dims"},
        required=("dimensions",)),

    # --- reductions and other computation-driven ops ------------------------
    # reduce / reduce-window: N inputs followed by N init values (even count).
    _op("reduce", "reduction", 2, None, {"dimensions": "dims", "to_apply": "computation"},
        required=("dimensions", "to_apply")),
    _op("reduce-window", "reduction", 2, None, {"window": "window", "to_apply": "computation"},
        required=("to_apply",)),
    _op("select-and-scatter", "reduction", 3, 3,
        {"window": "window", "select": "computation", "scatter": "computation"},
        required=("select", "scatter")),
    _op("map", "reduction", 1, None, {"dimensions": "dims", "to_apply": "computation"},
        required=("to_apply",)),
    _op("sort", "reduction", 1, None,
        {"dimensions": "dims", "is_stable": "bool", "to_apply": "computation"},
        required=("dimensions", "to_apply")),
    _op("topk", "reduction", 1, 1, {"k": "int", "largest": "bool", "is_stable": "bool"}, required=("k",)),
    # scan(inputs..., carries...): the last num_carries operands are carries.
    _op("scan", "reduction", 1, None,
        {"dimensions": "dims", "num_carries": "int", "is_reverse": "bool",
         "is_associative": "bool", "to_apply": "computation"},
        required=("dimensions", "num_carries", "to_apply")),

    # --- linear algebra -----------------------------------------------------
    # No dimension attribute of dot is required (absent lists mean {}).
    _op("dot", "linalg", 2, 2, {**_DOT_DIMS, "algorithm": _DOT_ALGORITHM}),
    _op("convolution", "linalg", 2, 2,
        {"window": "window", "dim_labels": "conv_dnums", "feature_group_count": "int",
         "batch_group_count": "int", "convolution_kind": _CONVOLUTION_KIND,
         "operand_precision": "precision_list", "sparsity_config": "sparsity_config"},
        required=("dim_labels",)),
    _op("fft", "linalg", 1, 1, {"fft_type": _FFT_TYPE, "fft_length": "dims"},
        required=("fft_type", "fft_length")),
    # triangular-solve / cholesky read their options as TriangularSolveOptions /
    # CholeskyOptions proto fields; false booleans are not printed.
    _op("triangular-solve", "linalg", 2, 2,
        {"left_side": "bool", "lower": "bool", "unit_diagonal": "bool", "transpose_a": _TRANSPOSE}),
    _op("cholesky", "linalg", 1, 1, {"lower": "bool"}),
    # ragged-dot(lhs, rhs, group_sizes)
    _op("ragged-dot", "linalg", 3, 3,
        {**_DOT_DIMS, "lhs_ragged_dims": "dims", "rhs_group_dims": "dims"}),
    # scaled-dot(lhs, rhs, lhs_scale, rhs_scale), the order of XLA's HloScaledDotInstruction
    _op("scaled-dot", "linalg", 4, 4, {**_DOT_DIMS, "algorithm": _DOT_ALGORITHM}),

    # --- normalization ------------------------------------------------------
    _op("batch-norm-training", "normalization", 3, 3,          # operand, scale, offset
        {"epsilon": "float", "feature_index": "int"}, required=("epsilon", "feature_index")),
    _op("batch-norm-inference", "normalization", 5, 5,         # operand, scale, offset, mean, variance
        {"epsilon": "float", "feature_index": "int"}, required=("epsilon", "feature_index")),
    _op("batch-norm-grad", "normalization", 5, 5,              # operand, scale, mean, variance, grad_output
        {"epsilon": "float", "feature_index": "int"}, required=("epsilon", "feature_index")),

    # --- indexing -----------------------------------------------------------
    _op("gather", "indexing", 2, 2,
        {"offset_dims": "dims", "collapsed_slice_dims": "dims", "start_index_map": "dims",
         "index_vector_dim": "int", "slice_sizes": "dims", "indices_are_sorted": "bool",
         "operand_batching_dims": "dims", "start_indices_batching_dims": "dims"},
        required=("offset_dims", "collapsed_slice_dims", "start_index_map", "index_vector_dim",
                  "slice_sizes")),
    # scatter(operands..., indices, updates...): an odd operand count.
    _op("scatter", "indexing", 3, None,
        {"update_window_dims": "dims", "inserted_window_dims": "dims",
         "scatter_dims_to_operand_dims": "dims", "index_vector_dim": "int",
         "indices_are_sorted": "bool", "unique_indices": "bool",
         "input_batching_dims": "dims", "scatter_indices_batching_dims": "dims",
         "to_apply": "computation"},
        required=("update_window_dims", "inserted_window_dims", "scatter_dims_to_operand_dims",
                  "index_vector_dim", "to_apply")),
    # dynamic-slice(operand, one scalar start index per dimension); the parser
    # also takes the legacy form (operand, rank-1 index vector).
    _op("dynamic-slice", "indexing", 1, None, {"dynamic_slice_sizes": "dims"},
        required=("dynamic_slice_sizes",)),
    _op("dynamic-update-slice", "indexing", 2, None),  # (operand, update, start indices...)

    # --- tuples -------------------------------------------------------------
    _op("tuple", "tuple", 0, None),
    _op("get-tuple-element", "tuple", 1, 1, {"index": "int"}, required=("index",)),

    # --- control flow, calls, async -----------------------------------------
    _op("call", "control", 0, None, {"to_apply": "computation", "is_composite": "bool"},
        required=("to_apply",)),
    _op("while", "control", 1, 1, {"condition": "computation", "body": "computation"},
        required=("condition", "body")),
    # conditional(selector, branch operands...): pred[] selector ->
    # true_computation + false_computation; s32[] selector -> branch_computations.
    _op("conditional", "control", 2, None,
        {"true_computation": "computation", "false_computation": "computation",
         "branch_computations": "computations"}),
    _op("fusion", "control", 0, None,
        {"kind": _FUSION_KIND, "calls": "computation",
         "output_to_operand_aliasing": "output_to_operand_aliasing"},
        required=("kind", "calls")),
    # XLA prints to_apply= of a custom-call as called_computations={...}.
    _op("custom-call", "control", 0, None,
        {"custom_call_target": "string", "window": "window", "dim_labels": "conv_dnums",
         "feature_group_count": "int", "batch_group_count": "int",
         "operand_layout_constraints": "shape_list", "custom_call_has_side_effect": "bool",
         "to_apply": "computation", "called_computations": "computations",
         "output_to_operand_aliasing": "output_to_operand_aliasing",
         "padding_type": _PADDING_TYPE, "literal": "literal",
         "operand_precision": "precision_list", "schedule": _SCHEDULE,
         "api_version": _API_VERSION},
        required=("custom_call_target",)),
    # Shape of async-start / async-update: ((operand shapes...), result shape, context...).
    _op("async-start", "control", 0, None,
        {**_ASYNC, "output_to_operand_aliasing": "output_to_operand_aliasing"},
        required=("calls",)),
    _op("async-update", "control", 1, 1, _ASYNC),
    _op("async-done", "control", 1, 1, _ASYNC),

    # --- collectives --------------------------------------------------------
    _op("all-reduce", "collective", 1, None, _ALL_REDUCE, required=("to_apply",)),
    _op("all-reduce-start", "collective", 1, None, _ALL_REDUCE, required=("to_apply",)),
    _op("all-reduce-done", "collective", 1, 1),
    _op("all-gather", "collective", 1, None, _ALL_GATHER, required=("dimensions",)),
    # all-gather-start shape: (operand shape(s), result shape(s))
    _op("all-gather-start", "collective", 1, None, _ALL_GATHER, required=("dimensions",)),
    _op("all-gather-done", "collective", 1, 1),
    _op("reduce-scatter", "collective", 1, None, {**_ALL_REDUCE, "dimensions": "dims"},
        required=("to_apply", "dimensions")),
    # dimensions (split dimension) absent: the tuple form, one operand per peer.
    _op("all-to-all", "collective", 1, None,
        {"replica_groups": "replica_groups", "channel_id": "int", "dimensions": "dims",
         "constrain_layout": "bool"}),
    # ragged-all-to-all(input, output, input_offsets, send_sizes, output_offsets, recv_sizes)
    _op("ragged-all-to-all", "collective", 6, 6,
        {"replica_groups": "replica_groups", "channel_id": "int", "dimensions": "dims"}),
    _op("collective-broadcast", "collective", 1, None,
        {"replica_groups": "replica_groups", "channel_id": "int"}),
    _op("collective-permute", "collective", 1, None, _COLLECTIVE_PERMUTE,
        required=("source_target_pairs",)),
    # collective-permute-start shape: (operand, result[, u32[] context...])
    _op("collective-permute-start", "collective", 1, None, _COLLECTIVE_PERMUTE,
        required=("source_target_pairs",)),
    _op("collective-permute-done", "collective", 1, 1),
    _op("replica-id", "collective", 0, 0),
    _op("partition-id", "collective", 0, 0),

    # --- io -----------------------------------------------------------------
    _op("infeed", "io", 1, 1, {"infeed_config": "string"}),                 # infeed(token) -> (data, token[])
    _op("outfeed", "io", 2, 2, {"outfeed_config": "string", "outfeed_shape": "shape"}),  # (data, token) -> token[]
    _op("send", "io", 2, 2, _CHANNEL),          # (data, token) -> (data, u32[], token[])
    _op("send-done", "io", 1, 1, _CHANNEL),     # -> token[]
    _op("recv", "io", 1, 1, _CHANNEL),          # (token) -> (data, u32[], token[])
    _op("recv-done", "io", 1, 1, _CHANNEL),     # -> (data, token[])

    # --- random numbers -----------------------------------------------------
    _op("rng", "rng", 2, 2, {"distribution": _DISTRIBUTION}, required=("distribution",)),
    # rng-bit-generator(state) -> (new state, bits)
    _op("rng-bit-generator", "rng", 1, 1, {"algorithm": _RNG_ALGORITHM}, required=("algorithm",)),
    _op("rng-get-and-update-state", "rng", 0, 0, {"delta": "int"}, required=("delta",)),

    # --- memory -------------------------------------------------------------
    _op("copy", "memory", 1, 1),
    # copy-start shape: (destination, source, u32[] context)
    _op("copy-start", "memory", 1, 1, {"cross_program_prefetch_index": "int"}),
    _op("copy-done", "memory", 1, 1),

    # --- misc ---------------------------------------------------------------
    _op("parameter", "misc", 0, 0),   # parameter(N): N is not an operand
    _op("constant", "misc", 0, 0),    # constant(literal): the literal is not an operand
    _op("after-all", "misc", 0, None),                  # tokens in, token[] out
    _op("add-dependency", "misc", 2, 2),                # (value, token)
    _op("domain", "misc", 1, 1, {"domain": "domain"}, required=("domain",)),
    _op("opt-barrier", "misc", 1, 1),
)

OPCODES: dict[str, OpSpec] = {s.name: s for s in _SPECS}

assert len(OPCODES) == len(_SPECS), "duplicate opcode in the table"
assert all(s.family in FAMILIES for s in _SPECS)


def lookup(name: str) -> OpSpec | None:
    return OPCODES.get(name)


def with_attribute(attr: str) -> frozenset[str]:
    """Every opcode whose row accepts attribute `attr` (e.g. replica_groups: the grouped collectives)."""
    return frozenset(op for op, spec in OPCODES.items() if attr in spec.attrs)


def computation_attributes(name: str) -> tuple[str, ...]:
    """The attributes of opcode `name` that name called computations, in the table's order."""
    spec = OPCODES.get(name)
    return tuple(a for a, k in spec.attrs.items() if k in ("computation", "computations")) if spec else ()


def registrar(table: dict, what: str):
    """The decorator `@register(*opcodes)` that files a rule under opcode spellings in `table` (the shape
    rules, the evaluation rules); a second rule for one opcode is an error naming `what`."""
    def register(*opcodes: str):
        def deco(fn):
            for op in opcodes:
                if op in table:
                    raise RuntimeError(f"two {what} for {op}")
                table[op] = fn
            return fn
        return deco
    return register


_ASYNC_SUGAR = (("-start", "async-start"), ("-update", "async-update"), ("-done", "async-done"))


def async_generic(name: str) -> str | None:
    """For `<op>-start` / `<op>-update` / `<op>-done` sugar whose `<op>` is an opcode spelling (and the
    whole name is not one itself): the async opcode it stands for (async-start, async-update,
    async-done); otherwise None."""
    if name in OPCODES:
        return None
    for suffix, generic in _ASYNC_SUGAR:
        if name.endswith(suffix) and name[: -len(suffix)] in OPCODES:
            return generic
    return None


# ----------------------------------------------------------------------------- traits
# Facts about opcodes that several layers ask (the evaluator's schedule, hoisting, the memory estimate,
# diff's matching, SPMD, the tools).  Ask them here (`has_trait`, `with_trait`); never re-declare them
# in a local set.

SIDE_EFFECT = "side-effect"      # XLA's HloInstruction::HasSideEffectNoRecurse, the opcode's part of it:
                                 # kept and run even when nothing uses the value (see has_side_effect)
READS_RNG = "reads-rng"          # the value depends on the random state, not on the operands alone
ELEMENTWISE = "elementwise"      # each result element from the same-position operand elements
CONTROL_FLOW = "control-flow"    # runs computations as a program does: call, while, conditional
CALLS = "calls"                  # runs one or more called computations (to_apply, calls, body, ...)
COLLECTIVE = "collective"        # exchanges values between devices
DEVICE_ID = "device-id"          # the value is the running device's number
IO = "io"                        # talks to the host or a peer: infeed, outfeed, send, recv
ASYNC = "async"                  # one half of an asynchronous pair (-start / -update / -done)
STRUCTURAL = "structural"        # only moves values or tuple elements around, computes nothing
PARAMETER_OR_CONSTANT = "leaf"   # parameter, constant: no operands, a value from outside or the text

_TRAIT_TABLE: dict[str, frozenset[str]] = {
    SIDE_EFFECT: frozenset({"send", "send-done", "recv", "recv-done", "rng", "rng-get-and-update-state",
                            "infeed", "outfeed", "all-reduce-start", "all-reduce-done", "all-gather-start",
                            "all-gather-done", "collective-broadcast", "collective-permute-start",
                            "collective-permute-done"}),
    READS_RNG: frozenset({"rng", "rng-get-and-update-state"}),
    ELEMENTWISE: frozenset(s.name for s in _SPECS if s.family in (
        "elementwise_unary", "elementwise_binary", "elementwise_ternary", "compare"))
        | frozenset({"convert", "reduce-precision", "bitcast-convert"}),
    CONTROL_FLOW: frozenset({"call", "while", "conditional"}),
    CALLS: frozenset({"call", "fusion", "while", "conditional", "async-start", "custom-call", "map", "reduce",
                      "reduce-window", "select-and-scatter", "sort", "scatter", "all-reduce", "all-reduce-start",
                      "reduce-scatter", "scan"}),
    COLLECTIVE: frozenset(s.name for s in _SPECS if s.family == "collective")
        - frozenset({"replica-id", "partition-id"}),
    DEVICE_ID: frozenset({"replica-id", "partition-id"}),
    IO: frozenset(s.name for s in _SPECS if s.family == "io"),
    ASYNC: frozenset(s.name for s in _SPECS if s.name.endswith(("-start", "-update", "-done"))),
    STRUCTURAL: frozenset({"tuple", "get-tuple-element", "opt-barrier", "add-dependency", "after-all", "domain",
                           "async-update", "async-done", "all-reduce-done", "all-gather-done",
                           "collective-permute-done", "copy-done", "send-done", "recv-done"}),
    PARAMETER_OR_CONSTANT: frozenset({"parameter", "constant"}),
}
assert all(op in OPCODES for ops in _TRAIT_TABLE.values() for op in ops), "a trait names an unknown opcode"

TRAITS: dict[str, frozenset[str]] = {
    name: frozenset(t for t, ops in _TRAIT_TABLE.items() if name in ops) for name in OPCODES}


def has_trait(opcode: str, trait: str) -> bool:
    """Whether `opcode` has `trait` (one of the trait constants above); False for an unknown opcode."""
    return opcode in _TRAIT_TABLE[trait]


def with_trait(*traits: str) -> frozenset[str]:
    """Every opcode that has at least one of `traits`."""
    return frozenset().union(*(_TRAIT_TABLE[t] for t in traits))


def has_side_effect(inst) -> bool:
    """XLA's HasSideEffectNoRecurse for one instruction: the opcode's trait, a custom call declared
    `custom_call_has_side_effect=true`, and the collectives that constrain their layout.  (XLA also
    keeps channel collectives of a program that is not SPMD-partitioned; hlo runs those as SPMD.)"""
    op = inst.opcode
    if op in _TRAIT_TABLE[SIDE_EFFECT]:
        return True
    attrs = inst.attrs
    if op == "custom-call":
        return bool(attrs.get("custom_call_has_side_effect"))
    if op in ("all-to-all", "all-gather", "all-reduce", "reduce-scatter") and attrs.get("constrain_layout"):
        return True
    return False
