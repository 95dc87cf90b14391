"""Literals: decoding `constant(...)` text into NumPy values, and XLA's text form of values.

XLA prints f32 with the shortest of %.6g / %.9g that round-trips, f64 with
%.15g / %.17g, and the narrow floats (f16, bf16, f8, f6, f4) with a fixed
%.{max_digits10}g of their value.  Arrays of rank >= 2 put spaces inside the
braces and, from rank 4 on, `/*iK=k*/` index comments; pred arrays print 1/0,
a pred scalar true/false; complex values print as (re, im).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from .dtypes import ELEMENT_TYPES
from .shape import Shape


class LiteralError(ValueError):
    pass


@dataclass(frozen=True, eq=False)
class Literal:
    """A constant value.  `value` is an ndarray for arrays, a tuple of Literals for tuples,
    and None when the dump elided it (`{...}`)."""
    shape: Shape
    value: object = None
    elided: bool = False

    def __eq__(self, other):
        if not isinstance(other, Literal):
            return NotImplemented
        if self.shape.without_layout() != other.shape.without_layout() or self.elided != other.elided:
            return False
        if self.elided:
            return True
        if self.shape.is_tuple:
            return self.value == other.value
        a, b = self.value, other.value
        return a.shape == b.shape and a.tobytes() == b.tobytes()

    __hash__ = None  # type: ignore[assignment]

    def __str__(self) -> str:
        return format_literal(self)


# ----------------------------------------------------------------------------- decoding

_TOKEN = re.compile(
    r"/\*.*?\*/|\.\.\.|[{}(),]|[-+]?(?:nan(?:\(0x[0-9a-fA-F]+\))?|inf)|[-+]?[0-9][\w.+\-]*|true|false",
    re.S)


def parse_literal(text: str, shape: Shape) -> Literal:
    """Decode the text inside constant(...) for the declared shape."""
    text = text.strip()
    if shape.is_tuple:
        if text in ("{...}", "{ ... }"):
            return Literal(shape, None, True)
        return _parse_tuple(text, shape)
    if re.fullmatch(r"\{\s*\.\.\.\s*\}", text):
        return Literal(shape, None, True)
    et = ELEMENT_TYPES[shape.element_type]
    if et.numpy is None:
        raise LiteralError(f"{shape.element_type} values cannot be written as literals")
    toks = [t for t in _TOKEN.findall(text) if not t.startswith("/*")]
    if et.kind == "complex":
        values, nest = _complex_values(toks)
    else:
        values = [t for t in toks if t not in "{}(),"]
        nest = _nesting(toks)
    n = shape.num_elements
    if len(values) != n:
        raise LiteralError(
            f"the literal has {len(values)} element{'s' if len(values) != 1 else ''} but the shape "
            f"{shape.to_str(False)} has {n}")
    if shape.rank == 0 and nest > 0 and n == 1 and text.startswith("{"):
        pass  # XLA accepts a braced scalar
    return Literal(shape, convert_values(values, shape), False)


def _nesting(toks) -> int:
    depth = best = 0
    for t in toks:
        if t == "{":
            depth += 1
            best = max(best, depth)
        elif t == "}":
            depth -= 1
    if depth != 0:
        raise LiteralError("unbalanced braces in literal")
    return best


def _complex_values(toks):
    vals = []
    i = 0
    nest = 0
    depth = 0
    while i < len(toks):
        t = toks[i]
        if t == "(":
            if i + 4 < len(toks) + 0 and toks[i + 2] == "," and toks[i + 4] == ")":
                vals.append((toks[i + 1], toks[i + 3]))
                i += 5
                continue
            raise LiteralError("expected a complex value (re, im)")
        if t == "{":
            depth += 1
            nest = max(nest, depth)
        elif t == "}":
            depth -= 1
        elif t not in ",":
            vals.append((t, "0"))
        i += 1
    return vals, nest


def _float(tok: str) -> float:
    t = tok.lower()
    neg = t.startswith("-")
    if t[0] in "+-":
        t = t[1:]
    if t.startswith("nan"):
        return -math.nan if neg else math.nan
    if t == "inf":
        return -math.inf if neg else math.inf
    if t in ("true", "false"):
        return 1.0 if t == "true" else 0.0
    v = float(t)
    return -v if neg else v


_NAN_PAYLOAD = re.compile(r"([-+]?)nan\(0x([0-9a-fA-F]+)\)")


def convert_values(tokens, shape: Shape) -> np.ndarray:
    et = ELEMENT_TYPES[shape.element_type]
    dt = et.numpy
    dims = shape.dims
    try:
        if et.kind == "pred":
            out = []
            for t in tokens:
                if t == "true":
                    out.append(True)
                elif t == "false":
                    out.append(False)
                else:
                    try:
                        out.append(int(t) != 0)     # XLA reads any integer, nonzero as true
                    except ValueError:
                        raise LiteralError(f"'{t}' is not a pred value (true, false or an integer)") from None
            return np.array(out, dtype=np.bool_).reshape(dims)
        if et.kind in ("int", "uint"):
            ints = []
            for t in tokens:
                if t in ("true", "false"):
                    ints.append(1 if t == "true" else 0)
                    continue
                try:
                    ints.append(int(t, 0) if t.lower().startswith(("0x", "-0x")) else int(t))
                except ValueError:
                    raise LiteralError(f"'{t}' is not an integer") from None
            lo, hi = _int_range(et)
            for v in ints:
                if v < lo or v > hi:
                    raise LiteralError(f"{v} is out of range for {et.name} ([{lo}, {hi}])")
            return np.array(ints, dtype=np.int64 if et.kind == "int" else np.uint64).astype(dt).reshape(dims)
        if et.kind == "float":
            vals = [_float(t) for t in tokens]
            arr = np.array(vals, dtype=np.float64)
            with np.errstate(over="ignore", invalid="ignore"):
                res = arr.astype(dt)
            fin = np.isfinite(arr) & ~np.isfinite(res.astype(np.float64))
            if fin.any():
                bad = arr[fin][0]
                raise LiteralError(f"{bad:g} is out of range for {et.name}")
            # NaN payloads and signs
            for k, t in enumerate(tokens):
                m = _NAN_PAYLOAD.fullmatch(t)
                if m or t.lstrip("+").startswith("-nan"):
                    res.reshape(-1)[k] = _nan_with_payload(et, m.group(2) if m else None, t.startswith("-"))
            return res.reshape(dims)
        if et.kind == "complex":
            out = np.empty(len(tokens), dtype=dt)
            out.real = [_float(a) for a, _ in tokens]
            out.imag = [_float(b) for _, b in tokens]
            return out.reshape(dims)
    except LiteralError:
        raise
    except (ValueError, OverflowError) as e:
        raise LiteralError(str(e)) from None
    raise LiteralError(f"{et.name} values cannot be written as literals")


def _int_range(et):
    if et.kind == "int":
        return -(1 << (et.bits - 1)), (1 << (et.bits - 1)) - 1
    return 0, (1 << et.bits) - 1


_UINT_OF_BITS = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


def _float_layout(et):
    import ml_dtypes
    info = ml_dtypes.finfo(et.numpy) if et.name not in ("f16", "f32", "f64") else np.finfo(et.numpy)
    mant = int(info.nmant)
    return mant


def _nan_with_payload(et, payload_hex, negative):
    bits = et.bits if et.bits in (8, 16, 32, 64) else None
    if bits is None:
        v = np.array(np.nan, dtype=et.numpy)
        return v
    mant = _float_layout(et)
    exp_bits = bits - 1 - mant
    u = _UINT_OF_BITS[bits]
    payload = int(payload_hex, 16) if payload_hex is not None else (1 << (mant - 1))
    payload &= (1 << mant) - 1
    if payload == 0:
        payload = 1 << (mant - 1)
    word = ((1 << exp_bits) - 1) << mant | payload
    if negative:
        word |= 1 << (bits - 1)
    return np.array(word, dtype=u).view(et.numpy)


def _split_top(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for k, ch in enumerate(text):
        if ch in "({[":
            depth += 1
        elif ch in ")}]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:k])
            start = k + 1
    if text[start:].strip():
        parts.append(text[start:])
    return [p.strip() for p in parts]


def _parse_tuple(text: str, shape: Shape) -> Literal:
    if not (text.startswith("(") and text.endswith(")")):
        raise LiteralError(f"a tuple literal is written ( ... ) for shape {shape.to_str(False)}")
    parts = _split_top(text[1:-1])
    if len(parts) != len(shape.tuple_shapes):
        raise LiteralError(f"the tuple literal has {len(parts)} elements but the shape "
                           f"{shape.to_str(False)} has {len(shape.tuple_shapes)}")
    return Literal(shape, tuple(parse_literal(p, s) for p, s in zip(parts, shape.tuple_shapes)))


# ----------------------------------------------------------------------------- printing

_MAX_DIGITS10: dict[str, int] = {}


def _max_digits10(et) -> int:
    d = _MAX_DIGITS10.get(et.name)
    if d is None:
        mant = _float_layout(et)
        d = math.ceil(1 + (mant + 1) * math.log10(2))
        _MAX_DIGITS10[et.name] = d
    return d


def _nan_text(v, et) -> str:
    bits = et.bits
    sign = ""
    if bits in (8, 16, 32, 64):
        word = int(np.array(v, dtype=et.numpy).view(_UINT_OF_BITS[bits]))
        mant = _float_layout(et)
        payload = word & ((1 << mant) - 1)
        if word >> (bits - 1):
            sign = "-"
        if payload != (1 << (mant - 1)):
            return f"{sign}nan(0x{payload:x})"
    return sign + "nan"


def format_float(v, et) -> str:
    f = float(v)
    if math.isnan(f):
        return _nan_text(v, et)
    if math.isinf(f):
        return "-inf" if f < 0 else "inf"
    name = et.name
    if name == "f32":
        s = "%.6g" % f
        if np.float32(float(s)) != np.float32(f):
            s = "%.9g" % f
        return s
    if name == "f64":
        s = "%.15g" % f
        if float(s) != f:
            s = "%.17g" % f
        return s
    return "%.*g" % (_max_digits10(et), f)


def format_scalar(v, et, in_array: bool = False) -> str:
    k = et.kind
    if k == "pred":
        b = bool(v)
        return ("1" if b else "0") if in_array else ("true" if b else "false")
    if k in ("int", "uint"):
        return str(int(v))
    if k == "float":
        return format_float(v, et)
    if k == "complex":
        comp = ELEMENT_TYPES["f32" if et.name == "c64" else "f64"]
        return f"({format_float(v.real, comp)}, {format_float(v.imag, comp)})"
    return str(v)


def format_literal(lit: Literal, elide_over: int | None = None) -> str:
    shape = lit.shape
    if lit.elided:
        return "{...}"
    if shape.is_tuple:
        if elide_over is not None:
            return "{...}"
        return "( " + ", ".join(format_literal(e, elide_over) for e in lit.value) + " )"
    if elide_over is not None and shape.num_elements > elide_over:
        return "{...}"
    et = ELEMENT_TYPES[shape.element_type]
    arr = lit.value
    if shape.rank == 0:
        return format_scalar(arr.reshape(()).item() if et.kind != "float" else arr.reshape(()), et)
    flat = [format_scalar(x, et, True) for x in (arr.reshape(-1) if et.kind != "float" else arr.reshape(-1))]
    rank = shape.rank
    dims = shape.dims
    if rank == 1:
        return "{" + ", ".join(flat) + "}"
    # recursive nesting over dims
    pos = [0]

    def level(d: int, index: int) -> str:
        n = dims[d]
        if d == rank - 1:
            items = flat[pos[0]:pos[0] + n]
            pos[0] += n
            return "{ " + ", ".join(items) + " }" if items else "{}"
        comment = f"/*i{d - 1}={index}*/ " if (rank > 3 and 1 <= d <= rank - 2) else ""
        kids = [level(d + 1, k) for k in range(n)]
        return "{ " + comment + ", ".join(kids) + " }"
    return level(0, 0)
