"""Constants, parameters, tuples and the value-preserving ops."""
from __future__ import annotations

import numpy as np

from ...errors import HloEvalError
from ...ir.literal import Literal
from ..kernels import ELEMENT, SAME, TUPLE, Fast, flushed_type
from ..registry import evaluator, prepares
from ..values import TOKEN, np_dtype, random_value as random_value_for


@evaluator("parameter")
def eval_parameter(inst, args, ec):
    """Parameters are bound by the evaluator before the computation runs."""
    raise HloEvalError(f"parameter({inst.parameter_number}) was not bound")


def _literal_value(lit: Literal, inst, ec):
    if lit.elided:
        policy = ec.options.elided_constants
        if policy == "zeros":
            return _fill(lit.shape, lambda s: np.zeros(s.dims, dtype=np_dtype(s)))
        if policy == "random":
            return _fill(lit.shape, lambda s: random_value_for(s, ec.rng))
        raise HloEvalError(
            f"the dump elided this constant's values ({{...}}); refusing to invent them. "
            f"Re-dump with the constants printed, or pass --allow-elided-constants=zeros|random to run anyway")
    if lit.shape.is_tuple:
        return tuple(_literal_value(e, inst, ec) for e in lit.value)
    return lit.value


def _fill(shape, make):
    if shape.is_tuple:
        return tuple(_fill(s, make) for s in shape.tuple_shapes)
    return make(shape)


@evaluator("constant")
def eval_constant(inst, args, ec):
    """The literal's value (elided `{...}` constants only with an explicit fill policy)."""
    v = _literal_value(inst.literal, inst, ec)
    if isinstance(v, np.ndarray) and v.flags.writeable:
        v = v.view()
        v.flags.writeable = False
    return v


@evaluator("tuple")
def eval_tuple(inst, args, ec):
    """A tuple of the operands."""
    return tuple(args)


@evaluator("get-tuple-element")
def eval_get_tuple_element(inst, args, ec):
    """Element `index` of a tuple operand."""
    return args[0][inst.attrs["index"]]


@evaluator("copy", "opt-barrier", "domain")
def eval_identity(inst, args, ec):
    """The operand itself: copy between layouts keeps logical values; opt-barrier and domain are
    identities."""
    return args[0]


@evaluator("after-all")
def eval_after_all(inst, args, ec):
    """A token ordering the operands' side effects."""
    return TOKEN


@evaluator("add-dependency")
def eval_add_dependency(inst, args, ec):
    """The first operand, once the token operand is ready."""
    return args[0]


# ============================================================================ prepare stages
# (registry.prepare: once per instruction at compile time; kernels.py)

@prepares("copy", "opt-barrier")
def _prepare_identity(inst, ops, st):
    """copy and opt-barrier: the operand itself (values are never written in place)."""
    return Fast(kind=SAME, clean=st.clean.get(ops[0], False))


@prepares("get-tuple-element")
def _prepare_gte(inst, ops, st):
    """Element `index` of the operand tuple, clean when that element is."""
    index = int(inst.attrs["index"])
    src = st.clean.get(ops[0])
    clean = src[index] if isinstance(src, tuple) and index < len(src) else not flushed_type(inst.shape)
    return Fast(index, ELEMENT, clean=clean)


@prepares("tuple")
def _prepare_tuple(inst, ops, st):
    """A tuple of the operands, each element's cleanliness kept."""
    return Fast(kind=TUPLE, clean=tuple(st.clean.get(j, False) for j in ops))
