"""Shape rules of the reduction family: ops driven by a computation applied over elements.

reduce, reduce-window, select-and-scatter, map, sort, topk, scan.

The first half of this module holds the small shape predicates the reduction, linalg, control,
collective and io/rng families share (XLA's ``ShapeUtil::Compatible*`` family, window arithmetic,
the reducer-signature check); the other family modules import them from here.

Sources: XLA's ``ShapeInference::Infer{Reduce,ReduceWindow,SelectAndScatter,Map,TopK}Shape``,
``VerifyReducerShape``, ``InferWindowOutputShape`` and ``ShapeVerifier::Handle{Sort,Scan,Reduce,
ReduceWindow,Map}`` (xla/service/shape_inference.cc, xla/service/hlo_verifier.cc), and the
operation semantics (../shared/spec/004_*).
"""
from __future__ import annotations

from typing import Mapping, Sequence

from ...ir.dtypes import ELEMENT_TYPES
from ...ir.shape import UNBOUNDED, Shape
from ..registry import RuleContext, fail, rule

# ============================================================================ shared helpers

_NON_ARRAY = ("tuple", "token", "opaque", "buffer")


def kind(element_type: str) -> str:
    """pred | int | uint | float | complex | token | opaque | tuple | buffer."""
    et = ELEMENT_TYPES.get(element_type)
    return et.kind if et is not None else element_type


def is_buffer(s: Shape) -> bool:
    return s.element_type == "buffer"


def is_tuple(s: Shape) -> bool:
    return s.tuple_shapes is not None and not is_buffer(s)


def is_token(s: Shape) -> bool:
    return s.element_type == "token" and s.tuple_shapes is None


def is_array(s: Shape) -> bool:
    return s.tuple_shapes is None and s.element_type not in _NON_ARRAY


def is_scalar(s: Shape) -> bool:
    return is_array(s) and not s.dims


def is_float(et: str) -> bool:
    return kind(et) == "float"


def is_complex(et: str) -> bool:
    return kind(et) == "complex"


def is_integral(et: str) -> bool:
    return kind(et) in ("int", "uint")


def txt(s: Shape | None) -> str:
    """A shape in HLO notation without layout (messages)."""
    return "<unknown>" if s is None else s.to_str(False)


def array(element_type: str, dims: Sequence[int] = (), dynamic: Sequence[bool] | None = None) -> Shape:
    dims = tuple(dims)
    dyn = tuple(dynamic) if dynamic is not None else tuple(d == UNBOUNDED for d in dims)
    return Shape.array(element_type, dims, dynamic=dyn)


def scalar(element_type: str) -> Shape:
    return Shape.array(element_type, ())


def token() -> Shape:
    return Shape("token")


def tup(shapes) -> Shape:
    return Shape.tuple_of(tuple(shapes))


def strip(s: Shape) -> Shape:
    """The shape as the rules return it: default layout on every array leaf."""
    if is_buffer(s):
        return Shape("buffer", tuple_shapes=(strip(s.tuple_shapes[0]),))
    if is_tuple(s):
        return tup(strip(x) for x in s.tuple_shapes)
    if s.element_type in ("token", "opaque"):
        return Shape(s.element_type)
    return Shape.array(s.element_type, s.dims, dynamic=s.dynamic)


def same_element_type_ignoring_fp(a: str, b: str) -> bool:
    return a == b or (is_float(a) and is_float(b))


def compatible(a: Shape | None, b: Shape | None, *, ignore_fp: bool = False,
               ignore_element_type: bool = False, ignore_buffer: bool = False) -> bool:
    """XLA's ShapeUtil::Compatible[IgnoringFpPrecision|IgnoringElementType]: layouts and the
    dynamic flags are ignored, dimension sizes and (unless told) element types are not.  A buffer
    b(s) matches only a buffer, unless `ignore_buffer` (Shape::Equal().IgnoreBuffer()): then every
    buffer, at any depth, is compared as the shape it holds."""
    if a is None or b is None:
        return False
    kw = dict(ignore_fp=ignore_fp, ignore_element_type=ignore_element_type, ignore_buffer=ignore_buffer)
    if is_buffer(a) or is_buffer(b):
        if ignore_buffer:
            return compatible(a.tuple_shapes[0] if is_buffer(a) else a, b.tuple_shapes[0] if is_buffer(b) else b, **kw)
        return is_buffer(a) and is_buffer(b) and compatible(a.tuple_shapes[0], b.tuple_shapes[0], **kw)
    if is_tuple(a) or is_tuple(b):
        return (is_tuple(a) and is_tuple(b) and len(a.tuple_shapes) == len(b.tuple_shapes)
                and all(compatible(x, y, **kw) for x, y in zip(a.tuple_shapes, b.tuple_shapes)))
    if not is_array(a) or not is_array(b):
        return a.element_type == b.element_type
    if a.dims != b.dims:
        return False
    if ignore_element_type:
        return True
    if ignore_fp:
        return same_element_type_ignoring_fp(a.element_type, b.element_type)
    return a.element_type == b.element_type


def compatible_dim(a: int, b: int) -> bool:
    """XLA's CompatibleDimensionSizes: equal, or one of them unbounded (?)."""
    return a == b or a == UNBOUNDED or b == UNBOUNDED


def subshape(s: Shape, index: Sequence[int]) -> Shape | None:
    """The subshape at a shape index, or None when the index is not valid for the shape."""
    for i in index:
        if not is_tuple(s) or not 0 <= i < len(s.tuple_shapes):
            return None
        s = s.tuple_shapes[i]
    return s


def index_text(index: Sequence[int]) -> str:
    return "{" + ",".join(map(str, index)) + "}"


def dims_attr(attrs: Mapping, name: str) -> tuple[int, ...]:
    v = attrs.get(name)
    return tuple(v) if v is not None else ()


def config_value(ctx: RuleContext, name: str) -> int | None:
    """replica_count / num_partitions from the module header, when the context carries them
    (RuleContext.replica_count / .num_partitions, or a module_attrs mapping); None if unknown."""
    v = getattr(ctx, name, None)
    if v is None:
        attrs = getattr(ctx, "module_attrs", None)
        if attrs:
            v = attrs.get(name)
    return int(v) if v is not None else None


def computation(ctx: RuleContext, attrs: Mapping, name: str) -> tuple[list[Shape], Shape | None]:
    """(parameter shapes, result shape) of the computation named by attribute `name`."""
    ref = attrs.get(name)
    if ref is None:
        fail(ctx.opcode, name, "name a computation", "nothing", ())
    params, result = ctx.computation(ref.name)
    return list(params), result


def need_result(ctx: RuleContext, operands, what: str, result: Shape | None) -> Shape:
    if result is None:
        fail(ctx.opcode, f"the result shape of {what}", "be known", "<unknown>", operands)
    return result


def expect_array(ctx: RuleContext, operands: Sequence[Shape], i: int, what: str = "") -> Shape:
    s = operands[i]
    if not is_array(s):
        fail(ctx.opcode, what or f"operand {i}", "be an array", txt(s), operands)
    return s


def expect_operands(ctx: RuleContext, operands: Sequence[Shape], count: int, *names: str) -> list[Shape]:
    """Exactly `count` operands, the first ones arrays, called `names` in messages; those arrays."""
    expect_count(ctx, operands, count, count)
    return [expect_array(ctx, operands, i, name) for i, name in enumerate(names)]


def expect_arrays(ctx: RuleContext, operands: Sequence[Shape]) -> None:
    """At least one operand, every one an array."""
    if not operands:
        fail(ctx.opcode, "the operand count", "be at least 1", 0, operands)
    for i in range(len(operands)):
        expect_array(ctx, operands, i, f"operand {i}")


def expect_count(ctx: RuleContext, operands: Sequence[Shape], lo: int, hi: int | None = None) -> None:
    n = len(operands)
    if n < lo or (hi is not None and n > hi):
        want = f"{lo}" if hi == lo else (f"at least {lo}" if hi is None else f"{lo} to {hi}")
        fail(ctx.opcode, "the operand count", f"be {want}", n, operands)


def declared_shape(ctx: RuleContext, operands) -> Shape:
    d = ctx.declared
    if d is None:
        fail(ctx.opcode, "the result shape", "be declared (it is not a function of the operands)",
             "none", operands)
    return d


def _float_props(et: str) -> tuple[int, int]:
    """(overflow exponent, significand width) of a floating-point type."""
    import ml_dtypes
    fi = ml_dtypes.finfo(ELEMENT_TYPES[et].numpy)
    return int(fi.maxexp), int(fi.nmant) + 1


def higher_precision(a: str, b: str) -> str:
    """XLA's primitive_util::HigherPrecisionType."""
    if a == b:
        return a

    def props(t):
        comp = {"c64": "f32", "c128": "f64"}.get(t, t)
        fl = is_float(comp)
        exp, sig = _float_props(comp) if fl else (-1, -1)
        return (is_complex(t), exp, sig, ELEMENT_TYPES[comp].bits, kind(comp) == "int")
    return a if props(a) >= props(b) else b


# ---------------------------------------------------------------------------- windows

def _dilated(bound: int, dilation: int) -> int:
    return 0 if bound == 0 else (bound - 1) * dilation + 1


def _strided(bound: int, window: int, stride: int) -> int:
    if window > bound:
        return 0
    return (bound - window) // stride + 1


def window_output(ctx: RuleContext, operands: Sequence[Shape], base: Shape, window, element_type: str,
                  what: str = "window") -> Shape:
    """XLA's InferWindowOutputShape: one output size per base dimension."""
    wdims = tuple(window.dimensions) if window is not None else ()
    if len(wdims) != base.rank:
        fail(ctx.opcode, what, f"have one dimension per base dimension ({base.rank})", len(wdims), operands)
    out, dyn = [], []
    for i, w in enumerate(wdims):
        if w.size <= 0:
            fail(ctx.opcode, f"{what} size", "be positive", f"{w.size} in dimension {i}", operands)
        if w.stride <= 0:
            fail(ctx.opcode, f"{what} stride", "be positive", f"{w.stride} in dimension {i}", operands)
        if w.base_dilation < 1:
            fail(ctx.opcode, f"{what} base dilation (lhs_dilate)", "be at least 1",
                 f"{w.base_dilation} in dimension {i}", operands)
        if w.window_dilation < 1:
            fail(ctx.opcode, f"{what} window dilation (rhs_dilate)", "be at least 1",
                 f"{w.window_dilation} in dimension {i}", operands)
        d = base.dims[i]
        if d == UNBOUNDED:
            out.append(UNBOUNDED)
            dyn.append(True)
            continue
        padded = w.padding_low + _dilated(d, w.base_dilation) + w.padding_high
        out.append(_strided(padded, _dilated(w.size, w.window_dilation), w.stride))
        dyn.append(base.dynamic[i] if i < len(base.dynamic) else False)
    return array(element_type, out, dyn)


# ---------------------------------------------------------------------------- reducers

def verify_reducer(ctx: RuleContext, operands: Sequence[Shape], params: Sequence[Shape],
                   result: Shape | None, init_shapes: Sequence[Shape], input_types: Sequence[str],
                   n: int, name: str = "to_apply") -> list[Shape]:
    """XLA's VerifyReducerShape: `name` takes 2n scalars (accumulators, then elements) and returns
    n scalars (a tuple when n > 1) whose types match the init values and the inputs' element types.
    Returns the accumulator shapes."""
    op = ctx.opcode
    if len(params) != 2 * n:
        fail(op, name, f"take {2 * n} parameters", len(params), operands)
    if result is None:
        # the reducer's root has no written shape (the parser left it to inference): its result
        # must be the accumulators, i.e. the init values' scalar shapes
        accs = [scalar(s.element_type) if is_array(s) else strip(s) for s in init_shapes]
        result = accs[0] if n == 1 else tup(accs)
    if is_array(result):
        if n != 1:
            fail(op, f"the result of {name}", f"be a tuple of {n} scalars", txt(result), operands)
        accs = [result]
    elif is_tuple(result):
        if len(result.tuple_shapes) != n:
            fail(op, f"the result of {name}", f"be a tuple of {n} scalars", txt(result), operands)
        accs = list(result.tuple_shapes)
    else:
        fail(op, f"the result of {name}", "be a scalar or a tuple of scalars", txt(result), operands)
    for a in accs:
        if not is_scalar(a):
            fail(op, f"the result of {name}", "be a scalar or a tuple of scalars", txt(result), operands)
    for i in range(n):
        if not compatible(accs[i], params[i]):
            fail(op, f"parameter {i} of {name}", f"have the accumulator shape {txt(accs[i])}",
                 txt(params[i]), operands)
        if not compatible(accs[i], init_shapes[i], ignore_fp=True):
            fail(op, f"init value {i}", f"have the accumulator shape {txt(accs[i])}",
                 txt(init_shapes[i]), operands)
        if not compatible(scalar(input_types[i]), params[n + i], ignore_fp=True):
            fail(op, f"parameter {n + i} of {name}", f"be a {input_types[i]}[] scalar (the input element type)",
                 txt(params[n + i]), operands)
        if not compatible(accs[i], params[n + i], ignore_fp=True):
            fail(op, f"parameter {n + i} of {name}", f"match the accumulator shape {txt(accs[i])}",
                 txt(params[n + i]), operands)
    return accs


def strict_types(ctx: RuleContext, operands: Sequence[Shape], params: Sequence[Shape], name: str) -> None:
    """The verifier without mixed precision: operand i and parameter i of the computation have the
    same element type (XLA's SameElementTypesForOperandsAndToApplyParameters)."""
    for i, (o, p) in enumerate(zip(operands, params)):
        if o.element_type != p.element_type:
            fail(ctx.opcode, f"parameter {i} of {name}", f"have the element type of operand {i} ({o.element_type})",
                 txt(p), operands)


# ============================================================================ rules

def inputs_and_inits(ctx: RuleContext, operands: Sequence[Shape]):
    """(N, inputs, init values) of `op(inputs..., inits...)` (reduce, reduce-window): an even count of
    arrays, the inputs all of one set of dimensions."""
    op = ctx.opcode
    if len(operands) < 2 or len(operands) % 2:
        fail(op, "the operand count", "be even and at least 2 (N inputs, then N init values)",
             len(operands), operands)
    n = len(operands) // 2
    inputs, inits = operands[:n], operands[n:]
    for i in range(len(operands)):
        expect_array(ctx, operands, i, f"operand {i}")
    for i in range(1, n):
        if inputs[i].dims != inputs[0].dims:
            fail(op, f"input {i}", f"have the dimensions of input 0 ({txt(inputs[0])})", txt(inputs[i]), operands)
    return n, inputs, inits


def one_or_tuple(outs: Sequence[Shape], result: Shape | None) -> Shape:
    """One result for one output of an array-valued computation, else the tuple of the outputs."""
    return outs[0] if len(outs) == 1 and (result is None or is_array(result)) else tup(outs)


@rule("reduce")
def infer_reduce(operands, attrs, ctx):
    """reduce(inputs..., inits...): the inputs without `dimensions`, typed by the reducer's result."""
    op = ctx.opcode
    n, inputs, inits = inputs_and_inits(ctx, operands)
    arg = inputs[0]
    dims = dims_attr(attrs, "dimensions")
    for d in dims:
        if not 0 <= d < arg.rank:
            fail(op, "dimensions", f"be in [0, {arg.rank})", f"{d}", operands)
    params, result = computation(ctx, attrs, "to_apply")
    accs = verify_reducer(ctx, operands, params, result, inits, [s.element_type for s in inputs], n)
    if len(set(dims)) != len(dims):
        fail(op, "dimensions", "be unique", "{" + ",".join(map(str, dims)) + "}", operands)
    strict_types(ctx, operands, params, "to_apply")
    keep = [i for i in range(arg.rank) if i not in dims]
    new_dims = [arg.dims[i] for i in keep]
    new_dyn = [arg.dynamic[i] for i in keep]
    outs = [array(a.element_type, new_dims, new_dyn) for a in accs]
    return one_or_tuple(outs, result)


@rule("reduce-window")
def infer_reduce_window(operands, attrs, ctx):
    """reduce-window(inputs..., inits...): each input's window output, typed by its init value."""
    n, inputs, inits = inputs_and_inits(ctx, operands)
    params, result = computation(ctx, attrs, "to_apply")
    verify_reducer(ctx, operands, params, result, inits, [s.element_type for s in inputs], n)
    strict_types(ctx, operands, params, "to_apply")
    window = attrs.get("window")
    outs = [window_output(ctx, operands, inputs[i], window, inits[i].element_type) for i in range(n)]
    return one_or_tuple(outs, result)


@rule("select-and-scatter")
def infer_select_and_scatter(operands, attrs, ctx):
    """select-and-scatter(operand, source, init): the operand's shape; source = windowed operand."""
    op = ctx.opcode
    operand, source = expect_operands(ctx, operands, 3, "operand", "source")
    init = operands[2]
    sparams, sresult = computation(ctx, attrs, "select")
    if len(sparams) != 2:
        fail(op, "select", "take 2 parameters", len(sparams), operands)
    if sresult is not None and not compatible(sresult, scalar("pred")):
        fail(op, "the result of select", "be pred[]", txt(sresult), operands)
    elem = scalar(operand.element_type)
    for i in range(2):
        if not compatible(elem, sparams[i], ignore_fp=True):
            fail(op, f"parameter {i} of select", f"be {txt(elem)} (the operand element type)",
                 txt(sparams[i]), operands)
    cparams, cresult = computation(ctx, attrs, "scatter")
    verify_reducer(ctx, operands, cparams, cresult, [init], [source.element_type], 1, name="scatter")
    windowed = window_output(ctx, operands, operand, attrs.get("window"), operand.element_type)
    if not compatible(source, windowed, ignore_fp=True):
        fail(op, "source", f"have the shape of the window-reduced operand ({txt(windowed)})", txt(source), operands)
    return strip(operand)


@rule("map")
def infer_map(operands, attrs, ctx):
    """map(operands...): the to_apply's scalar result type over the operands' shape."""
    op = ctx.opcode
    expect_arrays(ctx, operands)
    arg = operands[0]
    for i, s in enumerate(operands[1:], 1):
        if compatible(s, arg, ignore_element_type=True):
            continue
        if same_element_type_ignoring_fp(s.element_type, arg.element_type):
            if not s.dims:
                continue
            if not arg.dims:
                arg = s
                continue
        fail(op, f"operand {i}", f"have the shape of operand 0 ({txt(operands[0])})", txt(s), operands)
    # `dimensions` is not checked: XLA's parser reads it only to infer a shape the text leaves out,
    # and its verifier (HandleMap) maps over every dimension of the operands whatever it says (XLA's
    # own tests write `dimensions={}` on rank-2 maps); a map always applies to every element
    params, result = computation(ctx, attrs, "to_apply")
    if len(params) != len(operands):
        fail(op, "to_apply", f"take one parameter per operand ({len(operands)})", len(params), operands)
    result = need_result(ctx, operands, "to_apply", result)
    if not is_scalar(result):
        fail(op, "the result of to_apply", "be a scalar", txt(result), operands)
    for i, p in enumerate(params):
        if not is_scalar(p):
            fail(op, f"parameter {i} of to_apply", "be a scalar", txt(p), operands)
        if not same_element_type_ignoring_fp(p.element_type, operands[i].element_type):
            fail(op, f"parameter {i} of to_apply", f"have the element type of operand {i} ({operands[i].element_type})",
                 txt(p), operands)
    strict_types(ctx, operands, params, "to_apply")
    return array(result.element_type, arg.dims, arg.dynamic)


@rule("sort")
def infer_sort(operands, attrs, ctx):
    """sort(operands...): the operand (or the tuple of operands); the comparator returns pred[]."""
    op = ctx.opcode
    expect_arrays(ctx, operands)
    params, result = computation(ctx, attrs, "to_apply")
    if result is not None and not compatible(result, scalar("pred")):
        fail(op, "the result of the comparator", "be pred[]", txt(result), operands)
    if len(params) != 2 * len(operands):
        fail(op, "the comparator", f"take 2 parameters per operand ({2 * len(operands)})", len(params), operands)
    for k, p in enumerate(params):
        want = scalar(operands[k // 2].element_type)
        if not compatible(want, p, ignore_fp=True):
            fail(op, f"parameter {k} of the comparator", f"be {txt(want)}", txt(p), operands)
    for i, s in enumerate(operands[1:], 1):
        if s.dims != operands[0].dims:
            fail(op, f"operand {i}", f"have the dimensions of operand 0 ({txt(operands[0])})", txt(s), operands)
    dims = dims_attr(attrs, "dimensions")
    if len(dims) != 1:
        fail(op, "dimensions", "name exactly one dimension", "{" + ",".join(map(str, dims)) + "}", operands)
    if not 0 <= dims[0] < operands[0].rank:
        fail(op, "the sort dimension", f"be in [0, {operands[0].rank})", dims[0], operands)
    if len(operands) == 1:
        return strip(operands[0])
    return tup(strip(s) for s in operands)


@rule("topk")
def infer_topk(operands, attrs, ctx):
    """topk(operand): (values, s32 indices), the last dimension shrunk to k."""
    op = ctx.opcode
    x, = expect_operands(ctx, operands, 1, "operand")
    k = attrs.get("k")
    if k is None or k < 0:
        fail(op, "k", "be a non-negative integer", k, operands)
    if x.rank < 1:
        fail(op, "operand", "have at least one dimension", txt(x), operands)
    last = x.dims[-1]
    if last != UNBOUNDED and last < k:
        fail(op, "the last dimension", f"be at least k={k}", last, operands)
    dims = list(x.dims[:-1]) + [k]
    dyn = list(x.dynamic[:-1]) + [False]
    return tup([array(x.element_type, dims, dyn), array("s32", dims, dyn)])


def _delete_dim(s: Shape, d: int) -> Shape:
    return array(s.element_type, s.dims[:d] + s.dims[d + 1:], s.dynamic[:d] + s.dynamic[d + 1:])


def _insert_dim(s: Shape, d: int, size: int, dynamic: bool = False) -> Shape:
    return array(s.element_type, s.dims[:d] + (size,) + s.dims[d:], s.dynamic[:d] + (dynamic,) + s.dynamic[d:])


@rule("scan")
def infer_scan(operands, attrs, ctx):
    """scan(inputs..., carries...): to_apply maps (input slices, carries) to (output slices,
    carries); the result stacks the output slices along the scan dimension, then the carries."""
    op = ctx.opcode
    dims = dims_attr(attrs, "dimensions")
    if len(dims) != 1:
        fail(op, "dimensions", "name exactly one dimension", "{" + ",".join(map(str, dims)) + "}", operands)
    scan_dim = dims[0]
    if scan_dim < 0:
        fail(op, "the scan dimension", "be non-negative", scan_dim, operands)
    num_carries = attrs.get("num_carries", 0)
    params, root = computation(ctx, attrs, "to_apply")
    root = need_result(ctx, operands, "to_apply", root)
    roots = list(root.tuple_shapes) if is_tuple(root) else [root]
    if len(operands) < num_carries:
        fail(op, "the operand count", f"be at least num_carries={num_carries}", len(operands), operands)
    if len(roots) < num_carries:
        fail(op, "the result count of to_apply", f"be at least num_carries={num_carries}", len(roots), operands)
    if len(operands) == num_carries and len(roots) == num_carries:
        fail(op, "the scan", "have inputs or outputs besides the carries", "only carries", operands)
    if len(params) != len(operands):
        fail(op, "to_apply", f"take one parameter per operand ({len(operands)})", len(params), operands)
    num_inputs = len(operands) - num_carries
    num_outputs = len(roots) - num_carries
    size, size_dyn = None, False
    for i in range(num_inputs):
        s = expect_array(ctx, operands, i, f"input {i}")
        if scan_dim >= s.rank:
            fail(op, "the scan dimension", f"be in [0, {s.rank}) for input {i}", scan_dim, operands)
        if size is None:
            size, size_dyn = s.dims[scan_dim], s.dynamic[scan_dim]
        elif s.dims[scan_dim] != size:
            fail(op, f"the scan dimension of input {i}", f"have size {size}", s.dims[scan_dim], operands)
    if size is None:
        # no inputs: the scan length only shows in the declared outputs
        d = ctx.declared
        decl = (list(d.tuple_shapes) if is_tuple(d) else [d]) if d is not None else []
        if not decl or not is_array(decl[0]) or scan_dim >= decl[0].rank:
            fail(op, "the scan length", "be known from an input or the declared result", "none", operands)
        size = decl[0].dims[scan_dim]
    for i in range(len(operands)):
        want = _delete_dim(operands[i], scan_dim) if i < num_inputs else operands[i]
        if not compatible(params[i], want):
            fail(op, f"parameter {i} of to_apply", f"be {txt(want)}", txt(params[i]), operands)
    for i in range(num_carries):
        p, r = params[num_inputs + i], roots[num_outputs + i]
        if not compatible(p, r):
            fail(op, f"carry {i} returned by to_apply", f"have the carry parameter's shape {txt(p)}", txt(r), operands)
    results = []
    for i in range(num_outputs):
        r = roots[i]
        if not is_array(r) or scan_dim > r.rank:
            fail(op, f"output {i} of to_apply", f"be an array of rank at least {scan_dim}", txt(r), operands)
        results.append(_insert_dim(r, scan_dim, size, size_dyn))
    results += [strip(r) for r in roots[num_outputs:]]
    d = ctx.declared
    if len(results) == 1 and (not is_tuple(root) or (d is not None and not is_tuple(d))):
        return results[0]
    return tup(results)
