"""Shape rules of the control family (ops that call computations or run asynchronously) and of
the asynchronous copies.

call, while, conditional, fusion, custom-call, async-start, async-update, async-done (also
reached through the ``<op>-start`` / ``<op>-update`` / ``<op>-done`` sugar), copy-start, copy-done.

The async shape convention: async-start and async-update produce
``((operand shapes...), wrapped result shape, context shapes...)``; async-done produces the
wrapped result.  The context shapes are implementation-defined (XLA does not check them), so they
are taken from the declared shape.

Sources: XLA's ``ShapeInference::Infer{Call,While,Conditional}Shape`` and
``ShapeVerifier::Handle{Call,While,Conditional,Fusion,CustomCall,AsyncStart,AsyncUpdate,AsyncDone,
CopyStart,CopyDone}`` (xla/service/shape_inference.cc, xla/service/hlo_verifier.cc).
"""
from __future__ import annotations

from ..registry import RuleContext, ShapeRuleError, fail, infer_shape, rule
from .reduction import (array, compatible, computation, declared_shape, expect_count, index_text, is_array,
                        is_scalar, is_tuple, need_result, scalar, strip, subshape, tup, txt)


def _check_aliasing(ctx, operands, aliasing, output_shape, operand_shapes, *, what_operand="operand",
                    allow_empty_output=True, ignore_buffer=False, shapes=True):
    """output_to_operand_aliasing entries must name valid indices of shapes that agree (with
    `ignore_buffer`, a buffer b(s) agrees with s, as XLA lets async-start and the Pin/Unpin
    custom calls alias a buffer with the array it holds).  `shapes` False: XLA checks the first
    entry's indices and nothing more (a custom call with the frontend attribute
    xla_skip_custom_call_alias_shape_check)."""
    if aliasing is None:
        return
    op = ctx.opcode
    for e in aliasing.entries:
        if not 0 <= e.operand_index < len(operand_shapes):
            fail(op, "the output_to_operand_aliasing operand number",
                 f"be in [0, {len(operand_shapes)})", e.operand_index, operands)
        src = subshape(operand_shapes[e.operand_index], e.operand_shape_index)
        if src is None:
            fail(op, "the output_to_operand_aliasing operand index",
                 f"be a valid index of {what_operand} {e.operand_index} ({txt(operand_shapes[e.operand_index])})",
                 index_text(e.operand_shape_index), operands)
        if not allow_empty_output and not e.output_index:
            fail(op, "the output_to_operand_aliasing output index", "not be empty", "{}", operands)
        dst = subshape(output_shape, e.output_index)
        if dst is None:
            fail(op, "the output_to_operand_aliasing output index",
                 f"be a valid index of the result ({txt(output_shape)})", index_text(e.output_index), operands)
        if not shapes:
            return
        if not compatible(src, dst, ignore_buffer=ignore_buffer):
            fail(op, f"the aliased output {index_text(e.output_index)}",
                 f"have the shape of {what_operand} {e.operand_index} at {index_text(e.operand_shape_index)} "
                 f"({txt(src)})", txt(dst), operands)


# ---------------------------------------------------------------------------- call / while / conditional

@rule("call")
def infer_call(operands, attrs, ctx):
    """call(operands...): the result of to_apply, whose parameters match the operands."""
    op = ctx.opcode
    params, result = computation(ctx, attrs, "to_apply")
    if len(params) != len(operands):
        fail(op, "to_apply", f"take one parameter per operand ({len(operands)})", len(params), operands)
    for i, (o, p) in enumerate(zip(operands, params)):
        if not compatible(o, p):
            fail(op, f"operand {i}", f"match parameter {i} of to_apply ({txt(p)})", txt(o), operands)
    if attrs.get("is_composite"):
        fa = attrs.get("frontend_attributes")
        items = dict(fa.items) if fa is not None else {}
        if not items.get("composite.name"):
            fail(op, "a composite call", "have a non-empty frontend attribute composite.name",
                 "none", operands)
        if "composite.attributes" in items and not items["composite.attributes"]:
            fail(op, "the frontend attribute composite.attributes", "be non-empty or absent", '""', operands)
        if "composite.version" in items:
            v = items["composite.version"]
            if not v.isdigit():
                fail(op, "the frontend attribute composite.version", "be a non-negative integer",
                     repr(v), operands)
    return strip(need_result(ctx, operands, "to_apply", result))


@rule("while")
def infer_while(operands, attrs, ctx):
    """while(init): condition takes the state and returns pred[]; body takes and returns it."""
    op = ctx.opcode
    expect_count(ctx, operands, 1, 1)
    init = operands[0]
    cparams, cresult = computation(ctx, attrs, "condition")
    bparams, bresult = computation(ctx, attrs, "body")
    if len(cparams) != 1:
        fail(op, "condition", "take 1 parameter", len(cparams), operands)
    if len(bparams) != 1:
        fail(op, "body", "take 1 parameter", len(bparams), operands)
    cresult = need_result(ctx, operands, "condition", cresult)
    bresult = need_result(ctx, operands, "body", bresult)
    if not compatible(cresult, scalar("pred")):
        fail(op, "the result of condition", "be pred[]", txt(cresult), operands)
    for what, s in (("the parameter of body", bparams[0]), ("the parameter of condition", cparams[0]),
                    ("the result of body", bresult)):
        if not compatible(s, init):
            fail(op, what, f"have the shape of the loop state ({txt(init)})", txt(s), operands)
    return strip(bresult)


@rule("conditional")
def infer_conditional(operands, attrs, ctx):
    """conditional(selector, branch operands...): branch i takes operand i+1; all branches return
    the same shape.  pred[] selects true/false_computation, s32[] indexes branch_computations."""
    op = ctx.opcode
    if not operands:
        fail(op, "the operand count", "be at least 2", 0, operands)
    sel = operands[0]
    if not is_scalar(sel):
        fail(op, "the selector (operand 0)", "be a pred[] or s32[] scalar", txt(sel), operands)
    if attrs.get("branch_computations") is not None:
        names = [c.name for c in attrs["branch_computations"]]
    else:
        names = [attrs[k].name for k in ("true_computation", "false_computation") if attrs.get(k) is not None]
    if sel.element_type == "pred":
        if len(names) != 2:
            fail(op, "a pred[] selector", "come with 2 branches (true_computation, false_computation)",
                 len(names), operands)
    elif sel.element_type == "s32":
        if not names:
            fail(op, "an s32[] selector", "come with at least one branch computation", 0, operands)
    else:
        fail(op, "the selector (operand 0)", "be a pred[] or s32[] scalar", txt(sel), operands)
    if len(operands) != len(names) + 1:
        fail(op, "the operand count", f"be 1 + the number of branches ({len(names) + 1})",
             len(operands), operands)
    results = []
    for j, name in enumerate(names):
        params, result = ctx.computation(name)
        if len(params) != 1:
            fail(op, f"branch computation {j} ({name})", "take 1 parameter", len(params), operands)
        if not compatible(params[0], operands[j + 1]):
            fail(op, f"branch operand {j}", f"match the parameter of branch {j} ({txt(params[0])})",
                 txt(operands[j + 1]), operands)
        results.append(need_result(ctx, operands, f"branch computation {j}", result))
    for j, r in enumerate(results[1:], 1):
        if not compatible(results[0], r):
            fail(op, f"the result of branch {j}", f"have the shape of branch 0's ({txt(results[0])})",
                 txt(r), operands)
    return _or_dynamic(results)


def _or_dynamic(shapes):
    """The first shape, dynamic wherever any of the (compatible) shapes is dynamic."""
    first = shapes[0]
    if is_tuple(first):
        return tup(_or_dynamic([s.tuple_shapes[i] for s in shapes]) for i in range(len(first.tuple_shapes)))
    if not is_array(first):
        return strip(first)
    dyn = [any(s.dynamic[i] for s in shapes) for i in range(first.rank)]
    return array(first.element_type, first.dims, dyn)


# ---------------------------------------------------------------------------- fusion / custom-call

@rule("fusion")
def infer_fusion(operands, attrs, ctx):
    """fusion(operands...): the fused computation's root; fused parameter i matches operand i."""
    op = ctx.opcode
    params, result = computation(ctx, attrs, "calls")
    if len(params) > len(operands):
        fail(op, "the fused parameter count", f"be at most the operand count ({len(operands)})",
             len(params), operands)
    for i, p in enumerate(params):
        if not compatible(p, operands[i]):
            fail(op, f"fused parameter {i}", f"match operand {i} ({txt(operands[i])})", txt(p), operands)
    result = strip(need_result(ctx, operands, "the fused computation", result))
    _check_aliasing(ctx, operands, attrs.get("output_to_operand_aliasing"), result, operands)
    return result


@rule("custom-call")
def infer_custom_call(operands, attrs, ctx):
    """custom-call(operands...): the declared shape (the target decides it); what XLA checks is the
    layout constraints' count and shapes and the aliasing indices."""
    op = ctx.opcode
    result = strip(declared_shape(ctx, operands))
    olc = attrs.get("operand_layout_constraints")
    if olc is not None:
        shapes = olc.shapes
        if len(shapes) != len(operands):
            fail(op, "operand_layout_constraints", f"have one shape per operand ({len(operands)})",
                 len(shapes), operands)
        for i, (c, o) in enumerate(zip(shapes, operands)):
            if not compatible(c, o):
                fail(op, f"operand_layout_constraints entry {i}", f"match operand {i} ({txt(o)})", txt(c), operands)
    aliasing = attrs.get("output_to_operand_aliasing")
    fa = attrs.get("frontend_attributes")
    skip = fa is not None and "xla_skip_custom_call_alias_shape_check" in dict(fa.items)
    _check_aliasing(ctx, operands, aliasing, result, operands, shapes=not skip,
                    ignore_buffer=attrs.get("custom_call_target") in ("Pin", "Unpin"))
    if attrs.get("custom_call_target") == "GetRngSeed":
        if operands:
            fail(op, "a GetRngSeed custom-call", "have no operands", len(operands), operands)
        if not compatible(result, scalar("u64")):
            fail(op, "the result of a GetRngSeed custom-call", "be u64[]", txt(result), operands)
    return result


# ---------------------------------------------------------------------------- async

_ASYNC_KEYS = ("async_execution_thread", "calls")


def _wrapped_opcode(ctx) -> str | None:
    """'negate' for the sugar 'negate-start'; None for the generic async-* spellings."""
    for suffix in ("-start", "-update", "-done"):
        if ctx.opcode.endswith(suffix) and not ctx.opcode.startswith("async-"):
            return ctx.opcode[: -len(suffix)]
    return None


def _is_async_shape(s) -> bool:
    return s is not None and is_tuple(s) and len(s.tuple_shapes) >= 2 and is_tuple(s.tuple_shapes[0])


def _expect_async_operand(ctx, operands):
    op = ctx.opcode
    expect_count(ctx, operands, 1, None)
    s = operands[0]
    if not _is_async_shape(s):
        fail(op, "operand 0", "be an async state ((operand shapes...), result shape, context...)", txt(s), operands)
    return s


def _declared_context(ctx, operands, fallback=()):
    d = ctx.declared
    if d is None:
        return [strip(s) for s in fallback]
    if not _is_async_shape(d):
        fail(ctx.opcode, "the result shape", "be ((operand shapes...), result shape, context...)",
             txt(d), operands)
    return [strip(s) for s in d.tuple_shapes[2:]]


def _check_bound(ctx, operands, bound, params):
    op = ctx.opcode
    if len(bound) > len(params):
        fail(op, "the bound operands", f"be at most the async computation's parameters ({len(params)})",
             len(bound), operands)
    for i, (b, p) in enumerate(zip(bound, params)):
        if not compatible(b, p):
            fail(op, f"bound operand {i}", f"match parameter {i} of the async computation ({txt(p)})",
                 txt(b), operands)


def _wrapped_result(ctx, operands, attrs, wrapped: str):
    """The shape of the single instruction a sugar <op>-start wraps, from <op>'s own rule."""
    d = ctx.declared
    declared = d.tuple_shapes[1] if _is_async_shape(d) else None
    inner_attrs = {k: v for k, v in attrs.items() if k not in _ASYNC_KEYS}
    inner = RuleContext(wrapped, declared, ctx.computations)
    for name in ("replica_count", "num_partitions", "module_attrs"):
        if hasattr(ctx, name):
            setattr(inner, name, getattr(ctx, name))
    try:
        return strip(infer_shape(wrapped, operands, inner_attrs, inner))
    except ShapeRuleError as e:
        if e.code == "S001" and declared is not None:
            return strip(declared)     # no rule for the wrapped opcode yet: trust the declaration
        raise                          # the wrapped op's own message, led by its opcode


@rule("async-start")
def infer_async_start(operands, attrs, ctx):
    """async-start(operands...): ((operands...), wrapped result, context...)."""
    wrapped = _wrapped_opcode(ctx)
    if attrs.get("calls") is not None:
        params, result = computation(ctx, attrs, "calls")
        _check_bound(ctx, operands, operands, params)
        result = strip(need_result(ctx, operands, "the async computation", result))
    elif wrapped is not None:
        params = list(operands)
        result = _wrapped_result(ctx, operands, attrs, wrapped)
    else:
        fail(ctx.opcode, "calls", "name the async computation", "nothing", operands)
    context = _declared_context(ctx, operands)
    shape = tup([tup(strip(o) for o in operands), result, *context])
    if attrs.get("calls") is not None:
        _check_aliasing(ctx, operands, attrs.get("output_to_operand_aliasing"), shape, params,
                        what_operand="async computation parameter", allow_empty_output=False,
                        ignore_buffer=True)
    return shape


@rule("async-update")
def infer_async_update(operands, attrs, ctx):
    """async-update(state, new operands...): the state, with the new operands bound."""
    prev = _expect_async_operand(ctx, operands)
    bound = list(prev.tuple_shapes[0].tuple_shapes) + list(operands[1:])
    if attrs.get("calls") is not None:
        params, result = computation(ctx, attrs, "calls")
        _check_bound(ctx, operands, bound, params)
    context = _declared_context(ctx, operands, prev.tuple_shapes[2:])
    return tup([tup(strip(b) for b in bound), strip(prev.tuple_shapes[1]), *context])


@rule("async-done")
def infer_async_done(operands, attrs, ctx):
    """async-done(state): the wrapped computation's result."""
    op = ctx.opcode
    expect_count(ctx, operands, 1, 1)
    prev = _expect_async_operand(ctx, operands)
    if attrs.get("calls") is not None:
        params, result = computation(ctx, attrs, "calls")
        bound = prev.tuple_shapes[0].tuple_shapes
        if len(bound) != len(params):
            fail(op, "the bound operands", f"be all {len(params)} parameters of the async computation",
                 len(bound), operands)
        _check_bound(ctx, operands, bound, params)
        return strip(need_result(ctx, operands, "the async computation", result))
    return strip(prev.tuple_shapes[1])


# ---------------------------------------------------------------------------- copy-start / copy-done

@rule("copy-start")
def infer_copy_start(operands, attrs, ctx):
    """copy-start(operand): (destination, source, u32[] context), both buffers of the operand's shape."""
    expect_count(ctx, operands, 1, 1)
    x = strip(operands[0])
    return tup([x, x, scalar("u32")])


@rule("copy-done")
def infer_copy_done(operands, attrs, ctx):
    """copy-done(copy-start): the destination buffer."""
    op = ctx.opcode
    expect_count(ctx, operands, 1, 1)
    s = operands[0]
    if not is_tuple(s) or len(s.tuple_shapes) < 2:
        fail(op, "operand 0", "be a copy-start state (destination, source, u32[])", txt(s), operands)
    dest, src = s.tuple_shapes[0], s.tuple_shapes[1]
    if not compatible(dest, src):
        fail(op, "the destination and source buffers", "have the same shape", f"{txt(dest)} and {txt(src)}",
             operands)
    return strip(dest)

