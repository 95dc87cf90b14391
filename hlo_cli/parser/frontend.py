"""The Lark front end: LALR parser with an embedded transformer (no parse tree is built).

The transformer turns tokens into light intermediate records; builder.py then
resolves names, decodes attributes by the opcode table and produces the IR.

Lark is imported, and its tables loaded, only for a text the scanner below does not read whole
(`_parser`): the scanner's regular expressions are the grammar's terminals as stored in
terminal_patterns.py (checked against the grammar: `terminal_source`), its tokens are `Tok`s, and the
transformer's methods (`_Reductions`) are plain functions to it; Lark's Transformer joins them only
in `_parser`.
"""
from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import sys
from ..errors import Diagnostic, HloSyntaxError
from .grammar import grammar_path
from ..ir.attributes import (BackendConfig, Group, IntList, KV, Metadata, Quoted, Sep, Seq, Word,
                             unquote)
from ..ir.shape import Shape, ShapeSyntaxError, parse_array_shape



# ----------------------------------------------------------------------------- records

class LiteralValue:
    """`literal=f32[3]{0} {1, 2, 3}` on a custom-call."""
    __slots__ = ("shape", "text")

    def __init__(self, shape, text):
        self.shape, self.text = shape, text


@dataclass(slots=True, eq=False)
class Arg:
    kind: str                 # ref | literal | nested
    name: str | None = None
    shape: Any = None
    text: str | None = None
    tok: Any = None
    nested: Any = None


class RawInstr:
    __slots__ = ("is_root", "name", "name_tok", "shape", "shape_tok", "opcode", "opcode_tok",
                 "args", "attrs")

    def __init__(self, is_root, name_tok, shape, shape_tok, opcode_tok, args, attrs):
        self.is_root = is_root
        self.name_tok = name_tok
        v = str(name_tok)
        self.name = v[1:] if v[:1] == "%" else v
        self.shape = shape
        self.shape_tok = shape_tok
        self.opcode_tok = opcode_tok
        self.opcode = str(opcode_tok)
        self.args = args
        self.attrs = attrs        # list of (name, generic value, token)


class RawComputation:
    """A computation's head and its instruction records.  A body read in one pass (`fast`, a
    FastBody) makes its records only when `instrs` is asked for: the builder builds such a body
    from its lines without them."""
    __slots__ = ("is_entry", "name_tok", "params", "result", "_instrs", "thread", "name", "synthesized", "fast")

    def __init__(self, is_entry, name_tok, params, result, instrs, thread, fast=None):
        self.is_entry, self.name_tok, self.params, self.result = is_entry, name_tok, params, result
        self._instrs, self.thread, self.fast = instrs, thread, fast
        self.name = _strip(name_tok)
        self.synthesized = False

    @property
    def instrs(self) -> list:
        if self._instrs is None:
            self._instrs = self.fast.line_instrs()
        return self._instrs

    @instrs.setter
    def instrs(self, value):
        self._instrs = value


@dataclass(slots=True, eq=False)
class RawModule:
    header: Any               # (name_tok, attrs) or None
    sections: list            # [(name, [(id, value)])]
    computations: list


class Tok(str):
    """A token the front end makes itself: its text, and the fields of Lark's Token that the front end
    and the builder read (type, offset, line, column)."""

    def __new__(cls, type_, value, start_pos=None, line=None, column=None):
        tok = str.__new__(cls, value)
        tok.type, tok.start_pos, tok.line, tok.column = type_, start_pos, line, column
        return tok

    def __repr__(self):
        return f"Tok({self.type!r}, {str.__repr__(self)})"

    def __reduce__(self):
        return Tok, (self.type, str(self), self.start_pos, self.line, self.column)


_TOKENS: tuple = (Tok,)         # the token classes (Lark's joins once Lark is loaded: `_parser`)


def _strip(tok) -> str:
    s = str(tok)
    return s[1:] if s.startswith("%") else s


def _after_root(c):
    """(whether an instruction's children start with ROOT, the children after it)."""
    if isinstance(c[0], _TOKENS) and c[0].type == "ROOT":
        return True, c[1:]
    return False, c


def _args_and_attrs(items, decode_attr_tokens: bool = False):
    """An instruction's operands and attributes from its children (an ATTR token decoded when asked)."""
    args, attrs = [], []
    for x in items:
        if x is None:
            continue
        if isinstance(x, Arg):
            args.append(x)
        elif decode_attr_tokens and isinstance(x, _TOKENS) and x.type == "ATTR":
            attrs.append(_attr_from_token(x))
        else:
            attrs.append(x)
    return args, attrs


class ShapeTokenError(Exception):
    def __init__(self, tok, err):
        self.tok, self.err = tok, err


def _shape(x) -> Shape:
    if isinstance(x, Shape):
        return x
    try:
        return parse_array_shape(str(x))
    except ShapeSyntaxError as e:
        raise ShapeTokenError(x, e) from None


def _first_tok(x):
    return x if isinstance(x, _TOKENS) else None


# ----------------------------------------------------------------------------- transformer

class _Reductions:
    """The embedded transformer's methods, called by the LALR parser at every reduction (`_parser`
    makes a Lark Transformer of them); the scanner calls some of them itself, without Lark."""

    def __init__(self):
        self.text = ""

    # shapes
    def tuple_shape(self, c):
        return Shape.tuple_of(_shape(x) for x in c if x is not None)

    # generic attribute values
    def brace(self, c):
        l, r = c[0], c[-1]
        items = tuple(_val(x) for x in c[1:-1])
        depth = _nesting(items, l)
        return Group("{", items, self.text[l.start_pos:r.end_pos], depth)

    def bracket(self, c):
        items = tuple(_val(x) for x in c[1:-1])
        return Group("[", items, "", _nesting(items, c[0]))

    def paren(self, c):
        items = tuple(_val(x) for x in c[1:-1])
        return Group("(", items, "", _nesting(items, c[0]))

    def keyvalue(self, c):
        return KV(str(c[0]), _val(c[1]))

    def attribute(self, c):
        if len(c) == 1:
            tok = c[0]
            s = str(tok)
            if tok.type == "METADATA":
                return ("metadata", Metadata(s[len("metadata="):]), tok)
            return ("backend_config", BackendConfig(s[len("backend_config="):]), tok)
        return (str(c[0]), _val(c[1]), c[0])

    def attribute_literal(self, c):
        return (str(c[0]), LiteralValue(_shape(c[1]), str(c[2])), c[0])

    def attribute_seq(self, c):
        return (str(c[0]), Seq(tuple(_val(x) for x in c[1:])), c[0])

    # operands
    def operand(self, c):
        return Arg("ref", name=_strip(c[0]), tok=c[0])

    def typed_operand(self, c):
        return Arg("ref", name=_strip(c[1]), shape=_shape(c[0]), tok=c[1])

    def shape_operand(self, c):
        """An operand given only by its shape: a lone instruction makes it a parameter named `_N`."""
        return Arg("ref", name="", shape=_shape(c[0]), tok=_first_tok(c[0]))

    def nested_instruction(self, c):
        shape = _shape(c[0])
        args = [a for a in c[2:] if a is not None]
        return Arg("nested", shape=shape, tok=c[1],
                   nested=RawInstr(False, Tok("NAME", ""), shape, c[0], c[1], args, []))

    def arg(self, c):
        x = c[0]
        return Arg("literal", text=_lit_text(x), tok=_lit_tok(x))

    def typed_literal(self, c):
        x = c[1]
        return Arg("literal", shape=_shape(c[0]), text=_lit_text(x), tok=_lit_tok(x))

    def buffer_shape(self, c):
        return Shape("buffer", tuple_shapes=(_shape(c[1]),))

    def eq_item(self, c):
        return Sep("=")

    def nested_instruction_noshape(self, c):
        args = [a for a in c[1:] if a is not None]
        return Arg("nested", tok=c[0], nested=RawInstr(False, Tok("NAME", ""), None, None, c[0], args, []))

    def instruction_noshape(self, c):
        is_root, c = _after_root(c)
        args, attrs = _args_and_attrs(c[2:], decode_attr_tokens=True)
        return RawInstr(is_root, c[0], None, None, c[1], args, attrs)

    def anonymous_instruction(self, c):
        """`f32[2] multiply(f32[2], f32[2])`: XLA names the result `_` and the operands `_0`, `_1`, ..."""
        shape_x, opcode_tok = c[0], c[1]
        args, attrs = [], []
        k = 0
        for x in c[2:]:
            if x is None:
                continue
            if isinstance(x, (Shape, *_TOKENS)) and not (isinstance(x, _TOKENS) and x.type in ("ATTR", "NAME")):
                pos = Pos(f"_{k}", getattr(opcode_tok, "line", 1), getattr(opcode_tok, "column", 1))
                args.append(Arg("ref", name=f"_{k}", shape=_shape(x), tok=pos))
                k += 1
            elif isinstance(x, _TOKENS) and x.type == "ATTR":
                attrs.append(_attr_from_token(x))
            else:
                attrs.append(x)
        name = Pos("_", getattr(opcode_tok, "line", 1), getattr(opcode_tok, "column", 1))
        instr = RawInstr(True, name, _shape(shape_x), _first_tok(shape_x), opcode_tok, args, attrs)
        return self.single_instruction([instr])

    def single_instruction(self, c):
        comp = RawComputation(True, Tok("NAME", "_", None, 1, 1), None, None, [c[0]], None)
        comp.synthesized = True
        return RawModule((Tok("NAME", "_", None, 1, 1), []), [], [comp])

    # instructions and computations
    def instruction(self, c):
        is_root, c = _after_root(c)
        name_tok, shape_x, opcode_tok = c[0], c[1], c[2]
        args, attrs = _args_and_attrs(c[3:])
        return RawInstr(is_root, name_tok, _shape(shape_x), _first_tok(shape_x), opcode_tok, args, attrs)

    def param(self, c):
        return (_strip(c[0]), _shape(c[1]), c[0])

    def signature(self, c):
        return ("sig", [p for p in c[:-2] if p is not None], _shape(c[-1]))

    def exec_thread(self, c):
        return ("thread", unquote(str(c[1])), c[0])

    def computation(self, c):
        is_entry = False
        i = 0
        if isinstance(c[0], _TOKENS) and c[0].type == "ENTRY":
            is_entry = True
            i = 1
        name_tok = c[i]
        params = result = thread = None
        instrs = []
        for x in c[i + 1:]:
            if x is None:
                continue
            if isinstance(x, (RawInstr, LineInstr)):
                instrs.append(x)
            elif isinstance(x, list):           # INSTR_LINES
                instrs.extend(x)
            elif x[0] == "sig":
                params, result = x[1], x[2]
            elif x[0] == "thread":
                thread = x
        return RawComputation(is_entry, name_tok, params, result, instrs, thread)

    def section_entry(self, c):
        return (int(c[0]), _val(c[1]), c[0])

    def section(self, c):
        entries = []
        for x in c[1:]:
            if isinstance(x, _TOKENS) and x.type == "SECTION_ENTRY":
                num, _, rest = str(x).partition(" ")
                rest = rest.strip()
                if rest.startswith('"'):
                    value = Quoted(unquote(rest), rest)
                else:
                    value = Group("{", tuple(KV(k, Word(v)) for k, v in _SECTION_KV.findall(rest)), rest)
                entries.append((int(num), value, Tok("INT", num, x.start_pos, x.line, x.column)))
            else:
                entries.append(x)
        return ("section", str(c[0]), entries)

    def header(self, c):
        return ("header", c[0], [a for a in c[1:]])

    def module(self, c):
        comps = [x for x in c if isinstance(x, RawComputation)]
        parts = [(x[0], (x[1], x[2])) for x in c if x is not None and not isinstance(x, RawComputation)]
        header = next((p for kind, p in parts if kind == "header"), None)     # the grammar allows one
        return RawModule(header, [p for kind, p in parts if kind != "header"], comps)

    def inline_body(self, c):
        return [y for x in c for y in (x if isinstance(x, list) else (x,)) if isinstance(y, (RawInstr, LineInstr))]

    def start(self, c):
        return c[0]

    def empty(self, c):
        return None


#: How deeply (), [] and {} may nest in an attribute value.  Real modules stay under ten levels;
#: the limit stops hostile text early (each level keeps its source text) with a located error.
MAX_NESTING = 256


class NestingError(Exception):
    def __init__(self, tok):
        self.line, self.column = tok.line, tok.column
        self.message = (f"nested too deeply: more than {MAX_NESTING} levels of brackets in an attribute "
                        "value")


def _nesting(items, open_tok) -> int:
    depth = nesting_depth(items)
    if depth > MAX_NESTING:
        raise NestingError(open_tok)
    return depth


def nesting_depth(items) -> int:
    """How deeply groups nest in a group of these items (1: none inside)."""
    deepest = 0
    for x in items:
        if isinstance(x, KV):
            x = x.value
        if isinstance(x, Group) and x.depth > deepest:
            deepest = x.depth
    return deepest + 1


def _val(x):
    if isinstance(x, _TOKENS):
        t = x.type
        if t == "NAME":
            return Word(x)
        if t == "STRING":
            return Quoted(unquote(str(x)), str(x))
        if t == "SHAPE":
            return _shape(x)
        if t == "INT_LIST":
            body = str(x)[1:-1].strip()
            return IntList(int(v) for v in body.split(",")) if body else IntList()
        if t == "SQ_STRING":
            return Word(x)
        if t in ("SEP", "LE", "COLON", "IOTA_T", "ARROW"):
            return Sep(str(x))
        return Word(x)
    return x


def _lit_text(x) -> str:
    return x if isinstance(x, str) else str(x)     # a Token is a str: no copy of a large literal


def _lit_tok(x):
    return x


@lru_cache(maxsize=1)
def _parser():
    """(Lark's LALR parser, its embedded transformer): Lark imported and its tables loaded here only."""
    global _TOKENS
    from lark import Lark, Token, Transformer

    class _T(_Reductions, Transformer):
        def __init__(self):
            Transformer.__init__(self, visit_tokens=False)
            _Reductions.__init__(self)
    _TOKENS = (Tok, Token)
    t = _T()
    lark = Lark(grammar_path().read_text(), parser="lalr", lexer="contextual", start=["start", "attr_value"],
                maybe_placeholders=True, propagate_positions=False, transformer=t,
                cache=True)   # Lark keeps the LALR tables in its own cache file
    return lark, t


_FAST = _Reductions()          # (the transformer's methods as the scanner calls them)


def warm_up() -> None:
    """Do the front end's first-call work now (compile the scanner's regexes), so that processes
    forked after it (parser/parallel.py) do not each pay for it.  Lark's tables are not loaded: a text
    the scanner reads whole never needs them."""
    _scanner_regexes()
    fused_regexes()
    _plain_regexes()
    _terminals(_PREFIX_TERMINALS)
    _terminals(_LITERAL_TERMINALS)


def terminal_pattern(name: str) -> str:
    """The regular expression of one of the grammar's terminals (for a printer that writes a value
    bare only when it reads back as that one token)."""
    return terminal_source(name)


def _lark_terminal(name: str) -> str:
    return _parser()[0].get_terminal(name).pattern.to_regexp()


#: The terminals stored in terminal_patterns.py (what the scanner and the value reader use).
STORED_TERMINALS = ("INSTR_LINE", "SIGNATURE", "ATTR", "SECTION_ENTRY", "INSTR_HEAD", "LITERAL_ARRAY",
                    "COMMENT", "LINE_COMMENT", "SHAPE", "NAME", "STRING", "INT_LIST", "SQ_STRING", "IOTA_T",
                    "BACKEND_CONFIG")
_stored: list = []


def _grammar_sha256() -> str:
    import hashlib
    return hashlib.sha256(grammar_path().read_bytes()).hexdigest()


def terminal_source(name: str) -> str:
    """The regular expression Lark makes of the grammar's terminal NAME: as stored in
    terminal_patterns.py when that file was made from this very grammar (its SHA-256), else Lark's."""
    if not _stored:
        from . import terminal_patterns as stored
        _stored.append(stored.PATTERNS if stored.GRAMMAR_SHA256 == _grammar_sha256() else None)
    patterns = _stored[0]
    if patterns is not None and name in patterns:
        return patterns[name]
    return _lark_terminal(name)


def render_terminal_patterns() -> str:
    """The text of terminal_patterns.py made from the grammar by Lark (tests/test_parsefast_lark_free.py
    checks the stored file against it; write it out after changing the grammar)."""
    lines = ['"""The regular expressions Lark makes of grammar/hlo.lark\'s terminals that the front end\'s scanner',
             "uses, stored so that a text the scanner reads whole needs neither Lark nor its tables.",
             "Made by parser/frontend.py `render_terminal_patterns` (do not edit; used only while the",
             'grammar\'s SHA-256 is GRAMMAR_SHA256)."""', "",
             f"GRAMMAR_SHA256 = {_grammar_sha256()!r}", "", "PATTERNS = {"]
    lines += [f"    {name!r}: {_lark_terminal(name)!r}," for name in STORED_TERMINALS]
    return "\n".join(lines + ["}", ""])


# ----------------------------------------------------------------------------- entry points

def _describe_expected(expected) -> str:
    names = {
        "NAME": "a name", "SHAPE": "a shape", "LPAR": "'('", "RPAR": "')'", "COMMA": "','",
        "EQUAL": "'='", "LBRACE": "'{'", "RBRACE": "'}'", "LSQB": "'['", "RSQB": "']'",
        "INT": "an integer", "STRING": "a string", "WORD": "a value", "NUMBER": "a number",
        "LITERAL_ARRAY": "an array literal", "ENTRY": "ENTRY", "ROOT": "ROOT", "COLON": "':'",
        "INT_LIST": "a list like {1,2}", "METADATA": "metadata", "BACKEND_CONFIG": "backend_config",
        "SECTION_NAME": "a section name", "HLOMODULE": "HloModule", "__ANON_0": "'->'",
        "MORETHAN": "'>'", "LE": "'<='", "SEP": "','", "$END": "end of file", "MINUS": "'-'",
        "INSTR_HEAD": "an instruction", "INSTR_LINE": "an instruction", "INSTR_LINES": "an instruction",
        "PARAMS": "a parameter list",
        "BUFFER_OPEN": "'b('", "LITERAL_TUPLE": "a tuple literal", "ANGLE": "'<'", "ARROW": "'->'",
        "OPERANDS": "operands", "ATTR": "an attribute", "IOTA_T": "'T('", "INT_LIST_": "a list",
    }
    out = []
    for e in sorted(expected):
        d = names.get(e)
        if d is None:
            d = e if not e.startswith("__") else None
        if d and d not in out:
            out.append(d)
    if not out:
        return "something else"
    if len(out) > 6:
        out = out[:6] + ["..."]
    return ", ".join(out)


def _seen(tok) -> str:
    if tok is None:
        return "end of file"
    if tok.type == "$END":
        return "end of file"
    s = str(tok)
    if len(s) > 40:
        s = s[:37] + "..."
    return f"'{s}'"


def _line_of(text: str, line: int) -> str:
    lines = text.split("\n")
    return lines[line - 1] if 0 < line <= len(lines) else ""


def parse_raw(text: str, filename: str = "<string>", start_line: int = 0):
    if not text.strip():
        raise HloSyntaxError(f"{filename}: the file is empty",
                             [Diagnostic("the input is empty: expected an HLO module", filename, 1, 1,
                                         code="E001")])
    fast = scan_module(text)
    if fast is not None:
        return fast
    from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken
    lark, t = _parser()
    t.text = text
    try:
        return lark.parse(text, start="start")
    except (SubParseError, NestingError) as e:
        raise HloSyntaxError(e.message, [Diagnostic(e.message, filename, e.line + start_line, e.column,
                                                    code="E003", source_line=_line_of(text, e.line))]) from None
    except ShapeTokenError as e:
        tok = e.tok
        line = getattr(tok, "line", 0) or 0
        col = (getattr(tok, "column", 0) or 0) + getattr(e.err, "offset", 0)
        raise HloSyntaxError(str(e.err), [Diagnostic(f"bad shape: {e.err}", filename, line + start_line,
                                                     col, code="E002", source_line=_line_of(text, line))]) from None
    except UnexpectedToken as e:
        tok = e.token
        line, col = (tok.line, tok.column) if tok.type != "$END" else _end_pos(text)
        msg = f"expected {_describe_expected(e.expected)}, got {_seen(tok)}"
        history = list(getattr(e, "token_history", None) or [])
        if tok.type == "EQUAL" and history and history[-1] is not None and history[-1].type == "NAME" \
                and "RPAR" in e.expected:
            prev = history[-1]
            line, col = prev.line, prev.column
            msg = f"nested instructions cannot have attributes (got '{prev}=')"
        elif tok.type == "$END" and "LBRACE" in e.expected and "PARAMS" in e.expected:
            m = re.search(r"(\S+)\s*\Z", text)
            if m:
                line = text.count("\n", 0, m.start()) + 1
                col = m.start() - text.rfind("\n", 0, m.start())
                msg = f"unexpected '{m.group(1)[:40]}' after the last computation"
        raise HloSyntaxError(msg, [Diagnostic(msg, filename, line + start_line, col, code="E003",
                                              source_line=_line_of(text, line))]) from None
    except UnexpectedCharacters as e:
        ch = text[e.pos_in_stream] if e.pos_in_stream < len(text) else ""
        allowed = _describe_expected(e.allowed or [])
        if text.startswith("/*", e.pos_in_stream) and "*/" not in text[e.pos_in_stream:]:
            msg = "unterminated comment: '/*' without '*/'"
        elif ch == '"':
            msg = "unterminated string: '\"' without a closing quote on this line"
        else:
            msg = f"unexpected character {ch!r}: expected {allowed}"
        raise HloSyntaxError(msg, [Diagnostic(msg, filename, e.line + start_line, e.column, code="E004",
                                              source_line=_line_of(text, e.line))]) from None
    except UnexpectedEOF as e:
        line, col = _end_pos(text)
        msg = f"unexpected end of file: expected {_describe_expected(e.expected)}"
        raise HloSyntaxError(msg, [Diagnostic(msg, filename, line + start_line, col, code="E005",
                                              source_line=_line_of(text, line))]) from None
    except UnexpectedInput as e:  # pragma: no cover - other lark errors
        line, col = getattr(e, "line", 0), getattr(e, "column", 0)
        raise HloSyntaxError(str(e), [Diagnostic(str(e).splitlines()[0], filename, line, col, code="E003",
                                                 source_line=_line_of(text, line))]) from None




def _end_pos(text: str) -> tuple[int, int]:
    """Line and column of the end of the text."""
    line = text.count("\n") + 1
    col = len(text) - text.rfind("\n")
    return line, col


# ----------------------------------------------------------------------------- coarse tokens

import re as _re


class Pos:
    """Position and text of a part of a coarse token (a light stand-in for a lark Token)."""
    __slots__ = ("value", "line", "column", "type")

    def __init__(self, value, line, column, type_="NAME"):
        self.value = value
        self.line = line
        self.column = column
        self.type = type_

    def __str__(self):
        return self.value


def _part(tok, value, offset, type_="NAME"):
    return Pos(value, tok.line, tok.column + offset, type_)


_SHAPE_PAT = r'[a-z][a-z0-9]*\[[^\]\n]*\](?:\{(?:[^{}=%\n"]++|\{[^{}\n]*+\})*+\}|<[\d,\s]*>)?'
_TUPLE_PAT = r"\((?:[^()\n]|\((?:[^()\n]|\([^()\n]*\))*\))*\)"
_LINE_RE = _re.compile(
    r"(ROOT[ \t]+)?(%?[A-Za-z_][\w.\-]*)[ \t]*=[ \t]*(" + _SHAPE_PAT + "|" + _TUPLE_PAT +
    r")[ \t]+([a-z][\w\-]*)\(((?:[^()]++|\([^()]*+\))*+)\)")
_HEAD_RE = _re.compile(
    r"(ROOT\s+)?(%?[A-Za-z_][\w.\-]*)[ \t]*=[ \t]*(" + _SHAPE_PAT + r")[ \t]+([a-z][\w\-]*)\($")
# one operand of a coarse operand list: a name, or (constant/parameter) a scalar literal
OPERAND_RE = _re.compile(r"(?:/\*.*?\*/\s*)?(?:(%?[A-Za-z_][\w.\-]*)(?![\w(])|([-+]?(?:\d[\w.+\-]*|inf|nan(?:\(0x[0-9a-fA-F]+\))?)))")
_SECTION_KV = _re.compile(r"([A-Za-z_]\w*)=([^\s,}]+)")
_STR = r'"[^"\\]*(?:\\.[^"\\]*)*"'      # strings may hold raw newlines
_IOTA_LIST = r"\[[\d,]*\]<=\[[\d,]*\](?:T\([\d,]*\))?"     # [2,8]<=[16], [4,2]<=[2,4]T(1,0): as in INSTR_LINE
ATTR_SPLIT = _re.compile(r',[ \t]*([A-Za-z_][\w\-]*)=(' + _STR + r'|\{(?:[^{}"]++|' + _STR + r'|\{(?:[^{}"]++|' + _STR +
                          r'|\{(?:[^{}"]++|' + _STR + r'|\{(?:[^{}"]++|' + _STR + r')*+\})*+\})*+\})*+\}|' + _IOTA_LIST + r'|[^\s{}\[\](),="<:]+)')
_INTS = _re.compile(r"\{\s*(?:-?\d+\s*(?:,\s*-?\d+\s*)*)?\}")


@lru_cache(maxsize=16384)
def decode_value(name: str, value: str):
    """The generic value of attribute NAME from its source text VALUE (a coarse token's part): a
    Metadata or BackendConfig as it is, anything else through the grammar's attr_value rule.
    Raises Lark's UnexpectedInput, ShapeTokenError or NestingError for text that does not read."""
    if name == "metadata":
        return Metadata(value)
    if name == "backend_config":
        return BackendConfig(value)
    c = value[0]
    if c == "{" or c == "[":    # ('[': an iota device list [2,8]<=[16], the grammar's value sequence)
        if c == "{" and _INTS.fullmatch(value):
            inner = value[1:-1].strip()
            return IntList(int(v) for v in inner.split(",")) if inner else IntList()
        simple = simple_group(value)
        if simple is None:
            simple = read_attr_value(value)
        if simple is not None:
            return simple
        lark, t = _parser()
        outer = t.text          # a sub-parse inside the main parse: keep the main text for later groups
        t.text = value
        try:
            return lark.parse(value, start="attr_value")
        finally:
            t.text = outer
    if c == '"':
        return Quoted(unquote(value), value)
    return Word(value)


_SLICE_LIST = _re.compile(r"\{\[\d+:\d+(?::\d+)?\](?:, \[\d+:\d+(?::\d+)?\])*\}")
_NAME_LIST = _re.compile(r"\{%[A-Za-z_][\w.\-]*(?:, %[A-Za-z_][\w.\-]*)*\}")
_COLON, _COMMA = Sep(":"), Sep(",")


def simple_group(value: str):
    """The generic value the grammar's attr_value rule makes of three common forms, without Lark: a
    slice list `{[0:4], [2:8:2]}`, a name list `{%a, %b}` (control-predecessors) and a group of
    shapes, words, commas and arrows (`plain_group`); None for any other text (tests/test_fused_body.py
    and tests/test_frontend_cold.py compare both ways)."""
    if _SLICE_LIST.fullmatch(value):
        items = []
        for k, part in enumerate(value[1:-1].split(", ")):
            if k:
                items.append(_COMMA)
            bounds = part[1:-1].split(":")
            inner = [Word(bounds[0])]
            for b in bounds[1:]:
                inner += (_COLON, Word(b))
            items.append(Group("[", tuple(inner), "", 1))
        return Group("{", tuple(items), value, 2)
    if _NAME_LIST.fullmatch(value):
        items = []
        for k, name in enumerate(value[1:-1].split(", ")):
            if k:
                items.append(_COMMA)
            items.append(Word(name))
        return Group("{", tuple(items), value, 1)
    return plain_group(value)


_ARROW = Sep("->")
_CLOSING = {"{": "}", "(": ")"}
_plain: list = []


def _plain_regexes():
    """(white space and comments, SHAPE, NAME): the grammar's own terminals, compiled once."""
    if not _plain:
        _plain.append((_re.compile(r"(?:\s++|" + terminal_source("COMMENT") + ")*+"),
                       _re.compile(terminal_source("SHAPE")), _re.compile(terminal_source("NAME"))))
    return _plain[0]


def plain_group(value: str):
    """The Group the grammar's attr_value rule makes of a `{...}` value made only of (), {} groups,
    shapes, bare words, commas and arrows, white space and comments (an entry_computation_layout,
    a list of booleans), read without Lark: at each place the token the contextual lexer would take
    there (SHAPE before a word, an INT_LIST such as `{1,2}` or `{}` is left to Lark, like anything
    else: strings, '=', '[', ':', '<', `T(`, a quote); None when the text is anything else."""
    if value[:1] != "{":
        return None
    skip, shape_re, word_re = _plain_regexes()
    stack: list = []            # (open character, its offset, its items)
    items: list = []
    pos, n = 0, len(value)
    while True:
        pos = skip.match(value, pos).end()
        if pos >= n:
            return None
        c = value[pos]
        if c == "{" or c == "(":
            if c == "{" and _INTS.match(value, pos):
                return None
            stack.append((c, pos, items))
            items = []
            pos += 1
        elif c == "}" or c == ")":
            if not stack:
                return None
            open_c, start, outer = stack.pop()
            if _CLOSING[open_c] != c:
                return None
            depth = 1 + max((x.depth for x in items if type(x) is Group), default=0)
            if depth >= MAX_NESTING:
                return None
            group = Group(open_c, tuple(items), value[start:pos + 1] if open_c == "{" else "", depth)
            pos += 1
            if not stack:
                return group if skip.match(value, pos).end() == n else None
            items = outer
            items.append(group)
        elif not stack:
            return None
        elif c == ",":
            items.append(_COMMA)
            pos += 1
        elif value.startswith("->", pos):
            items.append(_ARROW)
            pos += 2
        else:
            m = shape_re.match(value, pos)
            if m is not None:
                try:
                    items.append(parse_array_shape(m.group()))
                except ShapeSyntaxError:
                    return None
            else:
                if c == "'" or value.startswith("T(", pos):
                    return None
                m = word_re.match(value, pos)
                if m is None:
                    return None
                items.append(Word(m.group()))
            pos = m.end()


# ----------------------------------------------------------------------------- attribute values
#
# `read_attr_value` makes what the grammar's attr_value rule and the transformer make of a value,
# without Lark, for the values it knows (groups of words, strings, shapes, integer lists, key=value
# pairs, separators, and value sequences such as [2,8]<=[16]T(1,0)).  Lark's lexer is contextual:
# at each place it tries only the terminals the parser can take there, by priority (SHAPE and
# INT_LIST, then IOTA_T and SQ_STRING, then the others, longest first), so the reader lexes with
# the set of the place it is at (`_IN_GROUP`, `_AFTER_EQUAL`, `_VALUE`, `_AFTER_VALUE`).  Anything
# else (a '<' after '=', a closing bracket that does not match, a bad shape, nesting too deep, any
# error) returns None, and Lark reads the value and reports what is wrong.

class _Decline(Exception):
    pass


_VALUE_RES: list = []
_SINGLE = {"{": "LBRACE", "[": "LSQB", "(": "LPAR", "}": "RBRACE", "]": "RSQB", ")": "RPAR", ",": "SEP",
           ":": "COLON", "<": "ANGLE", "=": "EQUAL"}
# the terminals each place takes, in the order the lexer tries them (single characters last)
_IN_GROUP = ("SHAPE", "INT_LIST", "IOTA_T", "SQ_STRING", "NAME", "STRING", "ARROW", "LE",
             "LBRACE", "LSQB", "LPAR", "RBRACE", "RSQB", "RPAR", "SEP", "COLON", "ANGLE", "EQUAL")
_AFTER_EQUAL = ("SHAPE", "INT_LIST", "SQ_STRING", "NAME", "STRING", "LBRACE", "LSQB", "LPAR")
_VALUE = ("SHAPE", "INT_LIST", "NAME", "STRING", "LBRACE", "LSQB", "LPAR")
_AFTER_VALUE = ("IOTA_T", "LE", "LBRACE", "LSQB", "LPAR", "COLON")
_GROUP_ONLY = ("LBRACE", "LSQB", "LPAR")
_CLOSE_OF = {"LBRACE": "RBRACE", "LSQB": "RSQB", "LPAR": "RPAR"}
_OPEN_CHAR = {"LBRACE": "{", "LSQB": "[", "LPAR": "("}
_SEPS = {"SEP": Sep(","), "LE": Sep("<="), "COLON": Sep(":"), "IOTA_T": Sep("T"), "ARROW": Sep("->")}


def _value_regexes() -> dict:
    if not _VALUE_RES:
        res = {n: _re.compile(terminal_source(n)) for n in ("SHAPE", "INT_LIST", "IOTA_T", "SQ_STRING", "NAME",
                                                            "STRING")}
        res["ARROW"], res["LE"] = _re.compile("->"), _re.compile("<=")
        res[" "] = _re.compile(r"(?:\s++|" + terminal_source("COMMENT") + "|" + terminal_source("LINE_COMMENT") +
                               ")*+")
        _VALUE_RES.append(res)
    return _VALUE_RES[0]


class _ValueReader:
    def __init__(self, text: str):
        self.text, self.pos, self.res = text, 0, _value_regexes()

    def next(self, allowed):
        """(terminal, text, start) of the next token among `allowed`, or ("$END", "", end)."""
        text, res = self.text, self.res
        pos = res[" "].match(text, self.pos).end()
        if pos >= len(text):
            self.pos = pos
            return "$END", "", pos
        for name in allowed:
            if name in _SINGLE.values():
                if _SINGLE.get(text[pos]) == name:
                    self.pos = pos + 1
                    return name, text[pos], pos
                continue
            m = res[name].match(text, pos)
            if m is not None:
                self.pos = m.end()
                return name, m.group(), pos
        raise _Decline

    def peek(self, allowed):
        at = self.pos
        try:
            return self.next(allowed)
        finally:
            self.pos = at

    def atom(self, kind, value):
        if kind == "NAME" or kind == "SQ_STRING":
            return Word(value)
        if kind == "STRING":
            return Quoted(unquote(value), value)
        if kind == "SHAPE":
            try:
                return parse_array_shape(value)
            except ShapeSyntaxError:
                raise _Decline from None
        if kind == "INT_LIST":
            body = value[1:-1].strip()
            return IntList(int(v) for v in body.split(",")) if body else IntList()
        raise _Decline

    def group(self, kind, start):
        """The group opened by `kind` at `start` (its opening read)."""
        close = _CLOSE_OF[kind]
        items = []
        while True:
            t, v, at = self.next(_IN_GROUP)
            if t == close:
                break
            if t in _CLOSE_OF:
                items.append(self.group(t, at))
            elif t in _SEPS:
                items.append(_SEPS[t])
            elif t == "ANGLE":
                items.append(Word(v))
            elif t == "EQUAL":
                items.append(Sep("="))
            elif t in ("RBRACE", "RSQB", "RPAR", "$END"):
                raise _Decline
            elif (t == "NAME" or t == "SQ_STRING") and self.peek(_IN_GROUP)[0] == "EQUAL":
                self.next(_IN_GROUP)
                vt, vv, vat = self.next(_AFTER_EQUAL)
                items.append(KV(v, self.group(vt, vat) if vt in _CLOSE_OF else self.atom(vt, vv)))
            else:
                items.append(self.atom(t, v))
        items = tuple(items)
        depth = nesting_depth(items)
        if depth > MAX_NESTING:
            raise _Decline
        return Group(_OPEN_CHAR[kind], items, self.text[start:self.pos] if kind == "LBRACE" else "", depth)

    def value(self, allowed):
        t, v, at = self.next(allowed)
        return self.group(t, at) if t in _CLOSE_OF else self.atom(t, v)

    def attr_value(self):
        vals = [self.value(_VALUE)]
        while True:
            t, v, at = self.next(_AFTER_VALUE)
            if t == "$END":
                break
            if t in _CLOSE_OF:
                vals.append(self.group(t, at))
                continue
            vals.append(_SEPS[t])
            vals.append(self.value(_GROUP_ONLY if t == "IOTA_T" else _VALUE))
        return vals[0] if len(vals) == 1 else Seq(tuple(vals))


def read_attr_value(text: str):
    """What Lark's parse of TEXT from the grammar's attr_value rule makes, read without Lark; None
    for a text it does not know or that does not read (then Lark reads it)."""
    try:
        return _ValueReader(text).attr_value()
    except (_Decline, RecursionError):
        return None


class SubParseError(Exception):
    """A syntax error inside an attribute value decoded from a coarse token."""

    def __init__(self, line, column, message):
        self.line, self.column, self.message = line, column, message


def _attrs_of(tok, text: str, base: int, out: list):
    for m in ATTR_SPLIT.finditer(text):
        name = m.group(1)
        try:
            value = decode_value(name, m.group(2))
        except NestingError as e:
            raise SubParseError(tok.line, tok.column + base + m.start(2) + e.column - 1, e.message) from None
        except Exception as e:
            lark_errors = sys.modules.get("lark.exceptions")     # (only Lark's parse raises these)
            if lark_errors is None or not isinstance(e, lark_errors.UnexpectedInput):
                raise
            col = tok.column + base + m.start(2) + (getattr(e, "column", 1) or 1) - 1
            if isinstance(e, lark_errors.UnexpectedToken) and str(e.token) in ("]", "}", ")"):
                msg = f"in the value of {name}: unbalanced brackets: unexpected '{e.token}'"
            elif isinstance(e, lark_errors.UnexpectedToken):
                msg = f"in the value of {name}: expected {_describe_expected(e.expected)}, got {_seen(e.token)}"
            else:
                msg = f"in the value of {name}: unexpected input"
            raise SubParseError(tok.line, col, msg) from None
        out.append((name, value, _part(tok, name, base + m.start(1))))


def _operands_of(tok, text: str, base: int, args: list):
    for om in OPERAND_RE.finditer(text):
        name, lit = om.group(1), om.group(2)
        if lit is not None:   # parameter(N), constant(-1.5e3), constant(nan)
            args.append(Arg("literal", text=lit, tok=_part(tok, lit, base + om.start(2), "NUMBER")))
        elif name in ("inf", "nan", "true", "false"):
            args.append(Arg("ref", name=name, tok=_part(tok, name, base + om.start(1))))
        else:
            args.append(Arg("ref", name=name[1:] if name[0] == "%" else name,
                            tok=_part(tok, name, base + om.start(1))))


class LineInstr:
    """An instruction that arrived as one INSTR_LINE token; the builder turns it straight into an
    Instruction, or, when anything is off, into a RawInstr (`to_raw`) for the located-error path."""
    __slots__ = ("tok", "m", "name", "is_root")

    def __init__(self, tok, m):
        self.tok = tok
        self.m = m
        n = m.group(2)
        self.name = n[1:] if n[0] == "%" else n
        self.is_root = m.group(1) is not None

    @property
    def name_tok(self):
        return _part(self.tok, self.m.group(2), self.m.start(2))

    def to_raw(self):
        return _raw_from_line(self.tok, self.m)


def _instruction_line(self, c):
    tok = c[0]
    return LineInstr(tok, _LINE_RE.match(tok))


_LINES_SEP = _re.compile(r"[ \t]*\n\s*")
_line_terminal: list = []       # the grammar's INSTR_LINE, compiled on the first INSTR_LINES token


def _instruction_lines(self, c):
    """An INSTR_LINES token split back into the INSTR_LINE tokens the lexer would have made, each with
    its own line, column and offset."""
    tok = c[0]
    s = str(tok)
    if not _line_terminal:
        _line_terminal.append(_re.compile(terminal_source("INSTR_LINE")))
    line_re = _line_terminal[0]
    out = []
    pos, line, line_start = 0, tok.line, -tok.column + 1     # offset in s where the token's line starts
    n = len(s)
    while pos < n:
        m = line_re.match(s, pos)
        if m is None:           # pragma: no cover - the token is made of such lines
            raise SubParseError(line, pos - line_start + 1, "internal error: an instruction line did not split")
        sub = Tok("INSTR_LINE", m.group(0), tok.start_pos + pos, line, pos - line_start + 1)
        out.append(LineInstr(sub, _LINE_RE.match(sub)))
        end = m.end()
        nl = s.count("\n", pos, end)
        if nl:
            line += nl
            line_start = s.rfind("\n", pos, end) + 1
        if end >= n:
            break
        sep = _LINES_SEP.match(s, end)
        pos = sep.end()
        line += s.count("\n", end, pos)
        line_start = s.rfind("\n", end, pos) + 1
    return out


def _raw_from_line(tok, m):
    s = str(tok)
    shape_tok = _part(tok, m.group(3), m.start(3), "SHAPE")
    if shape_tok.value[0] == "(":
        try:
            shape = shape_text_cached(shape_tok.value)
        except ShapeSyntaxError as e:
            raise ShapeTokenError(shape_tok, e) from None
    else:
        shape = _shape(shape_tok)
    args: list = []
    _operands_of(tok, m.group(5), m.start(5), args)
    attrs: list = []
    _attrs_of(tok, s[m.end():], m.end(), attrs)
    return RawInstr(m.group(1) is not None, _part(tok, m.group(2), m.start(2)), shape, shape_tok,
                    _part(tok, m.group(4), m.start(4)), args, attrs)


def _attr_from_token(tok):
    out: list = []
    _attrs_of(tok, str(tok), 0, out)
    return out[0]


def _instruction_fast(self, c):
    head = c[0]
    s = str(head)
    m = _HEAD_RE.match(s)
    shape_tok = _part(head, m.group(3), m.start(3), "SHAPE")
    args, attrs = [], []
    for x in c[1:]:
        if x is None:
            continue
        if isinstance(x, Arg):
            args.append(x)
        elif isinstance(x, _TOKENS):
            if x.type == "OPERANDS":
                _operands_of(x, str(x), 0, args)
            elif x.type == "ATTR":
                attrs.append(_attr_from_token(x))
        else:
            attrs.append(x)
    return RawInstr(m.group(1) is not None, _part(head, m.group(2), m.start(2)), _shape(shape_tok), shape_tok,
                    _part(head, m.group(4), m.start(4)), args, attrs)


def _instruction_general(self, c, _orig=_Reductions.instruction):
    c = [_attr_from_token(x) if isinstance(x, _TOKENS) and x.type == "ATTR" else x for x in c]
    return _orig(self, c)


def _header(self, c):
    name, colon = c[0], c[1]
    if colon is not None and (colon.line != name.line or colon.column != name.column + len(name)):
        # XLA reads `HloModule name:` (a name token ends with its colon) but not a detached ':'
        raise SubParseError(colon.line, colon.column, "unexpected ':' after the module name "
                             "(XLA allows a ':' only right after the name, as in `HloModule m:`)")
    return ("header", name, [_attr_from_token(a) if isinstance(a, _TOKENS) else a for a in c[2:] if a is not None])


def _attr_value(self, c):
    vals = [_val(x) for x in c]
    return vals[0] if len(vals) == 1 else Seq(tuple(vals))


_COMMENT_RE = _re.compile(r"/\*.*?\*/", _re.S)
_PARAM_RE = _re.compile(r"[ \t]*(%?[\w.\-]+):[ \t]*")


def _signature_fast(self, c):
    tok = c[0]
    s = str(tok)
    params = []
    result = None
    if len(c) == 1:            # SIGNATURE: "(params) -> result" in one token
        close = s.find(")")
        if close < 0 or s.find("(", 1, close) >= 0:     # a tuple parameter: count the parentheses
            close = _matching_paren(s)
        result_text = s[close + 1:].strip()[2:].strip()
        try:
            result = shape_text_cached(result_text)
        except ShapeSyntaxError as e:
            raise ShapeTokenError(_part(tok, result_text, len(s) - len(result_text), "SHAPE"), e) from None
        s = s[:close + 1]
    inner = s[1:-1]
    simple = _simple_params(inner, tok)
    if simple is not None:
        return ("sig", simple, result if result is not None else _shape(c[-1]))
    depth, start = 0, 0
    pieces = []
    for k, ch in enumerate(inner):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            pieces.append((start, inner[start:k]))
            start = k + 1
    if inner[start:].strip():
        pieces.append((start, inner[start:]))
    for off, piece in pieces:
        if "/*" in piece:
            piece = _COMMENT_RE.sub(lambda cm: " " * len(cm.group(0)), piece)
        m = _PARAM_RE.match(piece)
        name = m.group(1)
        shape_text = piece[m.end():].strip()
        ptok = _part(tok, name, 1 + off + m.start(1))
        try:
            shape = shape_text_cached(shape_text)
        except ShapeSyntaxError as e:
            raise ShapeTokenError(_part(tok, shape_text, 1 + off + m.end(), "SHAPE"), e) from None
        params.append((name[1:] if name[0] == "%" else name, shape, ptok))
    return ("sig", params, result if result is not None else _shape(c[-1]))


_SIMPLE_PARAM = _re.compile(r"[ \t]*(%?[\w.\-]+):[ \t]*([a-z][a-z0-9]*\[[^\[\](){}\n]*\](?:\{[^{}()\[\]\n]*\})?)"
                           r"[ \t]*(?:,|\Z)")
_BLANK = _re.compile(r"[ \t]*\Z")


def _simple_params(inner: str, tok):
    """The parameters of a list of plain `name: array-shape` items (what the general split below
    makes of them), or None for anything else (tuples, tiled layouts, comments)."""
    params = []
    pos, n = 0, len(inner)
    while pos < n:
        if _BLANK.match(inner, pos):
            break
        m = _SIMPLE_PARAM.match(inner, pos)
        if m is None:
            return None
        name, shape_text = m.group(1), m.group(2)
        try:
            shape = shape_text_cached(shape_text)
        except ShapeSyntaxError:
            return None            # the general split reports it
        params.append((name[1:] if name[0] == "%" else name, shape, _part(tok, name, 1 + m.start(1))))
        pos = m.end()
    return params


_SIG_NAME = _re.compile(r"(%?[A-Za-z_][\w.\-]*+):", _re.ASCII)
_SIGNATURES: dict = {}      # a signature's text cut at its parameter names -> (shapes, result) or False


def _signature_of(tok):
    """_signature_fast of a SIGNATURE token, kept by its text cut at the parameter names (`_SIG_NAME`:
    maximal ASCII names before a ':'): a dump repeats signatures that differ only in them.  An entry
    is kept when the parameters _signature_fast finds are those names at those places; another
    signature cut into the same pieces then reads the same with its own names, each a run of name
    characters between the same characters."""
    parts = _SIG_NAME.split(tok)
    key = tuple(parts[::2])
    hit = _SIGNATURES.get(key)
    if hit is None:
        sig = _signature_fast(_FAST, [tok])
        if len(_SIGNATURES) >= 1 << 14:
            _SIGNATURES.clear()
        _SIGNATURES[key] = _signature_entry(parts, sig, tok)
        return sig
    if hit is False:
        return _signature_fast(_FAST, [tok])
    shapes, result = hit
    line, column, off = tok.line, tok.column, len(parts[0])
    params = []
    for k in range(len(shapes)):
        name = parts[2 * k + 1]
        params.append((name[1:] if name[0] == "%" else name, shapes[k], Pos(name, line, column + off)))
        off += len(name) + 1 + len(parts[2 * k + 2])
    return ("sig", params, result)


def _signature_entry(parts, sig, tok):
    """(the parameters' shapes, the result) when the parameters of `sig` are the names of `parts` at
    their places, else False."""
    params = sig[1]
    if len(params) != len(parts) // 2:
        return False
    off = len(parts[0])
    for k, (name, _, ptok) in enumerate(params):
        spelled = parts[2 * k + 1]
        if ptok.value != spelled or ptok.line != tok.line or ptok.column != tok.column + off or \
                name != (spelled[1:] if spelled[0] == "%" else spelled):
            return False
        off += len(spelled) + 1 + len(parts[2 * k + 2])
    return tuple(shape for _, shape, _ in params), sig[2]


def _matching_paren(s: str) -> int:
    depth = 0
    for k, ch in enumerate(s):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return k
    return len(s) - 1


@lru_cache(maxsize=16384)
def shape_text_cached(text):
    from ..ir.shape import parse_shape_text
    return parse_shape_text(text)


_Reductions.signature_fast = _signature_fast
_Reductions.instruction_line = _instruction_line
_Reductions.instruction_lines = _instruction_lines
_Reductions.instruction_fast = _instruction_fast
_Reductions.instruction = _instruction_general
_Reductions.header = _header
_Reductions.attr_value = _attr_value


# ----------------------------------------------------------------------------- fast scanner
#
# A module in the common form -- a header and sections (`_scan_prefix` reads their common form,
# Lark the rest), then computations whose heads are `[ENTRY ]name (signature) -> shape {` (or
# `name {`) and whose bodies are instruction lines the grammar's INSTR_LINE matches, one a line -- is
# read here without Lark's parser: the same tokens (text, line, column, offset) the lexer would have
# made go to the same transformer methods, so the raw records, and everything built from them, are
# those of the Lark path.  A line in the general form that fills its line is parsed on its own (by
# `_literal_line` for a constant with an array literal, else by Lark).  Anything else (a comment
# between instructions, an execution thread, any error) makes `scan_module` return None, and the
# whole text takes the Lark path, which reports every error exactly as before.

_COMP_HEAD = _re.compile(r"(ENTRY[ \t]+)?(%?[A-Za-z_][\w.\-]*)[ \t]*(?=[({])")
_FIRST_COMP = _re.compile(r"(?m)^(?:ENTRY[ \t]+)?%?[A-Za-z_][\w.\-]*[ \t]*[({]")
_WS = _re.compile(r"\s*")
_NOT_NAMES = frozenset({"ENTRY", "ROOT", "HloModule", "FileNames", "FunctionNames", "FileLocations",
                        "StackFrames"})
_scan_terminals: list = []


def _scanner_regexes():
    if not _scan_terminals:
        # a line of a body: white space, then an INSTR_LINE ending its line (or followed by '}')
        _scan_terminals.append(_re.compile(r"\s*+(" + terminal_source("INSTR_LINE") + r")[ \t]*+(?=[\n}])"))
        _scan_terminals.append(_re.compile(terminal_source("SIGNATURE")))
    return _scan_terminals


class _Cursor:
    """Offset, line and the offset where that line starts, moved over the text."""
    __slots__ = ("text", "pos", "line", "line_start")

    def __init__(self, text, pos):
        self.text, self.pos = text, pos
        self.line = text.count("\n", 0, pos) + 1
        self.line_start = text.rfind("\n", 0, pos) + 1

    def move(self, end):
        nl = self.text.count("\n", self.pos, end)
        if nl:
            self.line += nl
            self.line_start = self.text.rfind("\n", self.pos, end) + 1
        self.pos = end

    def token(self, type_, end):
        tok = Tok(type_, self.text[self.pos:end], self.pos, self.line, self.pos - self.line_start + 1)
        self.move(end)
        return tok

    def skip_ws(self):
        self.move(_WS.match(self.text, self.pos).end())


class LineToken(str):
    """The text of one instruction line with its position: what the lexer's INSTR_LINE token would
    hold (line, column, offset), made without Lark's Token constructor."""
    type = "INSTR_LINE"


def _line_token(value, start_pos, line, column):
    tok = LineToken(value)
    tok.start_pos, tok.line, tok.column = start_pos, line, column
    return tok


def _scan_body(cur: _Cursor, body_re) -> list | None:
    """The instruction lines of a body after its '{', up to and over its '}'; None when the body is
    not in the common form."""
    text = cur.text
    out = []
    append = out.append
    pos, line, line_start = cur.pos, cur.line, cur.line_start
    count, rfind, match, line_match = text.count, text.rfind, body_re.match, _LINE_RE.match
    while True:
        m = match(text, pos)
        if m is None:
            cur.pos, cur.line, cur.line_start = pos, line, line_start
            cur.skip_ws()
            if text.startswith("}", cur.pos):
                cur.move(cur.pos + 1)
                return out
            instr = _scan_general(cur)
            if instr is None:
                return None
            append(instr)
            pos, line, line_start = cur.pos, cur.line, cur.line_start
            continue
        start, end = m.start(1), m.end(1)
        nl = count("\n", pos, start)
        if nl:
            line += nl
            line_start = rfind("\n", pos, start) + 1
        tok = _line_token(m.group(1), start, line, start - line_start + 1)
        append(LineInstr(tok, line_match(tok)))
        if "\n" in tok:
            line += tok.count("\n")
            line_start = rfind("\n", start, end) + 1
        pos = m.end()


_GENERAL_HEAD = _re.compile(r"(?:ROOT[ \t]+)?(%?[A-Za-z_][\w.\-]*)[ \t]*=")


def _scan_general(cur: _Cursor):
    """An instruction in the general form that fills the rest of its line, parsed by Lark on its own
    (a slice of the text, lexed from the cursor's line and column); None for anything else."""
    text = cur.text
    m = _GENERAL_HEAD.match(text, cur.pos)
    if m is None or m.group(1) in _NOT_NAMES:
        return None
    eol = text.find("\n", cur.pos)
    if eol < 0:
        return None
    after = _WS.match(text, eol).end()
    if text.startswith(",", after):          # the instruction goes on on the next line
        return None
    instr = _literal_line(text, cur, eol)
    if instr is not None:
        cur.move(eol)
        return instr
    raw = _parse_slice(text, cur, eol)
    if not isinstance(raw, RawModule) or len(raw.computations) != 1 or not raw.computations[0].synthesized:
        return None
    instrs = raw.computations[0].instrs
    if len(instrs) != 1 or not isinstance(instrs[0], (RawInstr, LineInstr)) or instrs[0].name == "_":
        return None
    cur.move(eol)
    return instrs[0]


_BLANKS = _re.compile(r"[ \t]*")
_LITERAL_TERMINALS = ("INSTR_HEAD", "LITERAL_ARRAY", "ATTR")
_PREFIX_TERMINALS = ("ATTR", "SECTION_ENTRY")
_compiled_terminals: dict = {}


def _terminals(names: tuple) -> list:
    """The grammar's terminals NAMES, compiled once."""
    out = _compiled_terminals.get(names)
    if out is None:
        out = _compiled_terminals[names] = [_re.compile(terminal_source(n)) for n in names]
    return out


def _literal_line(text: str, cur: _Cursor, end: int):
    """The record Lark's parse of text[cur.pos:end] makes of the common general-form line
    `name = shape opcode({array literal}), attr=value...` (a constant with an array literal), read
    without Lark's parser: the lexer's tokens there (INSTR_HEAD, LITERAL_ARRAY, ')', then ATTR tokens
    up to the end) given to the same transformer methods; None for any other line (then Lark parses
    it)."""
    head_re, literal_re, attr_re = _terminals(_LITERAL_TERMINALS)
    h = head_re.match(text, cur.pos, end)
    if h is None:
        return None
    pos = _BLANKS.match(text, h.end(), end).end()
    if not text.startswith("{", pos):
        return None
    lit = literal_re.match(text, pos, end)
    if lit is None:
        return None
    close = _BLANKS.match(text, lit.end(), end).end()
    if not text.startswith(")", close):
        return None
    line, line_start = cur.line, cur.line_start

    def token(type_, start, stop):
        return Tok(type_, text[start:stop], start, line, start - line_start + 1)
    t = _FAST
    children = [token("INSTR_HEAD", cur.pos, h.end()), t.arg([token("LITERAL_ARRAY", pos, lit.end())])]
    pos = close + 1
    while True:
        pos = _BLANKS.match(text, pos, end).end()
        if pos >= end:
            break
        a = attr_re.match(text, pos, end) if text.startswith(",", pos) else None
        if a is None:
            return None
        children.append(token("ATTR", pos, a.end()))
        pos = a.end()
    return _instruction_fast(t, children)


def _parse_slice(text: str, cur: _Cursor, end: int):
    """Lark's parse of text[cur.pos:end] from rule `start`, its tokens placed where they are in the
    whole text.  Lark's own slice input counts the lines before the slice on every call; this
    starts its line counter at the cursor instead (Lark's lexer-state classes: where they are not
    as expected, the caller's whole-text parse takes over)."""
    from lark.lexer import LexerState, LexerThread, LineCounter
    from lark.utils import TextSlice
    lark, t = _parser()
    t.text = text
    ctr = LineCounter("\n")
    ctr.char_pos, ctr.line, ctr.column, ctr.line_start_pos = cur.pos, cur.line, cur.pos - cur.line_start + 1, \
        cur.line_start
    front = lark.parser
    thread = LexerThread(front.lexer, LexerState(TextSlice(text, cur.pos, end), ctr))
    return front.parser.parse(thread, "start")


def _scan_computation(cur: _Cursor, line_re, sig_re, t, fused_re=None, templates=None) -> RawComputation | None:
    """The computation at the cursor; `templates` the bodies read so far that a later one may be read
    by (`_read_body`)."""
    text = cur.text
    m = _COMP_HEAD.match(text, cur.pos)
    if m is None or m.group(2) in _NOT_NAMES:
        return None
    is_entry = m.group(1) is not None
    cur.move(m.start(2))
    name_tok = cur.token("NAME", m.end(2))
    cur.move(m.end())
    params = result = None
    if text.startswith("(", cur.pos):
        sm = sig_re.match(text, cur.pos)
        if sm is None:
            return None
        _, params, result = _signature_of(cur.token("SIGNATURE", sm.end()))
        cur.skip_ws()
    if not text.startswith("{", cur.pos):
        return None
    cur.move(cur.pos + 1)
    fast = _read_body(cur, fused_re, templates) if fused_re is not None else None
    if fast is not None:
        return RawComputation(is_entry, name_tok, params, result, None, None, fast)
    instrs = _scan_body(cur, line_re)
    if instrs is None:
        return None
    return RawComputation(is_entry, name_tok, params, result, instrs, None)


_MODULE_HEAD = _re.compile(r"HloModule[ \t]+([A-Za-z_][\w.\-]*)(?=[ \t]*,|\s)")
_SECTION_HEAD = _re.compile(r"(?:FileNames|FunctionNames|FileLocations|StackFrames)(?=\s)")


def _scan_prefix(text: str, end: int, t) -> RawModule | None:
    """The header and stack-frame sections before the first computation (at `end`) read without
    Lark's parser, in their common form: `HloModule name` with `, attr=value` attributes the
    grammar's ATTR token takes whole, then sections whose entries are SECTION_ENTRY tokens.  The
    tokens (text, line, column, offset) are those the lexer makes, given to the same transformer
    methods; None for anything else (a comment, a ':' after the name, an attribute the ATTR token
    does not take...): then Lark parses the prefix."""
    attr_re, entry_re = _terminals(_PREFIX_TERMINALS)
    cur = _Cursor(text, 0)
    cur.skip_ws()
    header = None
    m = _MODULE_HEAD.match(text, cur.pos, end)       # (end: Lark reads the prefix alone)
    if m is not None:
        cur.move(m.start(1))
        name = cur.token("NAME", m.end(1))
        attrs = []
        while True:
            cur.skip_ws()
            if not text.startswith(",", cur.pos):
                break
            am = attr_re.match(text, cur.pos, end)
            if am is None:
                return None
            attrs.append(cur.token("ATTR", am.end()))
        _, name, attrs = _header(t, [name, None, *attrs])
        header = (name, attrs)
    sections = []
    while cur.pos < end:
        m = _SECTION_HEAD.match(text, cur.pos, end)
        if m is None:
            return None
        children = [cur.token("SECTION_NAME", m.end())]
        while True:
            cur.skip_ws()
            em = entry_re.match(text, cur.pos, end)
            if em is None:
                break
            children.append(cur.token("SECTION_ENTRY", em.end()))
        _, sname, entries = t.section(children)
        sections.append((sname, entries))
    if cur.pos != end or (header is None and not sections):
        return None
    return RawModule(header, sections, [])


def scan_module(text: str) -> RawModule | None:
    """The raw module of a text in the common form (see above), or None: then parse it with Lark."""
    first = _FIRST_COMP.search(text)
    if first is None:
        return None
    t = _FAST
    line_re, sig_re = _scanner_regexes()
    fused_re = fused_regexes()
    t.text = text
    try:
        header, sections = None, []
        prefix = text[:first.start()]
        if prefix.strip():
            head = _scan_prefix(text, first.start(), t)
            if head is None:
                lark, lark_t = _parser()
                lark_t.text = text
                head = lark.parse(prefix, start="start")
            if not isinstance(head, RawModule) or head.computations:
                return None
            header, sections = head.header, head.sections
        cur = _Cursor(text, first.start())
        comps = []
        templates: dict = {}
        while cur.pos < len(text):
            comp = _scan_computation(cur, line_re, sig_re, t, fused_re, templates)
            if comp is None:
                return None
            comps.append(comp)
            cur.skip_ws()
        return RawModule(header, sections, comps)
    except Exception:        # the Lark path reports it, located
        return None
    finally:
        t.text = text


# ----------------------------------------------------------------------------- one-pass bodies
#
# The common body -- every line one instruction the grammar's INSTR_LINE matches, from its start to
# its end -- is read with one regex per line, made of the INSTR_LINE pattern itself with capture
# groups around its parts (ROOT, name, shape, opcode, operands, attributes), so a line is accepted
# exactly when the lexer would have made an INSTR_LINE token of it, and the builder makes the
# Instruction straight from the match.  The attributes part of the pattern is the costly one, and
# an optimized dump repeats the same attribute texts many times: the line regex takes the rest of
# the line after the operands as it is, and whether that rest is INSTR_LINE's attributes is asked of
# the attributes part once per distinct text.  A line in the general form is parsed by Lark on its
# own, as `_scan_body` does; anything else (a comment, two instructions on a line, a '}' after an
# instruction, an error) leaves the body to `_scan_body`.

_fused: list = []


def fused_regexes():
    """(line regex, attributes regex, whole-line regex) made of the grammar's INSTR_LINE (see
    fused_pattern), or None when its pattern is not made of the parts expected (then no body is read
    this way).  The line regex's groups: 1 the instruction with the rest of its line, 2 ROOT, 3 the
    name as spelled, 4 the shape text, 5 the opcode, 6 the operands text (between the parentheses),
    7 the rest of the line after the ')'; the attributes regex fullmatches such a rest when it is
    INSTR_LINE's attributes (group 1) and white space; the whole-line regex is INSTR_LINE with the
    same groups (7: the attributes), for an instruction over several lines."""
    if not _fused:
        parts = fused_pattern(terminal_source("INSTR_LINE"))
        if parts is None:
            _fused.append(None)
        else:
            head, attrs, lookahead = parts
            _fused.append((_re.compile("[ \t]*+(" + head + "([^\n]*))\n"), _re.compile(attrs + "[ \t]*"),
                           _re.compile("[ \t]*+(" + head + attrs + lookahead + ")[ \t]*+\n")))
    return _fused[0]


_FUSED_PARTS = ("(?:ROOT[ \t]+)?%?[A-Za-z_][\\w.\\-]*[ \t]*=[ \t]*", "[ \t]+[a-z][\\w\\-]*\\(",
                "[ \t]*\\)(?:,[ \t]*(?:metadata=", ")*(?=[ \t]*(?:\n|\\}|\\/\\/|\\/\\*|$))")


def fused_pattern(instr_line: str, grouped: bool = True) -> tuple[str, str, str] | None:
    """INSTR_LINE's pattern cut into (the instruction up to its operands' ')', its attributes, the
    lookahead after them), with capture groups around its parts; with `grouped` False the same cut
    without them, whose concatenation is `instr_line` itself (tests/test_fused_body.py)."""
    head, opcode, close, tail = _FUSED_PARTS
    if not instr_line.startswith(head) or not instr_line.endswith(tail) or \
            any(instr_line.count(p) != 1 for p in (opcode, close)):
        return None
    i_op = instr_line.index(opcode)
    i_close = instr_line.index(close)
    if i_op > i_close:
        return None

    def g(part):
        return "(" + part + ")" if grouped else part
    shape = instr_line[len(head):i_op]
    operands = instr_line[i_op + len(opcode):i_close]
    attrs = instr_line[i_close + len("[ \t]*\\)"):len(instr_line) - len(tail)] + ")*"
    instruction = ((g("ROOT[ \t]+") if grouped else "(?:ROOT[ \t]+)") + "?" + g("%?[A-Za-z_][\\w.\\-]*") +
                   "[ \t]*=[ \t]*" + g(shape) + "[ \t]+" + g("[a-z][\\w\\-]*") + "\\(" +
                   g(operands + "[ \t]*") + "\\)")
    return instruction, g(attrs), tail[len(")*"):]


class FastBody:
    """The lines of a body read in one pass: the line regex's match of each instruction line (or,
    for a line in the general form, the record Lark made of it), its attributes text, its line
    number and the offset where its line starts; `text` the whole text; `template` the BodyTemplate
    made of it (or None)."""
    __slots__ = ("text", "matches", "attrs", "lines", "starts", "template", "made", "template_key",
                 "template_end")

    def __init__(self, text, matches, attrs, lines, starts):
        self.text, self.matches, self.attrs, self.lines, self.starts = text, matches, attrs, lines, starts
        self.template = None
        self.made = False       # whether `template` was asked for (made when a later body has its key)
        self.template_key = self.template_end = None    # its key, the offset of its '}' (_body_key)

    def line_instrs(self) -> list:
        """The records `_scan_body` makes of the same lines (for the builder's general path)."""
        return [line_instr(m, line, ls) if type(m) is _re.Match else m
                for m, line, ls in zip(self.matches, self.lines, self.starts)]


def line_instr(m, line: int, line_start: int) -> LineInstr:
    """The LineInstr `_scan_body` makes of the line the line regex matched as `m`."""
    m = fused_regexes()[2].match(m.string, m.start())
    start = m.start(1)
    tok = _line_token(m.group(1), start, line, start - line_start + 1)
    return LineInstr(tok, _LINE_RE.match(tok))


_BLANK_LINE = _re.compile(r"[ \t]*\n")
_CLOSE_LINE = _re.compile(r"[ \t]*\}")
_ATTR_TEXTS: dict = {}        # the rest of a line after the operands -> its attributes text, or False


def _fast_body(cur: _Cursor, regexes) -> FastBody | None:
    """The body after its '{' read line by line, up to and over its '}' (a line of its own); None
    (the cursor unmoved) when any line is not one instruction."""
    text = cur.text
    pos = cur.pos
    nl = text.find("\n", pos)
    if nl < 0 or text[pos:nl].strip():          # the instructions start on the line after '{'
        return None
    line_re, attrs_re, whole_re = regexes
    pos = nl + 1
    line = cur.line + 1
    matches, attrs, lines, starts = [], [], [], []
    add_m, add_a, add_l, add_s = matches.append, attrs.append, lines.append, starts.append
    match, count, known = line_re.match, text.count, _ATTR_TEXTS
    while True:
        m = match(text, pos)
        if m is not None:
            rest = m.group(7)
            at = known.get(rest)
            if at is None:
                a = attrs_re.fullmatch(rest)
                at = a.group(1) if a is not None else False
                if len(known) >= 1 << 16:
                    known.clear()
                known[rest] = at
            if at is not False:
                add_m(m)
                add_a(at)
                add_l(line)
                add_s(pos)
                pos = m.end()
                line += 1
                continue
            m = whole_re.match(text, pos)       # an instruction over several lines (a string in it)
            if m is not None:
                add_m(m)
                add_a(m.group(7))
                add_l(line)
                add_s(pos)
                pos = m.end()
                line += count("\n", m.start(1), pos)
                continue
        b = _BLANK_LINE.match(text, pos)
        if b is not None:
            pos = b.end()
            line += 1
            continue
        cur.pos, cur.line, cur.line_start = pos, line, pos
        c = _CLOSE_LINE.match(text, pos)
        if c is not None:
            if not matches:
                return None
            cur.move(c.end())
            return FastBody(text, matches, attrs, lines, starts)
        cur.skip_ws()
        instr = _scan_general(cur)       # (a record of the Lark path, which the builder builds itself)
        if instr is None or not text.startswith("\n", cur.pos):
            return None
        add_m(instr)
        add_a(None)
        add_l(line)
        add_s(pos)
        pos = cur.pos + 1
        line = cur.line + 1


# ----------------------------------------------------------------------------- body templates
#
# An optimized dump repeats computations that differ only in their instructions' names (each layer's
# fused computations, reductions' and sorts' comparators...).  A body's text up to the line of its
# '}' is cut at its %-names (`NAME_SPLIT`: maximal runs of ASCII name characters after a '%'): the
# pieces between them are the body's key.  A later body with the same key whose names fit is read
# by the template of the first: a body read line by line, every line a plain match of the line
# regex (or a constant in the general form) right after the one before, each defining a %-name,
# every operand a %-name defined on a line above (`body_template`).  The names fit when each name
# defined is a new one (`_build_templated` checks that they differ) and each operand is the very name
# defined at the template's place; the other %-names (called computations, control predecessors, in
# the attributes) may differ: the builder then reads the attributes of their lines anew.  Every line of such a body is then a line of the template with names changed;
# names are maximal runs there, bounded by characters (blanks, '=', ',', ')', '%') that no name
# holds, so the line regex matches it with the same groups, names apart, and the attributes text
# the same: the records of the body are the template's with its own names, and its lines count as
# the template's do.  The builder builds such a body from the instructions of the template's own
# body (builder.py `_build_templated`) when that body built without a finding; else, as for anything
# it does not take, from its lines (`TemplateBody.lines_body`, the line-by-line reading).

NAME_SPLIT = _re.compile(r"%([A-Za-z_][\w.\-]*+)", _re.ASCII)
_TEMPLATE_NAME = _re.compile(r"[A-Za-z_][\w.\-]*+", _re.ASCII)
_MAX_TEMPLATE_LINES = 2000      # (a body this long is hardly repeated)
_TEMPLATES_PER_KEY = 2
TEMPLATES = True                # (tests turn templates off to compare both readings)


class BodyTemplate:
    """Where the names of a template's body are, by their order in its text: `defs` those it defines,
    `refs` the operands with the number of the definition each names, `fixed` the others (in the
    attributes: called computations, control predecessors, names in strings) with their `names` and
    the number of the line of each (`fixed_lines`); `nlines` its number of lines."""
    __slots__ = ("defs", "refs", "targets", "fixed", "names", "fixed_lines", "nlines")

    def __init__(self, defs, refs, targets, fixed, names, fixed_lines, nlines):
        self.defs, self.refs, self.targets, self.fixed, self.names = defs, refs, targets, fixed, names
        self.fixed_lines, self.nlines = fixed_lines, nlines


def _def_slots(body: FastBody, line_re) -> tuple | None:
    """({offset of a defined name's '%': its number}, {offset of an operand's '%': the number of the
    definition it names}) of a body every line of which a template takes, else None."""
    matches, text, starts = body.matches, body.text, body.starts
    defs: dict = {}
    def_at: dict = {}      # (the offsets of the names' '%')
    ref_at: dict = {}
    end = starts[0]
    name_full = _TEMPLATE_NAME.fullmatch
    for i, m in enumerate(matches):
        if starts[i] != end:
            return None
        if type(m) is not _re.Match:        # a line in the general form: a constant, no other name in it
            end = text.find("\n", starts[i]) + 1
            h = _GENERAL_HEAD.match(text, _BLANKS.match(text, starts[i]).end())
            if not isinstance(m, RawInstr) or m.opcode != "constant" or h is None or \
                    h.group(1) != "%" + m.name or name_full(m.name) is None or "%" in text[h.end(1):end]:
                return None
            def_at[h.start(1)] = defs[m.name] = len(defs)
            continue
        if m.re is not line_re:
            return None
        end = m.end()
        spelled = m.group(3)
        if spelled[0] != "%" or name_full(spelled, 1) is None:
            return None
        ops = m.group(6)
        if m.group(5) not in ("parameter", "constant") and ops.strip():
            if "/*" in ops:
                return None
            offset = m.start(6)
            for item in ops.split(","):
                j = item.find("%")
                name = item[j + 1:].rstrip()
                k = defs.get(name)
                if j < 0 or item[:j].strip() or k is None or name_full(name) is None:
                    return None
                ref_at[offset + j] = k
                offset += len(item) + 1
        def_at[m.start(3)] = defs[spelled[1:]] = len(defs)
    return (def_at, ref_at) if end == body.template_end else None


def body_template(body: FastBody, line_re) -> BodyTemplate | None:
    """The template of a body read line by line (see above), or None where a line is not one it
    takes: not a plain match of the line regex `line_re` right after the line before, a name without
    '%' or with other than ASCII characters, an operand that is not a name defined above it, a
    comment among the operands."""
    if len(body.matches) > _MAX_TEMPLATE_LINES or body.template_key is None:
        return None
    slots = _def_slots(body, line_re)
    if slots is None:
        return None
    def_at, ref_at = slots
    defs, refs, targets, fixed, names, lines = [], [], [], [], [], []
    starts = body.starts
    for k, m in enumerate(NAME_SPLIT.finditer(body.text, starts[0], body.template_end)):
        at = m.start()
        if at in def_at:
            defs.append(k)
        elif at in ref_at:
            refs.append(k)
            targets.append(ref_at[at])
        else:
            fixed.append(k)
            names.append(m.group(1))
            lines.append(bisect_right(starts, at) - 1)
    if len(defs) != len(def_at) or len(refs) != len(ref_at):
        return None
    return BodyTemplate(tuple(defs), tuple(refs), tuple(targets), tuple(fixed), names, tuple(lines),
                        len(body.matches))


def _body_key(text: str, start: int):
    """(the key of the body whose first line starts at `start`: its pieces between %-names up to the
    '}' that starts a line, its %-names, the offset of that '}'), or None when no line starts with '}'
    (or the body is too long to be a template)."""
    close = text.find("\n}", start - 1)
    if close < start or text.count("\n", start, close) >= _MAX_TEMPLATE_LINES:
        return None
    parts = NAME_SPLIT.split(text[start:close + 1])
    return tuple(parts[::2]), parts[1::2], close + 1


def _names_fit(template: BodyTemplate, names: list):
    """(the names a body defines, its other names or None where they are the template's) when its
    names fit the template (see above), else None."""
    defs = [names[k] for k in template.defs]
    if [names[k] for k in template.refs] != [defs[j] for j in template.targets]:
        return None
    fixed = [names[k] for k in template.fixed]
    return defs, (None if fixed == template.names else fixed)


class TemplateBody:
    """A body read by a template: the `names` it defines in the template's order, its `fixed` names
    (None where they are the template's), its first line `line`; where the body starts (after its
    '{') to read it again line by line (`lines_body`)."""
    __slots__ = ("text", "template", "names", "fixed", "line", "_at", "_lines")

    def __init__(self, text, template, names, fixed, line, at):
        self.text, self.template, self.names, self.fixed, self.line, self._at = text, template, names, fixed, line, at
        self._lines = None

    def lines_body(self) -> FastBody:
        """The FastBody the line-by-line reading makes of the same body."""
        if self._lines is None:
            cur = _Cursor.__new__(_Cursor)
            cur.text, (cur.pos, cur.line, cur.line_start) = self.text, self._at
            self._lines = _fast_body(cur, fused_regexes())
        return self._lines

    def line_instrs(self) -> list:
        return self.lines_body().line_instrs()


def _read_body(cur: _Cursor, regexes, templates):
    """The body after its '{', up to and over its '}': by the template of an earlier body with the
    same key (`templates`: key -> those bodies) where the names fit, else line by line (`_fast_body`)."""
    if templates is None or not TEMPLATES:
        return _fast_body(cur, regexes)
    text = cur.text
    pos = cur.pos
    nl = text.find("\n", pos)
    key = None
    if nl >= 0 and not text[pos:nl].strip():
        key = _body_key(text, nl + 1)
    if key is not None:
        pieces, names, close = key
        for seen in templates.get(pieces, ()):
            if not seen.made:
                seen.template, seen.made = body_template(seen, regexes[0]), True
            template = seen.template
            fit = _names_fit(template, names) if template is not None else None
            if fit is not None:
                body = TemplateBody(text, template, fit[0], fit[1], cur.line + 1, (pos, cur.line, cur.line_start))
                cur.pos, cur.line, cur.line_start = close, cur.line + 1 + template.nlines, close
                cur.move(close + 1)
                return body
    body = _fast_body(cur, regexes)
    if body is not None and key is not None:
        seen = templates.setdefault(key[0], [])
        if len(seen) < _TEMPLATES_PER_KEY:       # (bodies with the same key, their operands wired otherwise)
            body.template_key, body.template_end = key[0], key[2]
            seen.append(body)
    return body
