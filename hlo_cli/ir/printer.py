"""The IR back to XLA's canonical HLO text.

`format_module(m)` prints what XLA's `HloModule::ToString()` prints (with
`print_large_constants`), as far as the IR holds the information:

* the header `HloModule name, attr=value, ...` with the module attributes in
  XLA's order, then the FileNames / FunctionNames / FileLocations /
  StackFrames sections when the module has any;
* the computations, separated by blank lines, each with its program-shape
  signature `%name (p: f32[2]) -> f32[2] {` computed from its parameter and
  root instructions (parameter shapes without layouts, as XLA prints them),
  `ENTRY`, `ROOT` and `, execution_thread="..."` after the closing brace;
* instructions as `%name = shape opcode(operands), attr=value, ...` with the
  opcode-specific attributes first, in XLA's order, then the common ones
  (sharding, frontend_attributes, control-predecessors, statistics, origin,
  metadata, backend_config), and `/*index=N*/` every five items of long
  operand lists and tuple shapes.

Computations and instructions keep the IR's order (XLA prints post-order), so
that `parse(format_module(m)) == m` holds for every module the parser accepts.
For the same reason:

* the IR only holds the attributes that were written, and all of them are
  printed, so an explicitly written default value (`is_stable=false`) is
  printed back although XLA would leave it out; attributes XLA derives (the
  header's entry_computation_layout) are printed only when the IR has them;
* values the IR keeps as source text (metadata, backend_config, raw named
  shardings) are printed verbatim; values of the other raw kinds, which the
  parser keeps in its own canonical spacing (domain, origin, custom-call
  literal, origin_recovery_table), are re-spaced the way XLA spaces them;
* frontend attributes keep the IR's key order (XLA sorts the keys), and a value
  that lexes as a JSON dict is written unquoted, as XLA does, only when it reads
  back unchanged;
* a custom-call's `to_apply=` stays `to_apply=` (XLA spells it
  `called_computations={...}`), in called_computations' place.
"""
from __future__ import annotations

from .gcpause import NoGC

import re
from dataclasses import replace
from functools import lru_cache
from typing import Any

from .attributes import cescape, quote  # noqa: F401  (cescape re-exported)
from .attributes import (ComputationLayout, ComputationRef, Enum, FrontendAttributes,
                         InlineComputation, RawValue, Sharding, attr_text)
from .dtypes import ELEMENT_TYPES
from .literal import format_literal
from .module import Computation, Instruction, Module, StackFrames
from .shape import Shape, ShapeSyntaxError, parse_array_shape

__all__ = ["format_module", "format_computation", "format_instruction", "format_shape",
           "format_attribute_value", "cescape", "module_attribute_order",
           "instruction_attribute_order"]


# ----------------------------------------------------------------------------- strings

def lexes_as_json_dict(s: str) -> bool:
    """XLA's LexesAsJsonDict: `{`, balanced braces (skipping "strings"), `}`, then nothing."""
    t = s.lstrip()
    if not t.startswith("{"):
        return False
    depth = 0
    i, n = 0, len(t)
    while i < n:
        ch = t[i]
        if ch == '"':
            j = i + 1
            while j < n and t[j] != '"':
                j += 2 if t[j] == "\\" else 1
            if j >= n:
                return False
            i = j + 1
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return not t[i + 1:].strip()
        i += 1
    return False


# ----------------------------------------------------------------------------- shapes

def format_shape(shape: Shape | None, layout: bool = True) -> str:
    """A shape as XLA prints it: tuples get a `/*index=N*/` comment before every fifth element.
    Kept per shape object (the parser shares equal shapes: a large module prints a few hundred
    shapes tens of thousands of times)."""
    if shape is None:
        return ""
    key = (id(shape), layout)
    hit = _SHAPE_TEXTS.get(key)
    if hit is not None and hit[0] is shape:
        return hit[1]
    text = _shape_text(shape, layout)
    if len(_SHAPE_TEXTS) >= 1 << 14:
        _SHAPE_TEXTS.clear()
    _SHAPE_TEXTS[key] = (shape, text)       # (keeping the shape alive: its id stays its own)
    return text


_SHAPE_TEXTS: dict[tuple[int, bool], tuple[Shape, str]] = {}


def _shape_text(shape: Shape, layout: bool) -> str:
    if shape.is_tuple:
        if shape.element_type == "buffer":       # b(f32[4])
            return "b(" + ", ".join(format_shape(s, layout) for s in shape.tuple_shapes) + ")"
        return "(" + _index_join([format_shape(s, layout) for s in shape.tuple_shapes]) + ")"
    return shape.to_str(layout)


def _index_join(items: list[str]) -> str:
    parts = []
    for k, it in enumerate(items):
        if k == 0:
            parts.append(it)
        elif k % 5 == 0:
            parts.append(f", /*index={k}*/{it}")
        else:
            parts.append(", " + it)
    return "".join(parts)


# ----------------------------------------------------------------------------- attribute order

# The order XLA prints the module header attributes in (HloModule::Print).
_MODULE_ORDER = (
    "is_scheduled", "input_output_alias", "buffer_donor", "alias_passthrough_params",
    "entry_computation_layout", "allow_spmd_sharding_propagation_to_parameters",
    "allow_spmd_sharding_propagation_to_output", "replica_count", "num_partitions",
    "use_auto_spmd_partitioning", "spmd_output_sharding", "spmd_parameters_shardings",
    "launch_id", "cross_program_prefetches", "device_assignment", "frontend_attributes",
    "origin_recovery_table",
)

# Opcode-specific attributes, in the order XLA prints them (PrintExtraAttributesImpl of the
# instruction class, then the called computations printed by PrintExtraAttributes).
_DOT = ("lhs_batch_dims", "lhs_contracting_dims", "rhs_batch_dims", "rhs_contracting_dims")
_ALL_REDUCE = ("channel_id", "replica_groups", "constrain_layout", "use_global_device_ids", "mode",
               "to_apply")
_ALL_GATHER = ("channel_id", "replica_groups", "constrain_layout", "dimensions", "use_global_device_ids")
_PERMUTE = ("channel_id", "source_target_pairs", "slice_sizes")
_CHANNEL = ("channel_id", "is_host_transfer")
_BATCH_NORM = ("epsilon", "feature_index")

_OPCODE_ORDER: dict[str, tuple[str, ...]] = {
    "compare": ("direction", "type", "order"),
    "broadcast": ("dimensions",),
    "transpose": ("dimensions",),
    "reverse": ("dimensions",),
    "concatenate": ("dimensions",),
    "get-dimension-size": ("dimensions",),
    "set-dimension-size": ("dimensions",),
    "reshape": ("inferred_dimension",),
    "slice": ("slice",),
    "pad": ("padding",),
    "iota": ("iota_dimension",),
    "reduce-precision": ("exponent_bits", "mantissa_bits"),
    "reduce": ("dimensions", "to_apply"),
    "reduce-window": ("window", "to_apply"),
    "select-and-scatter": ("window", "select", "scatter"),
    "map": ("dimensions", "to_apply"),
    "sort": ("dimensions", "is_stable", "to_apply"),
    "topk": ("k", "largest", "is_stable", "to_apply"),
    "scan": ("dimensions", "num_carries", "is_reverse", "is_associative", "to_apply"),
    "dot": _DOT + ("operand_precision", "algorithm"),
    "ragged-dot": _DOT + ("lhs_ragged_dims", "rhs_group_dims", "operand_precision"),
    "scaled-dot": _DOT + ("operand_precision", "algorithm"),
    "convolution": ("window", "dim_labels", "feature_group_count", "batch_group_count",
                    "convolution_kind", "operand_precision", "sparsity_config"),
    "fft": ("fft_type", "fft_length"),
    "triangular-solve": ("left_side", "lower", "unit_diagonal", "transpose_a"),
    "cholesky": ("lower",),
    "batch-norm-training": _BATCH_NORM,
    "batch-norm-inference": _BATCH_NORM,
    "batch-norm-grad": _BATCH_NORM,
    "gather": ("offset_dims", "collapsed_slice_dims", "start_index_map", "operand_batching_dims",
               "start_indices_batching_dims", "index_vector_dim", "slice_sizes", "indices_are_sorted"),
    "scatter": ("update_window_dims", "inserted_window_dims", "scatter_dims_to_operand_dims",
                "input_batching_dims", "scatter_indices_batching_dims", "index_vector_dim",
                "indices_are_sorted", "unique_indices", "to_apply"),
    "dynamic-slice": ("dynamic_slice_sizes",),
    "get-tuple-element": ("index",),
    "call": ("to_apply", "is_composite"),
    "while": ("condition", "body"),
    "conditional": ("true_computation", "false_computation", "branch_computations"),
    "fusion": ("kind", "output_to_operand_aliasing", "calls"),
    # XLA prints a custom-call's to_apply= as called_computations={...}, in that place.
    "custom-call": ("window", "dim_labels", "feature_group_count", "batch_group_count", "padding_type",
                    "operand_precision", "custom_call_target", "operand_layout_constraints",
                    "custom_call_has_side_effect", "literal", "output_to_operand_aliasing", "schedule",
                    "api_version", "to_apply", "called_computations"),
    "async-start": ("async_execution_thread", "output_to_operand_aliasing", "calls"),
    "async-update": ("async_execution_thread", "calls"),
    "async-done": ("async_execution_thread", "calls"),
    "all-reduce": _ALL_REDUCE,
    "all-reduce-start": _ALL_REDUCE,
    "reduce-scatter": ("channel_id", "replica_groups", "constrain_layout", "use_global_device_ids",
                       "mode", "dimensions", "to_apply"),
    "all-gather": _ALL_GATHER,
    "all-gather-start": _ALL_GATHER,
    "all-to-all": ("channel_id", "replica_groups", "constrain_layout", "dimensions"),
    "ragged-all-to-all": ("channel_id", "replica_groups", "dimensions"),
    "collective-broadcast": ("channel_id", "replica_groups"),
    "collective-permute": _PERMUTE,
    "collective-permute-start": _PERMUTE,
    "infeed": ("infeed_config",),
    "outfeed": ("outfeed_shape", "outfeed_config"),
    "send": _CHANNEL,
    "send-done": _CHANNEL,
    "recv": _CHANNEL,
    "recv-done": _CHANNEL,
    "rng": ("distribution",),
    "rng-bit-generator": ("algorithm",),
    "rng-get-and-update-state": ("delta",),
    "copy-start": ("cross_program_prefetch_index",),
    "domain": ("domain",),
    "parameter": ("parameter_replication",),
}

# Attributes every instruction may carry, in the order XLA prints them after the specific ones.
_COMMON_ORDER = ("parameter_replication", "sharding", "frontend_attributes", "control-predecessors",
                 "statistics", "origin", "metadata", "backend_config")


def _specific_order(opcode: str) -> tuple[str, ...]:
    order = _OPCODE_ORDER.get(opcode)
    if order is not None:
        return order
    # `<op>-start` / `-update` / `-done` sugar for an async op wrapping <op>
    for suffix in ("-start", "-update", "-done"):
        if opcode.endswith(suffix):
            base = opcode[: -len(suffix)]
            inner = _OPCODE_ORDER.get(base, ()) if suffix == "-start" else ()
            head = ("async_execution_thread",)
            if "output_to_operand_aliasing" not in inner:
                head += ("output_to_operand_aliasing",)
            return head + inner + ("calls",)
    # elementwise unary ops with result accuracy, and the rest
    return ("result_accuracy",)


def instruction_attribute_order(inst: Instruction) -> list[str]:
    """The instruction's attribute names in the order XLA prints them.  Attributes this
    table does not know keep their source order, after the opcode-specific ones."""
    key = (inst.opcode, *inst.attrs)
    order = _ORDERS.get(key)
    if order is None:
        if len(_ORDERS) >= 1 << 14:
            _ORDERS.clear()
        order = _ORDERS[key] = tuple(_attribute_order(inst))
    return list(order)


_ORDERS: dict[tuple, tuple[str, ...]] = {}      # (opcode, attribute names in source order) -> order


def _attribute_order(inst: Instruction) -> list[str]:
    specific = _specific_order(inst.opcode)
    rank = {a: k for k, a in enumerate(specific)}
    n = len(specific)
    common = {a: n + 1 + k for k, a in enumerate(_COMMON_ORDER) if a not in rank}
    names = list(inst.attrs)
    return sorted(names, key=lambda a: rank.get(a, common.get(a, n)))   # sorted() is stable


def module_attribute_order(names) -> list[str]:
    rank = {a: k for k, a in enumerate(_MODULE_ORDER)}
    return sorted(names, key=lambda a: rank.get(a, len(rank)))


# ----------------------------------------------------------------------------- attribute values

class _Opts:
    __slots__ = ("percent", "operand_shapes", "metadata", "backend_config", "large_constants", "texts")

    def __init__(self, percent=True, operand_shapes=False, metadata=True, backend_config=True,
                 large_constants=True):
        self.percent = percent
        self.operand_shapes = operand_shapes
        self.metadata = metadata
        self.backend_config = backend_config
        self.large_constants = large_constants
        # (attribute name, id(value)) -> (value, `name=text`): the parser shares equal attribute values
        self.texts: dict[tuple[str, int], tuple[Any, str]] = {}

    def name(self, n: str) -> str:
        return "%" + n if self.percent else n


def _frontend_attributes(fa: FrontendAttributes) -> str:
    # In the IR's order: XLA sorts the keys, but the IR compares the items in order, so a
    # re-ordered print would not read back as the same module.  (XLA-printed input is sorted.)
    parts = []
    for k, v in fa.items:
        parts.append(f"{k}={v}" if raw_dict_ok(v) else f"{k}={quote(v)}")
    return "{" + ",".join(parts) + "}"


@lru_cache(maxsize=1024)
def raw_dict_ok(v: str) -> bool:
    """XLA writes a value that lexes as a JSON dict unquoted.  The parser keeps a raw `{...}` value
    as its source text, and an `{1,2}`-like one as a list of integers: write V raw only when it
    reads back unchanged, i.e. when the grammar reads it (see _reads_as_one_group) as one brace
    group spanning all of V, or as a canonical integer list."""
    if not lexes_as_json_dict(v) or not v.startswith("{"):
        return False
    m = _INT_LIST.match(v)
    if m is not None:
        if m.end() != len(v):
            return False
        ints = [int(x) for x in re.findall(r"-?\d+", v)]
        return v == "{" + ",".join(map(str, ints)) + "}"
    return _reads_as_one_group(v)


# The grammar's terminals inside an attribute value (grammar/hlo.lark), in the order its lexer tries
# them (priority, then width): SHAPE, INT_LIST, SQ_STRING, IOTA_T, NAME, STRING, comments and
# whitespace, then punctuation.
_SHAPE_TERMINAL = (r"(?:pred|[su]\d+|f\d+(?:e\d+m\d+\w*)?|bf16|c64|c128|token|opaque)\[[^\]\n]*\]"
                   r'(?:\{(?:[^{}=%\n"]++|\{[^{}\n]*\})*+\}|<[\d,\s]*>)?')
_INT_LIST = re.compile(r"\{\s*(?:-?\d+\s*(?:,\s*-?\d+\s*)*)?\}")
_VALUE_TERMINALS = re.compile(
    "(?P<shape>" + _SHAPE_TERMINAL + ")|(?P<atom>" + _INT_LIST.pattern + r"|'[^'\n]*')"
    r"|(?P<iota>T(?=\())"
    r"|(?P<name>(?!->)[^\s{}\[\](),=\"<:/]+)"
    r'|(?P<string>"[^"\\]*(?:\\.[^"\\]*)*")'
    r"|(?P<skip>/\*[^*]*+\*++(?:[^/*][^*]*+\*++)*+/|//[^\n\r]*|\s+)"
    r"|(?P<punct>->|<=|[{}\[\]()=:<,])")
_CLOSE = {"{": "}", "[": "]", "(": ")"}
_MAX_GROUP_DEPTH = 255         # the parser's MAX_NESTING, less the frontend_attributes={...} around


def _reads_as_one_group(v: str) -> bool:
    """Whether the grammar reads V (which starts with `{`) as one group of items ending at V's end,
    as the value of `k=` in frontend_attributes={k=V}: every character lexes, brackets match, a
    `name=` or `'name'=` is followed by a value, and groups nest less deeply than the parser
    allows."""
    stack: list[list] = []           # [closing bracket, depth of the deepest group inside]
    pos, n = 0, len(v)
    want_value = True               # after `=` (and at the start): a group, a word, a string or `<`
    last = None                      # kind of the previous token in this group
    while pos < n:
        m = _VALUE_TERMINALS.match(v, pos)
        if m is None:
            return False
        kind, text = m.lastgroup, m.group()
        pos = m.end()
        if kind == "skip":
            continue
        if kind == "shape":
            try:
                parse_array_shape(text)             # the parser reads the shape token, or fails
            except (ShapeSyntaxError, ValueError):  # (as the parser, which then refuses the text)
                return False
        if want_value:
            if kind == "iota":
                kind = "name"                       # `T` is a word where a value is expected
            elif kind == "punct" and text == "<=":
                kind, pos = "punct", pos - 1        # `<` (a value), then `=`
                text = "<"
            if kind == "punct" and text not in ("{", "[", "(", "<"):
                return False
            want_value = False
            if text not in _CLOSE:
                last = "value"                      # a word, string, shape or `<`: the key=value ends
                continue
        if kind == "punct" and text in _CLOSE:
            stack.append([_CLOSE[text], 0])
            last = None
            continue
        if kind == "punct" and text in ")]}":
            if not stack or stack[-1][0] != text:
                return False
            _, inner = stack.pop()
            depth = inner + 1
            if depth > _MAX_GROUP_DEPTH:
                return False
            if not stack:
                return pos == n
            stack[-1][1] = max(stack[-1][1], depth)
            last = "group"
            continue
        if kind == "punct" and text == "=" and last in ("name", "sq"):
            want_value = True                       # `name=`: a value must follow
            last = None
            continue
        last = "sq" if kind == "atom" and text.startswith("'") else kind
    return False


def _layout_shapes(shapes) -> str:
    return _index_join([format_shape(s) for s in shapes])


# Values of the raw kinds are kept as the parser's canonical text of the generic value (no
# spaces after commas).  The helpers below only change whitespace, which the parser ignores
# there, so the printed value reads back as the same RawValue.

def _scan(text: str):
    """Yield (index, char, enclosing open brackets) for every character outside quotes."""
    stack: list[str] = []
    quote_ch = None
    k = 0
    while k < len(text):
        ch = text[k]
        if quote_ch:
            if ch == "\\":
                k += 2
                continue
            if ch == quote_ch:
                quote_ch = None
            k += 1
            continue
        if ch in "\"'":
            quote_ch = ch
        elif ch in "{[(":
            yield k, ch, stack
            stack.append(ch)
            k += 1
            continue
        elif ch in "}])":
            if stack:
                stack.pop()
        yield k, ch, stack
        k += 1


def _space_commas(text: str, want) -> str:
    """Put one space after each comma (outside quotes) for which want(stack, prev, next) holds."""
    out, last = [], 0
    for k, ch, stack in _scan(text):
        if ch == "," and want(stack, text[k - 1:k], text[k + 1:k + 2]) and text[k + 1:k + 2] != " ":
            out.append(text[last:k + 1] + " ")
            last = k + 1
    out.append(text[last:])
    return "".join(out)


def _split_top(body: str) -> list[str]:
    """Split at commas not nested in any bracket (outside quotes)."""
    parts, start = [], 0
    for k, ch, stack in _scan(body):
        if ch == "," and not stack:
            parts.append(body[start:k])
            start = k + 1
    parts.append(body[start:])
    return [p.strip() for p in parts]


_DEVICES_SPACE = re.compile(r"(devices=\[[\d,]*\]) (?=\d)")


def _domain_text(text: str) -> str:
    """{kind="sharding", entry={maximal device=0}, exit={devices=[2]0,1}}"""
    text = _space_commas(text, lambda st, prev, nxt: len(st) == 1 or (prev == "}" and nxt == "{"))
    return _DEVICES_SPACE.sub(r"\1", text)


def _origin_text(text: str) -> str:
    """{({"p" {0}}, ({"p" {1,0}}, {}))}"""
    return _space_commas(text, lambda st, prev, nxt: bool(st) and st[-1] == "(")


def _literal_attr_text(text: str) -> str:
    """custom-call literal=: `shape {...}` (kept verbatim) or a tuple `( f32[] 1.5, (  ) )`."""
    if not text.startswith("("):
        return text
    return _tuple_literal_text(text)


def _tuple_literal_text(text: str) -> str:
    body = text.strip()[1:-1].strip()
    if not body:
        return "(  )"
    elems = []
    for e in _split_top(body):
        if e.startswith("("):
            elems.append(_tuple_literal_text(e))
            continue
        shape_text, _, lit = e.partition(" ")
        elems.append(shape_text + " " + _canonical_literal(shape_text, lit.strip()))
    return "( " + ", ".join(elems) + " )"


def _canonical_literal(shape_text: str, lit: str) -> str:
    """XLA's spelling of a literal, if it differs from `lit` only in whitespace."""
    try:
        from .literal import parse_literal
        from .shape import parse_shape_text
        canon = format_literal(parse_literal(lit, parse_shape_text(shape_text)))
    except Exception:
        return lit
    return canon if re.sub(r"\s+", "", canon) == re.sub(r"\s+", "", lit) else lit


def _recovery_table_text(text: str) -> str:
    """origin_recovery_table: one entry `{key} : {value}` a line, an entry's recovery module
    string on the next line, as XLA prints it."""
    body = text.strip()
    if not (body.startswith("{") and body.endswith("}")):
        return text
    body = body[1:-1]
    # top-level tokens: groups, ':' and ',' separators, quoted strings
    toks: list[str] = []
    k, n = 0, len(body)
    while k < n:
        ch = body[k]
        if ch in " \t\r\n":
            k += 1
        elif ch in ":,":
            toks.append(ch)
            k += 1
        elif ch in "\"'":
            j = k + 1
            while j < n and body[j] != ch:
                j += 2 if body[j] == "\\" else 1
            toks.append(body[k:j + 1])
            k = j + 1
        elif ch in "{(":
            end = None
            for j, c, stack in _scan(body[k:]):
                if c in "})" and not stack:
                    end = k + j
                    break
            if end is None:
                return text
            toks.append(body[k:end + 1])
            k = end + 1
        else:
            return text
    lines, i = [], 0
    try:
        while i < len(toks):
            key, colon, value = toks[i], toks[i + 1], toks[i + 2]
            if colon != ":":
                return text
            i += 3
            line = f"  {key} : {value}"
            if i + 1 < len(toks) and toks[i] == "," and toks[i + 1][:1] in "\"'":
                line += ",\n  " + toks[i + 1]
                i += 2
            lines.append(line)
    except IndexError:
        return text
    return "{\n" + "\n".join(lines) + "\n}\n"


def format_attribute_value(name: str, value: Any, opts: _Opts | None = None) -> str:
    """The text after `name=` for a decoded attribute value."""
    opts = opts or _Opts()
    if isinstance(value, (ComputationRef, InlineComputation)):
        return opts.name(value.name)
    if isinstance(value, tuple) and value and isinstance(value[0], ComputationRef):
        return "{" + ", ".join(opts.name(c.name) for c in value) + "}"
    if name == "control-predecessors" and isinstance(value, tuple):
        return "{" + ", ".join(opts.name(s) for s in value) + "}"
    if isinstance(value, FrontendAttributes):
        return _frontend_attributes(value)
    if isinstance(value, ComputationLayout):
        return "{(" + _layout_shapes(value.parameters) + ")->" + format_shape(value.result) + "}"
    if isinstance(value, Shape):
        return format_shape(value)
    if isinstance(value, str) and not isinstance(value, Enum):
        return quote(value)
    if isinstance(value, RawValue):
        respace = _RAW_TEXT.get(name)
        if respace is not None:
            return respace(value.text)
    return attr_text(value)


_RAW_TEXT = {"domain": _domain_text, "origin": _origin_text, "literal": _literal_attr_text,
             "origin_recovery_table": _recovery_table_text}


def _without_metadata(s: Sharding) -> Sharding:
    """The sharding as XLA prints it with print_metadata=false."""
    if s.kind == "tuple":
        return replace(s, elements=tuple(_without_metadata(e) for e in s.elements))
    if s.kind == "raw":
        text = s.extra[0]
        cut = None
        for k, ch, stack in _scan(text):
            if len(stack) == 1 and text.startswith("metadata=", k):
                cut = k
                break
        if cut is not None:
            start = cut
            while start > 1 and text[start - 1] in " ,":
                start -= 1
            depth = 0
            for k, ch, stack in _scan(text[cut:]):
                if ch in "{[(":
                    depth += 1
                elif ch in "}])":
                    depth -= 1
                    if depth == 0:
                        return replace(s, extra=(text[:start] + text[cut + k + 1:],) + s.extra[1:])
        return s
    return replace(s, metadata=()) if s.metadata else s


def _attributes(inst: Instruction, opts: _Opts) -> list[str]:
    out = []
    texts = opts.texts
    for a in instruction_attribute_order(inst):
        v = inst.attrs[a]
        if a == "metadata" and not opts.metadata:
            continue
        if a == "backend_config" and not opts.backend_config:
            continue
        hit = texts.get((a, id(v)))
        if hit is not None and hit[0] is v:
            out.append(hit[1])
            continue
        was = v
        if a == "sharding" and not opts.metadata and isinstance(v, Sharding):
            v = _without_metadata(v)
        text = f"{a}={format_attribute_value(a, v, opts)}"
        texts[(a, id(was))] = (was, text)       # (keeping the value alive: its id stays its own)
        out.append(text)
    return out


# ----------------------------------------------------------------------------- instructions

def format_instruction(inst: Instruction, *, computation: Computation | None = None,
                       is_root: bool = False, percent: bool = True, operand_shapes: bool = False,
                       metadata: bool = True, backend_config: bool = True,
                       large_constants: bool = True, _opts: _Opts | None = None) -> str:
    """One instruction line, without indentation: `[ROOT ]%name = shape opcode(operands), attrs`.

    `computation` supplies the operands' shapes for `operand_shapes=True` (an operand
    shape written inline in the source is used when the IR kept one)."""
    opts = _opts or _Opts(percent, operand_shapes, metadata, backend_config, large_constants)
    head = ("ROOT " if is_root else "") + opts.name(inst.name) + " = "
    if inst.shape is not None:
        head += format_shape(inst.shape) + " "
    head += inst.opcode + "(" + _operands(inst, computation, opts) + ")"
    attrs = _attributes(inst, opts)
    return head + "".join(", " + a for a in attrs)


def _operands(inst: Instruction, computation: Computation | None, opts: _Opts) -> str:
    if inst.opcode == "parameter" and inst.parameter_number is not None:
        return str(inst.parameter_number)
    if inst.opcode == "constant" and inst.literal is not None:
        return format_literal(inst.literal, None if opts.large_constants else 10)
    items = []
    written = inst.operand_shapes or ()
    by_name = computation.by_name if (computation is not None and opts.operand_shapes) else {}
    for k, op in enumerate(inst.operands):
        text = opts.name(op)
        if opts.operand_shapes:
            shape = written[k] if k < len(written) and written[k] is not None else None
            if shape is None and op in by_name:
                shape = by_name[op].shape
            if shape is not None:
                text = format_shape(shape) + " " + text
        items.append(text)
    return _index_join(items)


# ----------------------------------------------------------------------------- computations

def _signature(comp: Computation) -> str | None:
    """` (p0: f32[2], ...) -> f32[2]`, from the parameter and root instructions."""
    params = [i for i in comp.instructions if i.opcode == "parameter"]
    params.sort(key=lambda i: (i.parameter_number is None, i.parameter_number or 0))
    root = comp.by_name.get(comp.root)
    if root is None or root.shape is None or any(p.shape is None for p in params):
        return None
    ps = ", ".join(f"{p.name}: {format_shape(p.shape, False)}" for p in params)
    return f" ({ps}) -> {format_shape(root.shape, False)}"


def format_computation(comp: Computation, *, percent: bool = True, operand_shapes: bool = False,
                       metadata: bool = True, backend_config: bool = True,
                       large_constants: bool = True, _opts: _Opts | None = None) -> str:
    """A computation as XLA prints it, without a trailing newline."""
    opts = _opts or _Opts(percent, operand_shapes, metadata, backend_config, large_constants)
    sig = _signature(comp) or ""
    lines = [("ENTRY " if comp.is_entry else "") + opts.name(comp.name) + sig + " {"]
    for inst in comp.instructions:
        lines.append("  " + format_instruction(inst, computation=comp, is_root=inst.name == comp.root,
                                               _opts=opts))
    close = "}"
    if comp.execution_thread is not None:
        close += f", execution_thread={quote(comp.execution_thread)}"
    lines.append(close)
    return "\n".join(lines)


# ----------------------------------------------------------------------------- modules

# Words the parser never reads as a bare name (XLA's lexer keywords; element types are added below):
# a module, computation or instruction so named is written with its '%'.
KEYWORDS = frozenset({"true", "false", "inf", "nan", "HloModule", "ENTRY", "ROOT", "FileLocations", "FileNames",
                      "FunctionNames", "StackFrames", "maximal", "replicated", "manual", "last_tile_dim_replicate",
                      "shard_as", "shard_like", "unknown", "unreduced"})
RESERVED_NAMES = KEYWORDS | frozenset(ELEMENT_TYPES)


def _header(module: Module, opts: _Opts) -> str:
    name = module.name
    parts = ["HloModule " + ("%" + name if name in RESERVED_NAMES else name)]
    for a in module_attribute_order(module.attrs):
        v = module.attrs[a]
        parts.append(f"{a}={format_attribute_value(a, v, opts)}")
    return ", ".join(parts)


def _stack_frames(sf: StackFrames) -> str:
    out = ["FileNames"]
    out += [f"{k} {quote(v)}" for k, v in sf.file_names.items()]
    out += ["", "FunctionNames"]
    out += [f"{k} {quote(v)}" for k, v in sf.function_names.items()]
    out += ["", "FileLocations"]
    out += [f"{k} {{file_name_id={l.file_name_id} function_name_id={l.function_name_id} line={l.line} "
            f"end_line={l.end_line} column={l.column} end_column={l.end_column}}}"
            for k, l in sf.file_locations.items()]
    out += ["", "StackFrames"]
    out += [f"{k} {{file_location_id={f.file_location_id} parent_frame_id={f.parent_frame_id}}}"
            for k, f in sf.frames.items()]
    return "\n".join(out) + "\n\n"


def format_module(module: Module, *, percent: bool = True, operand_shapes: bool = False,
                  metadata: bool = True, backend_config: bool = True,
                  large_constants: bool = True) -> str:
    """The module as XLA's `ToString()` prints it (with `print_large_constants`), in the IR's order.

    percent: names with `%`; operand_shapes: `f32[2]{0} %x` operands; metadata / backend_config:
    print those attributes; large_constants: print every constant in full (else constants of
    more than 10 elements, and tuple constants, are elided to `{...}` as XLA does)."""
    opts = _Opts(percent, operand_shapes, metadata, backend_config, large_constants)
    with NoGC():          # (a large module's text: collections would traverse the module for nothing)
        out = [_header(module, opts), "\n\n"]
        if module.stack_frames and opts.metadata:      # XLA prints the index with the metadata
            out.append(_stack_frames(module.stack_frames))
            out.append("\n")
        for comp in module.computations:
            out.append(format_computation(comp, _opts=opts))
            out.append("\n\n")
        return "".join(out)
