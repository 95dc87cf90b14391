"""Literals: decoding `constant(...)` text into NumPy values, and XLA's text form of values.

XLA prints f32 with the shortest of %.6g / %.9g that round-trips, f64 with
%.15g / %.17g, and the narrow floats (f16, bf16, f8, f6, f4) with a fixed
%.{max_digits10}g of their value.  Arrays of rank >= 2 put spaces inside the
braces and, from rank 4 on, `/*iK=k*/` index comments; pred arrays print 1/0,
a pred scalar true/false; complex values print as (re, im).

A small constant of a plain type whose text literal.py's fast path reads (`deferred_literal`: plain
numbers that fit the type) is a DeferredLiteral: its text is checked when it is read, and decoded
into NumPy when its value is first used, so that reading and checking a module never imports NumPy
(a tenth of a second of a cold `hlo check`).
"""
from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass

from ..lazy import LazyModule
from .dtypes import ELEMENT_TYPES
from .shape import NUMPY_MAX_RANK, Shape

np = LazyModule("numpy")    # (imported on the first value decoded: reading and checking a module need none)


class LiteralError(ValueError):
    """A literal that does not fit its shape; `offset` is the 0-based index of the token at fault."""

    def __init__(self, message: str, offset: int = 0):
        super().__init__(message)
        self.offset = offset


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


class DeferredLiteral(Literal):
    """A Literal whose text is known to decode (deferred_literal checked it); its value is
    decoded by literal.parse_literal on first read, exactly as it would have been at once."""

    def __init__(self, shape: Shape, text: str):
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "elided", False)
        object.__setattr__(self, "_text", str.__str__(text))     # (a plain str, not a lexer's token)

    @property
    def value(self):
        got = self.__dict__.get("_value")
        if got is None:
            got = parse_literal(self._text, self.shape).value
            object.__setattr__(self, "_value", got)
        return got

    def __reduce__(self):       # (pickled, and copied, as the Literal it stands for)
        return Literal, (self.shape, self.value, False)

    def __repr__(self) -> str:
        return f"DeferredLiteral(shape={self.shape!r}, text={self._text!r})"


# (the numbers' spellings are the fast decoder's: _FAST_TOKENS, _FAST_INT, _FAST_FLOAT, _FAST_PRED)
_NON_FINITE = frozenset(("inf", "-inf", "nan", "-nan"))      # (every float type here has them)
def _int_range(et):
    if et.kind == "int":
        return -(1 << (et.bits - 1)), (1 << (et.bits - 1)) - 1
    return 0, (1 << et.bits) - 1


# the integer types a deferred constant may have, with their ranges (the narrow ones, s4 and below, are
# decoded at once)
_INT_RANGE = {n: _int_range(ELEMENT_TYPES[n]) for n in ("s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64")}
# the largest finite value of each type: a double at most that large rounds to a finite value of the
# type (rounding never passes a representable value); those beyond it are decoded at once (by NumPy
# and ml_dtypes' own rounding), not judged here
_FLOAT_BOUND = {"f16": 65504.0, "bf16": (2 - 2.0 ** -7) * 2.0 ** 127, "f32": (2 - 2.0 ** -23) * 2.0 ** 127,
                "f64": sys.float_info.max}
DEFERRED_MAX_CHARS = 512        # longer texts are decoded at once (an array's values: NumPy's work)


def deferred_literal(text: str, shape: Shape) -> DeferredLiteral | None:
    """A DeferredLiteral for `text` as the literal of the array `shape` when the text is what
    literal.py's fast path accepts (a fully braced array, or a scalar, of plain numbers that fit a
    plain integer, float or pred type; inf and nan for a float type), else None (the caller
    decodes it now, and reports its problems)."""
    if shape.is_tuple or len(text) > DEFERRED_MAX_CHARS or "/" in text:
        return None
    et = shape.element_type
    rng = _INT_RANGE.get(et)
    bound = _FLOAT_BOUND.get(et)
    if rng is None and bound is None and et != "pred":
        return None
    vals = _fast_values(_FAST_TOKENS.findall(text), shape.dims)
    if vals is None:
        return None
    if rng is not None:
        lo, hi = rng
        for v in vals:
            if _FAST_INT.fullmatch(v) is None or not lo <= int(v) <= hi:
                return None
    elif bound is not None:
        for v in vals:
            if _FAST_FLOAT.fullmatch(v) is None:
                if v not in _NON_FINITE:
                    return None
            elif not abs(float(v)) <= bound or (len(v) > 19 and not _fits_64(v)):
                return None
    elif not _FAST_PRED.keys() >= set(vals):
        return None
    return DeferredLiteral(shape, text)




# ----------------------------------------------------------------------------- decoding
#
# `parse_literal` follows XLA's ParseLiteral / ParseDenseLiteral (hlo_parser.cc) token by token:
# - numbers are spelled as XLA's lexer reads them: -?\d+, decimals (1., -.5, 1e-05, 2.5E+3),
#   inf, -inf, nan, -nan, nan(0x<payload>); true/false only for pred;
# - elements are separated by commas or whitespace (extra commas are ignored);
# - braces must nest exactly as deep as the rank; `{...}` elides the values (nest level 1 only);
# - a tuple literal is ( element, ... ) with one literal per tuple element;
# - values must fit the element type (floats are rounded first, like XLA);
# - NaN payloads only for the IEEE-like types and within their mantissa.
# Like XLA it reports the first problem it records: some (a value outside the braces a shape asks
# for, one element too many) are only recorded, and matter when a later check fails.
# Errors carry `offset`: the 0-based index of the offending token in the text.

class _Stop(Exception):
    pass


_LIT_TOKEN = re.compile(
    r"(\s+|/\*.*?\*/|//[^\n]*)"                                # 1 skipped
    r"|(\.\.\.)"                                               # 2 elision
    r"|([{}(),])"                                              # 3 punctuation
    r"|(-?nan\(0x[0-9A-Za-z]*\)"                               # 4 a word: nan with payload,
    r"|[-+]?[A-Za-z0-9_.]+(?:(?<=[eE])[-+][A-Za-z0-9_.]+)?)"   #   or a number / name
    r"|(.)", re.S)                                             # 5 anything else
_INT = re.compile(r"-?\d+")
_DECIMAL = re.compile(r"-?(?:(?:\d+|\d+\.\d*|\d*\.\d+)[eE][+-]?\d+|\d+\.\d*|\d*\.\d+)")
_NAN = re.compile(r"(-?)nan(?:\(0x([0-9a-fA-F]+)\))?")
_QUIET_DOUBLE_PAYLOAD = 1 << 51
_MAX_DOUBLE_PAYLOAD = (1 << 52) - 1
# Types with signaling NaNs have NaN payloads (XLA: NanPayloadBits = mantissa bits).
_PAYLOAD_NAN_TYPES = frozenset({"f16", "bf16", "f32", "f64", "f8e5m2", "f8e4m3", "f8e3m4"})
_UINT_OF_BITS = {8: "uint8", 16: "uint16", 32: "uint32", 64: "uint64"}     # (NumPy's names)


def _as_int64(v: int) -> int:
    """The int64 value of XLA's lexer for an integer in [-2**63, 2**64)."""
    return v - (1 << 64) if v >= (1 << 63) else v


class _Num:
    """A scalar token read as a number: kind is int | float | bool; nan_payload None or an int."""
    __slots__ = ("kind", "value", "negative_nan", "nan_payload", "text")

    def __init__(self, kind, value, negative_nan=False, nan_payload=None, text=""):
        self.kind, self.value, self.negative_nan, self.nan_payload = kind, value, negative_nan, nan_payload
        self.text = text

    def as_float(self) -> float:
        # an integer spelling read for a float type: float('-0') keeps the sign of zero (XLA reads
        # the integer 0, so its own printed -0 comes back as 0)
        return float(self.text) if self.kind == "int" else float(self.value)


class _Tokens:
    """The literal's tokens as (text, offset, group) on demand, stored as three compact arrays
    (17 bytes a token instead of a tuple of objects: a large literal that needs this exact
    reader, to locate an error, stays within a few times its size)."""

    def __init__(self, text: str):
        from array import array
        self.text = text
        self.start, self.end, self.group = array("q"), array("q"), array("b")
        for m in _LIT_TOKEN.finditer(text):
            g = m.lastindex
            if g == 1:
                continue
            self.start.append(m.start(g))
            self.end.append(m.end(g))
            self.group.append(g)

    def __len__(self):
        return len(self.group)

    def __getitem__(self, i):
        s = self.start[i]
        return self.text[s:self.end[i]], s, self.group[i]


def _lex_literal(text: str):
    return _Tokens(text)


class _LiteralReader:
    def __init__(self, text: str):
        self.text = text
        self.toks = _lex_literal(text)
        self.i = 0
        self.first_error = None       # (message, offset) of the first problem recorded

    # -- errors: `note` records (XLA's TokenError whose result is ignored), `fail` stops
    def _at(self, i=None):
        i = self.i if i is None else i
        return self.toks[i][1] if i < len(self.toks) else len(self.text.rstrip())

    def note(self, message, i=None):
        if self.first_error is None:
            self.first_error = (message, self._at(i))

    def fail(self, message, i=None):
        self.note(message, i)
        raise _Stop

    def kind(self, k=0):
        j = self.i + k
        return self.toks[j][0] if j < len(self.toks) and self.toks[j][2] in (2, 3) else (
            None if j >= len(self.toks) else "word" if self.toks[j][2] == 4 else "other")

    def seen(self, i=None):
        i = self.i if i is None else i
        if i >= len(self.toks):
            return "the end of the literal"
        t = self.toks[i][0]
        return f"'{t if len(t) <= 30 else t[:27] + '...'}'"

    # -- scalars
    def number(self, i=None) -> _Num | None:
        """The word at i read the way XLA's lexer does, or None if it is not a number."""
        i = self.i if i is None else i
        w = self.toks[i][0]
        if w == "true" or w == "false":
            return _Num("bool", w == "true")
        if w == "inf" or w == "-inf":
            return _Num("float", math.inf if w == "inf" else -math.inf)
        m = _NAN.fullmatch(w)
        if m:
            payload = None
            if m.group(2) is not None:
                payload = int(m.group(2), 16)
                if payload <= 0 or payload > _MAX_DOUBLE_PAYLOAD:
                    self.fail(f"NaN payload 0x{m.group(2)} is out of range: a payload is between 0x1 and "
                              f"0x{_MAX_DOUBLE_PAYLOAD:x}", i)
            return _Num("float", math.nan, m.group(1) == "-", payload)
        if _INT.fullmatch(w):
            v = int(w)
            if v > (1 << 64) - 1 or v < -(1 << 63):
                self.fail(f"integer literal {w} is too large: it does not fit in 64 bits", i)
            return _Num("int", v, text=w)
        if w[0] != "." and _DECIMAL.fullmatch(w):
            v = float(w)
            if math.isinf(v):
                self.fail(f"constant {w} is out of range for double (+/-{sys.float_info.max:g}) and cannot be "
                          "read", i)
            return _Num("float", v)
        return None

    def unexpected(self, i=None):
        i = self.i if i is None else i
        w = self.toks[i][0] if i < len(self.toks) else ""
        hint = ""
        if re.fullmatch(r"[-+]?0[xX][0-9a-fA-F]+", w):
            hint = " (hexadecimal numbers are not allowed in literals)"
        elif w.startswith("+"):
            hint = " (numbers are written without a '+' sign)"
        elif w.lower().lstrip("-") in ("nan", "inf", "infinity") or w.lower().lstrip("-").startswith("nan("):
            hint = " (write nan, -nan, nan(0x...), inf or -inf, in lower case)"
        elif w[:1] == ".":
            hint = " (write a digit before the decimal point)"
        self.fail(f"unexpected token {self.seen(i)} in literal{hint}", i)

    # -- literals
    def literal(self, shape: Shape):
        if shape.is_tuple:
            return self.tuple_literal(shape)
        return self.dense(shape)

    def _tuple_bracket(self, bracket: str, other: str, when_other, otherwise) -> None:
        """Take the tuple's `bracket`; anything else fails with when_other() when it is `other`, else
        with otherwise() (the messages are made only when needed)."""
        if self.kind() != bracket:
            self.fail(when_other() if self.kind() == other else otherwise())
        self.i += 1

    def tuple_literal(self, shape: Shape):
        n = len(shape.tuple_shapes)
        self._tuple_bracket("(", "{", lambda: (
            f"expects '(' in front of tuple elements, got {self.seen()}: a literal of the tuple "
            f"shape {shape.to_str(False)} is written ( element, ... ), not elided"), lambda: (
            f"expects '(' in front of tuple elements, got {self.seen()} (the shape "
            f"{shape.to_str(False)} is a tuple)"))
        elems = []
        if self.kind() == ")" and n:
            self.fail(f"expects {n} tuple element{'s' if n != 1 else ''}, but sees 0")
        if n:
            for k, sub in enumerate(shape.tuple_shapes):
                if k > 0:
                    if self.kind() == ",":
                        self.i += 1
                    elif self.kind() == ")":
                        self.fail(f"expects {n} tuple elements, but sees {k}")
                    else:
                        self.note(f"expects ',' to separate tuple elements, got {self.seen()}")
                elems.append(self.literal(sub))
        self._tuple_bracket(")", ",", lambda: (
            f"expects ')' at the end of the tuple: the shape {shape.to_str(False)} has {n} "
            f"element{'s' if n != 1 else ''}, but the literal has more"), lambda: (
            f"expects ')' at the end of the tuple with {n} element{'s' if n != 1 else ''}, "
            f"got {self.seen()}"))
        return Literal(shape, tuple(elems))

    def dense(self, shape: Shape):
        et = ELEMENT_TYPES[shape.element_type]
        if et.numpy is None:
            self.fail(f"{shape.element_type}-shaped constants are not allowed: {shape.element_type} values "
                      "cannot be written as literals")
        dims = shape.dims
        rank = len(dims)
        n = 1
        for d in dims:
            n *= d
        kind = et.kind
        seen = [0] * rank
        nest = 0
        lin = 0
        elided = False
        vals: list = []        # parsed values, in linear order
        where: list = []       # token index of each value
        toks = self.toks

        def add_one_elem_seen():
            if rank > 0:
                if nest != rank:
                    self.note(f"expects nested array in rank {rank}, but sees {nest}" + (
                        f": write the values of {shape.to_str(False)} as {_example(dims)}" if nest < rank else ""))
                    return False
                seen[rank - 1] += 1
                if seen[rank - 1] > dims[rank - 1]:
                    self.note(f"expects {dims[rank - 1]} element{'s' if dims[rank - 1] != 1 else ''} on the "
                              f"minor-most dimension, but sees more")
                    return False
            return True

        def index_str(d):
            return "[" + ",".join(str(s - 1) for s in seen[:d]) + "]"

        while True:
            if self.i >= len(toks):
                self.fail("unexpected end of the literal" + (f": expects '}}' to close nest level {nest}"
                                                             if nest else ""))
            t, _, group = toks[self.i]
            if group == 3 and t == "{":
                nest += 1
                if nest > rank:
                    self.fail(f"expects nested array in rank {rank}, but sees larger (too many '{{')")
                if nest > 1:
                    seen[nest - 2] += 1
                    if seen[nest - 2] > dims[nest - 2]:
                        self.fail(f"expects {dims[nest - 2]} elements in dimension {nest - 2}"
                                  f"{' at index ' + index_str(nest - 2) if nest > 2 else ''}, but sees more")
                self.i += 1
            elif group == 3 and t == "}":
                if nest == 0:
                    self.fail("unexpected '}' in literal")
                nest -= 1
                if seen[nest] != dims[nest]:
                    self.fail(f"expects {dims[nest]} element{'s' if dims[nest] != 1 else ''} in dimension {nest}"
                              f"{' at index ' + index_str(nest) if nest else ''}, but sees {seen[nest]}")
                seen[nest] = 0
                self.i += 1
            elif group == 3 and t == ",":
                self.i += 1
            elif group == 3 and t == "(":
                if kind != "complex":
                    self.fail(f"unexpected '(' in literal: parens are only valid for complex literals, and "
                              f"{shape.element_type} is not complex")
                start = self.i
                if not add_one_elem_seen():
                    raise _Stop
                vals.append(self.complex_value(et))
                where.append(start)
                if lin >= n:
                    self.fail(f"too many elements: the shape {shape.to_str(False)} has {n}", start)
                lin += 1
            elif group == 2:
                if nest != 1:
                    self.fail(f"expects '...' at nest level 1, but sees it at nest level {nest}" + (
                        " (a scalar cannot be elided)" if rank == 0 else ""))
                seen[0] = dims[0]
                elided = True
                self.i += 1
            elif group == 4:
                num = self.number()
                if num is None:
                    self.unexpected()
                add_one_elem_seen()
                name = shape.element_type
                if num.kind == "bool" and kind != "pred":
                    self.fail(f"expects {'integer' if kind in ('int', 'uint') else 'a number'} for primitive "
                              f"type {name}, got '{toks[self.i][0]}' (true and false are pred values)")
                if kind in ("int", "uint", "pred") and num.kind == "float":
                    self.fail(f"expects integer for primitive type {name}, got '{toks[self.i][0]}'")
                if kind == "complex":
                    self.fail(f"expects (real, imag) for complex type {name}, got '{toks[self.i][0]}'")
                if lin >= n:
                    self.fail(f"too many elements: the shape {shape.to_str(False)} has {n}")
                vals.append(num)
                where.append(self.i)
                lin += 1
                self.i += 1
            else:
                self.unexpected()
            if nest == 0:
                break
        if elided:
            if n == 0:      # no values to elide: the literal is exact
                return Literal(shape, np.zeros(dims, et.numpy), False)
            return Literal(shape, None, True)
        return Literal(shape, self.convert(vals, where, shape, et, n), False)

    def complex_value(self, et):
        self.i += 1   # '('
        parts = []
        for k, sep in ((0, ","), (1, ")")):
            if self.kind() != "word":
                self.fail(f"expects the {'real' if k == 0 else 'imaginary'} part of a complex value, "
                          f"got {self.seen()}")
            num = self.number()
            if num is None or num.kind == "bool":
                if num is None:
                    self.unexpected()
                self.fail(f"expects a number for the {'real' if k == 0 else 'imaginary'} part, got {self.seen()}")
            parts.append((num, self.i))
            self.i += 1
            if self.kind() != sep:
                self.fail(f"expects '{sep}' in a complex value (real, imag), got {self.seen()}")
            self.i += 1
        return parts

    # -- values -> numpy, with XLA's range checks
    def convert(self, vals, where, shape, et, n):
        dt = et.numpy
        kind = et.kind
        name = shape.element_type
        out = np.zeros(n, dtype=dt)
        if not vals:
            return out.reshape(shape.dims)
        k = len(vals)
        if kind == "pred":
            out[:k] = [v.value != 0 if v.kind == "int" else v.value for v in vals]
        elif kind in ("int", "uint"):
            lo, hi = _int_range(et)
            # XLA's lexer keeps an integer as int64 bits (2**63 and above wrap to negative values);
            # an unsigned type then reads those bits as uint64: u64 takes -1 as 2**64-1, s64 takes
            # 2**64-1 as -1, and only values that still fall outside the type's range are refused
            ints = [_as_int64(v.value) for v in vals]
            if kind == "uint":
                ints = [v + (1 << 64) if v < 0 else v for v in ints]
            for j, v in enumerate(ints):
                if v < lo or v > hi:
                    self.fail(f"value {vals[j].value} is out of range for {name} [{lo}, {hi}]", where[j])
            out[:k] = np.array(ints, dtype=np.int64 if kind == "int" else np.uint64).astype(dt)
        elif kind == "float":
            out[:k] = self.floats([v.as_float() for v in vals], vals, [where[j] for j in range(k)], et, name)
        elif kind == "complex":
            comp = ELEMENT_TYPES["f32" if name == "c64" else "f64"]
            lo, hi = float(np.finfo(comp.numpy).min), float(np.finfo(comp.numpy).max)
            re_ = []
            im_ = []
            for (a, ai), (b, bi) in vals:
                for part, (num, ti) in (("real", (a, ai)), ("imaginary", (b, bi))):
                    v = num.value
                    if math.isfinite(v) and (v < lo or v > hi):
                        self.fail(f"{part} part {v:g} is out of range for {name} [{lo:g}, {hi:g}]", ti)
                re_.append(a)
                im_.append(b)
            out[:k].real = self.floats([x.as_float() for x in re_], re_, None, comp, name)
            out[:k].imag = self.floats([x.as_float() for x in im_], im_, None, comp, name)
        return out.reshape(shape.dims)

    def floats(self, values, nums, where, et, name):
        arr = np.array(values, dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore", under="ignore"):
            res = arr.astype(et.numpy)
        back = res.astype(np.float64)
        fin = np.isfinite(arr)
        bad = fin & ~np.isfinite(back)
        if bad.any():
            lo, hi = _float_limits(et)
            bad &= (arr > hi) | (arr < lo)
            if bad.any() and where is not None:
                j = int(np.argmax(bad))
                self.fail(f"value {arr[j]:g} is out of range for {name} [{lo:g}, {hi:g}]", where[j])
        nan_at = np.flatnonzero(np.isnan(arr))
        if len(nan_at):
            payload_ok = et.name in _PAYLOAD_NAN_TYPES
            for j in nan_at:
                num = nums[j]
                payload = num.nan_payload
                if payload == _QUIET_DOUBLE_PAYLOAD:
                    payload = None
                if payload_ok:
                    mant = _float_layout(et)
                    mask = (1 << mant) - 1
                    if payload is not None and payload > mask:
                        self.fail(f"NaN payload 0x{payload:x} is out of range for {et.name} (at most 0x{mask:x})",
                                  where[j] if where is not None else None)
                    res[j] = _nan_with_payload(et, payload, num.negative_nan)
                else:
                    if payload is not None:
                        self.fail(f"{et.name} does not support NaN payloads (write plain nan)",
                                  where[j] if where is not None else None)
                    with np.errstate(invalid="ignore"):
                        res[j] = np.array(-math.nan if num.negative_nan else math.nan).astype(et.numpy)
        return res


def _example(dims) -> str:
    def level(d):
        if d == len(dims) - 1:
            return "{" + ", ".join("x" for _ in range(min(dims[d], 2))) + (", ..." if dims[d] > 2 else "") + "}"
        inner = level(d + 1)
        return "{" + ", ".join(inner for _ in range(min(dims[d], 2))) + (", ..." if dims[d] > 2 else "") + "}"
    return level(0) if dims else "x"


def _float_limits(et):
    import ml_dtypes
    info = np.finfo(et.numpy) if et.name in ("f16", "f32", "f64") else ml_dtypes.finfo(et.numpy)
    lo = float(info.min)
    if et.name == "f8e8m0fnu":      # no sign bit: its lowest value is its smallest one
        lo = float(info.smallest_normal)
    return lo, float(info.max)


_FAST_TOKENS = re.compile(r"[{},]|[^\s{},]+")
_FAST_COMMENT = re.compile(r"/\*.*?\*/", re.S)
_FAST_FLOAT = re.compile(r"-?\d+(?:\.\d*)?(?:[eE][+-]?\d+)?")
_FAST_INT = re.compile(r"-?\d{1,18}")
_FAST_PRED = {"true": True, "false": False, "0": False, "1": True}


def _fits_64(number: str) -> bool:
    """A number spelled as an integer is one XLA's lexer reads (in 64 bits, as the exact reader
    checks); a decimal always is."""
    if not _INT.fullmatch(number):
        return True
    return -(1 << 63) <= int(number) <= (1 << 64) - 1


def _fast_values(toks: list, dims) -> list | None:
    """The value tokens of a fully braced array of `dims` (or of a scalar: one token), in order; None
    when the braces do not nest as the dimensions ask."""
    rank = len(dims)
    if rank == 0:
        return toks if len(toks) == 1 else None
    if not toks or toks[0] != "{" or toks[-1] != "}":
        return None
    vals = []
    depth = 0
    cnt = [0] * (rank + 1)
    last = len(toks) - 1
    for k, t in enumerate(toks):
        if t == ",":
            continue
        if t == "{":
            if depth == rank:
                return None
            if depth:
                cnt[depth] += 1
            depth += 1
            cnt[depth] = 0
        elif t == "}":
            if depth == 0 or cnt[depth] != dims[depth - 1]:
                return None
            depth -= 1
            if depth == 0 and k != last:
                return None
        else:
            if depth != rank:
                return None
            cnt[depth] += 1
            vals.append(t)
    return vals


def _fast_literal(text: str, shape: Shape):
    """The common case, quickly: a fully braced array (or a scalar) of finite numbers that fit
    the type.  None for anything else, which the exact reader then handles (and locates)."""
    if shape.is_tuple:
        return None
    et = ELEMENT_TYPES.get(shape.element_type)
    kind = et.kind
    if kind not in ("float", "int", "uint", "pred"):
        return None
    if "/" in text:
        text = _FAST_COMMENT.sub(" ", text)
    vals = _fast_values(_FAST_TOKENS.findall(text), shape.dims)
    if vals is None:
        return None
    if kind == "float":
        match = _FAST_FLOAT.fullmatch
        for v in vals:
            if match(v) is None or (len(v) > 19 and not _fits_64(v)):
                return None
        arr = np.array(list(map(float, vals)), dtype=np.float64)
        if not np.isfinite(arr).all():
            return None
        with np.errstate(over="ignore", invalid="ignore", under="ignore"):
            res = arr.astype(et.numpy)
        if et.numpy != np.float64 and not np.isfinite(res.astype(np.float64)).all():
            return None
    elif kind == "pred":
        get = _FAST_PRED.get
        out = [get(v) for v in vals]
        if None in out:
            return None
        res = np.array(out, dtype=np.bool_)
    else:
        match = _FAST_INT.fullmatch
        for v in vals:
            if match(v) is None:
                return None
        arr = np.array(list(map(int, vals)), dtype=np.int64)
        if len(arr):
            lo, hi = _int_range(et)
            if int(arr.min()) < lo or int(arr.max()) > hi:
                return None
        res = arr.astype(et.numpy)
    return Literal(shape, res.reshape(shape.dims), False)


# The large case, in NumPy and in memory proportional to the text: a fully braced array of plain
# decimal numbers.  The regexes are possessive (no backtracking state per element).
_ARRAY_SEP = frozenset(b" \t\r\n,{}")
_LUTS: list = []        # (separators, braces): byte -> bool tables, made on the first large literal


def _luts():
    if not _LUTS:
        sep = np.zeros(256, dtype=np.bool_)
        sep[list(_ARRAY_SEP)] = True
        brace = np.zeros(256, dtype=np.bool_)
        brace[[0x7B, 0x7D]] = True
        _LUTS.extend((sep, brace))
    return _LUTS
_TO_SPACE = bytes.maketrans(b",{}", b"   ")
_NOT_BRACES = bytes(c for c in range(256) if c not in b"{}")
_ARRAY_PATTERNS = {      # compiled on the first large literal (compiling them costs a few ms at import)
    "float": rb"[\s,{}]*+(?:-?\d++(?:\.\d*+)?+(?:[eE][+-]?\d++)?+(?:[\s,{}]++-?\d++(?:\.\d*+)?+"
             rb"(?:[eE][+-]?\d++)?+)*+)?+[\s,{}]*+",
    "int": rb"[\s,{}]*+(?:-?\d{1,18}+(?:[\s,{}]++-?\d{1,18}+)*+)?+[\s,{}]*+",
}
_ARRAY_MIN_BYTES = 1 << 16


def brace_count(dims) -> int:
    """How many braces a fully braced array of these dimensions is written with (2 for each group
    at each level: a [2^30, 0] array is 2^31 + 2 of them), computed without writing them."""
    total, groups = 0, 1
    for d in dims[:-1] if dims else ():
        total += 2 * groups
        groups *= d
    return total + 2 * groups if dims else 0


# A zero-element array holds no values, so `{...}` (elided) says all there is about it: it is
# printed so when its braces would be more than this many (f32[2^30,0] is 2^30 times `{}`)
ZERO_ELEMENT_BRACES = 4096


def _braces_of(dims) -> bytes:
    """The braces of a fully braced array of these dimensions, in order: {{}{}} for [2,n]."""
    inner = b"{}"
    for d in reversed(dims[:-1]):
        inner = b"{" + inner * d + b"}"
    return inner


def _array_literal(text: str, shape: Shape):
    """A large float or integer array literal decoded with NumPy, exactly as the token reader would
    (same values, same range rules); None whenever anything is unusual, for the reader to decide."""
    et = ELEMENT_TYPES.get(shape.element_type)
    dims = shape.dims
    if et is None or et.kind not in ("float", "int", "uint") or not dims or not text.isascii():
        return None
    data = text.encode("ascii")
    if not re.fullmatch(_ARRAY_PATTERNS["float" if et.kind == "float" else "int"], data):
        return None
    braces = data.translate(None, _NOT_BRACES)
    if len(braces) != brace_count(dims):      # before building the braces the dimensions declare
        return None
    want = _braces_of(dims)
    if braces != want:
        return None
    del braces
    n = 1
    for d in dims:
        n *= d
    # numbers between consecutive braces: dims[-1] inside an innermost {...}, none elsewhere
    # (a few byte-sized arrays of the text's length at a time)
    b = np.frombuffer(data, dtype=np.uint8)
    sep_lut, brace_lut = _luts()
    at = np.flatnonzero(brace_lut[b])
    ends = sep_lut[b]                # where a number ends: a separator after a non-separator
    ends[1:] &= ~ends[:-1]
    ends[0] = False
    del b
    if ends[:at[0] + 1].any():
        return None
    # a number between braces k and k+1 ends in (at[k], at[k+1]]
    ends = np.flatnonzero(ends)
    per = np.diff(np.searchsorted(ends, at, side="right"))
    braces = np.frombuffer(want, dtype=np.uint8)
    inner = (braces[:-1] == 0x7B) & (braces[1:] == 0x7D)     # an innermost {...}
    if not np.array_equal(per, np.where(inner, dims[-1], 0)):
        return None
    flat = data.translate(_TO_SPACE)
    del data
    if et.kind == "float":
        arr = np.fromstring(flat, dtype=np.float64, sep=" ")
        if arr.size != n or not np.isfinite(arr).all():
            return None
        if et.numpy == np.float64:
            res = arr
        else:
            with np.errstate(over="ignore", invalid="ignore", under="ignore"):
                res = arr.astype(et.numpy)
            if not np.isfinite(res).all():
                return None
    else:
        arr = np.fromstring(flat, dtype=np.int64, sep=" ")
        if arr.size != n:
            return None
        lo, hi = _int_range(et)
        if n and (int(arr.min()) < lo or int(arr.max()) > hi):
            return None
        res = arr.astype(et.numpy)
    return Literal(shape, res.reshape(shape.dims), False)


def parse_literal(text: str, shape: Shape) -> Literal:
    """Decode the text inside constant(...) for the declared shape.  Raises LiteralError whose
    `offset` is the 0-based index in `text` of the token at fault."""
    for leaf in shape.leaves():
        if leaf.rank > NUMPY_MAX_RANK:      # (its values could not be held: NumPy's limit)
            raise LiteralError(f"a literal of {leaf.rank} dimensions: hlo holds arrays of at most "
                               f"{NUMPY_MAX_RANK} (NumPy's limit; XLA has none)", 0)
    large = len(text) >= _ARRAY_MIN_BYTES
    if large and not shape.is_tuple:
        lit = _array_literal(text, shape)
        if lit is not None:
            return lit
    lit = _fast_literal(text, shape) if not large or shape.element_type == "pred" else None
    if lit is not None:
        return lit
    r = _LiteralReader(text)
    try:
        lit = r.literal(shape)
        if r.i < len(r.toks):
            r.fail(f"unexpected {r.seen()} after the literal of shape {shape.to_str(False)}")
    except _Stop:
        msg, off = r.first_error
        raise LiteralError(msg, off) from None
    return lit


def _nest(tokens, dims) -> str:
    it = iter(tokens)

    def level(d):
        if d == len(dims) - 1:
            return "{" + ", ".join(next(it) for _ in range(dims[d])) + "}"
        return "{" + ", ".join(level(d + 1) for _ in range(dims[d])) + "}"
    return level(0)


def _float_layout(et):
    import ml_dtypes
    info = ml_dtypes.finfo(et.numpy) if et.name not in ("f16", "f32", "f64") else np.finfo(et.numpy)
    mant = int(info.nmant)
    return mant


def _nan_with_payload(et, payload, negative):
    """The NaN of an IEEE-like type with the given payload (None: the quiet NaN) and sign."""
    bits = et.bits
    mant = _float_layout(et)
    exp_bits = bits - 1 - mant
    if payload is None:
        payload = 1 << (mant - 1)
    word = ((1 << exp_bits) - 1) << mant | payload
    if negative:
        word |= 1 << (bits - 1)
    return np.array(word, dtype=_UINT_OF_BITS[bits]).view(et.numpy)


# ----------------------------------------------------------------------------- printing

_MAX_DIGITS10: dict[str, int] = {}


def _max_digits10(et) -> int:
    d = _MAX_DIGITS10.get(et.name)
    if d is None:
        mant = _float_layout(et)
        d = math.ceil(1 + (mant + 1) * math.log10(2))
        _MAX_DIGITS10[et.name] = d
    return d


_IEEE_NAN_TYPES = frozenset({"f16", "bf16", "f32", "f64", "f8e5m2", "f8e4m3", "f8e3m4"})


def _nan_text(v, et) -> str:
    bits = et.bits
    sign = ""
    if bits in (8, 16, 32, 64):
        word = int(np.array(v, dtype=et.numpy).view(_UINT_OF_BITS[bits]))
        mant = _float_layout(et)
        if et.name == "f8e8m0fnu":          # no sign bit: its one NaN is 0xff
            return "nan"
        payload = word & ((1 << mant) - 1)
        if word >> (bits - 1):
            sign = "-"
        # Like XLA, only types with signaling NaNs (IEEE-like ones) print a payload; the
        # fn / fnuz types have a single NaN (per sign) and print plain nan / -nan.
        if et.name in _IEEE_NAN_TYPES and payload != (1 << (mant - 1)):
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
    s = "%.*g" % (_max_digits10(et), f)
    if name == "f8e8m0fnu":
        # XLA's 2 digits do not always read back (2^-127 prints as 5.9e-39, read as 2^-126)
        back = np.array(float(s)).astype(et.numpy)
        if back.tobytes() != np.array(v, dtype=et.numpy).tobytes():
            s = repr(f)
    return s


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
        return f"({_complex_part(v.real, comp)}, {_complex_part(v.imag, comp)})"
    return str(v)


def _complex_part(x, comp) -> str:
    s = format_float(x, comp)
    f = float(x)
    if math.isfinite(f) and abs(float(s)) > float(np.finfo(comp.numpy).max):
        # XLA spells FLT_MAX 3.40282347e+38, above FLT_MAX: XLA's parser (and ours) accept
        # that for an f32 but reject it as out of range for a complex part
        s = repr(f)
    return s


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
    if shape.rank and shape.num_elements == 0 and brace_count(shape.dims) > ZERO_ELEMENT_BRACES:
        return "{...}"
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
            # XLA pads the innermost braces with spaces only for two or more elements
            return "{ " + ", ".join(items) + " }" if n > 1 else "{" + "".join(items) + "}"
        comment = f"/*i{d - 1}={index}*/ " if (rank > 3 and 1 <= d <= rank - 2) else ""
        kids = [level(d + 1, k) for k in range(n)]
        return "{ " + comment + ", ".join(kids) + " }"
    return level(0, 0)
