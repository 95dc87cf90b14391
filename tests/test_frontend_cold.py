"""The front end's first-call work: `frontend.warm_up()` (called before forking), and the Lark-free
readings of the common module prefix, which must give exactly the records Lark's parse gives."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hlo_cli.errors import HloError
from hlo_cli.parser import frontend
from tests.test_fast_scanner import _outcome
from tests.test_fused_body import _deep, _lark_value

ROOT = Path(__file__).resolve().parent.parent


def test_warm_up_leaves_nothing_for_the_first_parse_to_compile():
    """After warm_up() the scanner's regexes and Lark's tables are there: a fresh process that warms
    up and then parses reads a module in the one-pass form without compiling those again."""
    code = ("from hlo_cli.parser import frontend, parse\n"
            "frontend.warm_up()\n"
            "regexes = (frontend._scanner_regexes(), frontend.fused_regexes(), frontend._parser())\n"
            "assert len(frontend._compiled_terminals) == 2 and frontend._plain\n"
            "m = parse('HloModule m\\nENTRY e {\\n  p = f32[2]{0} parameter(0)\\n  ROOT a = f32[2]{0} add(p, p)\\n}\\n')\n"
            "assert (frontend._scanner_regexes(), frontend.fused_regexes(), frontend._parser()) == regexes\n"
            "print(m.entry_computation.root_instruction.opcode)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "add"


# ----------------------------------------------------------------------------- plain groups


_SHAPES = st.sampled_from(["f32[2]{0}", "f32[]", "s32[4,8]{1,0}", "bf16[3,<=5]{1,0}", "pred[7]", "f16[2]<1>",
                           "f32[8,128]{1,0:T(8,128)}", "token[]", "u8[0]{0}"])
_WORDS = st.sampled_from(["true", "false", "a", "%b.1", "x-y", "3x3", "-1", "f32", "1e-05", "b01f_01io->b01f",
                          "kLoop", "a>b", "T", "Tx"])
_BLANKS = st.sampled_from(["", " ", "  ", "\n", " /* c */ ", "/*index=5*/"])


@st.composite
def _plain_value(draw, depth=0):
    """A `{...}` value of groups, shapes, words, commas and arrows (what plain_group reads)."""
    open_c, close_c = ("{", "}") if depth == 0 else draw(st.sampled_from([("{", "}"), ("(", ")")]))
    items = []
    for _ in range(draw(st.integers(1 if open_c == "{" else 0, 5))):
        kind = draw(st.sampled_from(["shape", "word", "sep", "arrow", "group"] if depth < 3 else
                                    ["shape", "word", "sep", "arrow"]))
        if kind == "shape":
            items.append(draw(_SHAPES))
        elif kind == "word":
            items.append(draw(_WORDS))
        elif kind == "sep":
            items.append(",")
        elif kind == "arrow":
            items.append("->")
        else:
            items.append(draw(_plain_value(depth + 1)))
    text = open_c
    for x in items:
        text += draw(_BLANKS) + x
    return text + draw(_BLANKS) + close_c


@settings(max_examples=400, deadline=None)
@given(_plain_value())
def test_plain_groups_read_as_lark_reads_them(text):
    """A group of shapes, words, commas, arrows and () {} groups, with white space and comments, read
    without Lark: the same values, types, texts and depths as the grammar's attr_value rule (or None:
    an INT_LIST such as `{}`, a word glued to a shape's brackets, an error: Lark reads it)."""
    try:
        lark = _lark_value(text)
    except Exception:
        lark = None
    fast = frontend.plain_group(text)
    if fast is not None:
        assert _deep(fast) == _deep(lark)


@pytest.mark.parametrize("text", ["{a=b}", "{[0:1]}", '{"s"}', "{a:b}", "{T(1,0)}", "{'x'}", "{<=}", "{a",
                                  "{a}}", "{(a}", "{a} b", "(a)", "{{1,2}}", "{ {} }", "{f32[2]{0} =}"])
def test_other_values_are_left_to_lark(text):
    assert frontend.plain_group(text) is None


def test_entry_computation_layout_reads_as_lark_reads_it():
    text = "{(f32[2,3]{1,0}, /*index=1*/(s32[], f32[4]{0}), f32[]) -> (f32[2,3]{1,0}, pred[])}"
    assert _deep(frontend.plain_group(text)) == _deep(_lark_value(text))
    assert frontend.decode_value("entry_computation_layout", text) == _lark_value(text)


# ----------------------------------------------------------------------------- the module prefix

def _prefix_records(text: str, fast: bool):
    """The header and sections the scanner (fast) or Lark makes of TEXT's prefix, tokens with their
    text and positions; None where the scanner leaves it to Lark."""
    lark, t = frontend._parser()
    first = frontend._FIRST_COMP.search(text)
    t.text = text
    if fast:
        raw = frontend._scan_prefix(text, first.start(), t)
        if raw is None:
            return None
    else:
        raw = lark.parse(text[:first.start()], start="start")
    h = raw.header
    header = None if h is None else (
        (str(h[0]), h[0].line, h[0].column, h[0].start_pos),
        [(a[0], _deep(a[1]), str(a[2]), a[2].line, a[2].column) for a in h[1]])
    sections = [(n, [(e[0], _deep(e[1]), str(e[2]), e[2].line, e[2].column) for e in ents])
                for n, ents in raw.sections]
    return header, sections


def _corpus():
    files = sorted(p for d in ("samples", "tests", "benchmarks/data") for p in (ROOT / d).rglob("*.hlo")
                   if p.stat().st_size < 20_000_000)
    return files


def test_every_sample_prefix_reads_as_lark_reads_it():
    """Every .hlo of samples/, tests/ and benchmarks/data/ whose header and sections the scanner
    reads gives Lark's records: the same values, tokens, lines and columns."""
    read = 0
    for p in _corpus():
        text = p.read_text(errors="replace")
        first = frontend._FIRST_COMP.search(text)
        if first is None or not text[:first.start()].strip():
            continue
        fast = _prefix_records(text, True)
        if fast is None:
            continue
        read += 1
        assert fast == _prefix_records(text, False), p
    assert read > 100


_HEADERED = """HloModule m, is_scheduled=true, entry_computation_layout={(f32[2]{0}, /*index=1*/f32[2]{0})->f32[2]{0}}, allow_spmd_sharding_propagation_to_output={true}

FileNames
1 "a.py"

FunctionNames
1 "f"

FileLocations
1 {file_name_id=1 function_name_id=1 line=3 end_line=3 column=1 end_column=9}

StackFrames
1 {file_location_id=1 parent_frame_id=1}

ENTRY e {
  p = f32[2]{0} parameter(0)
  q = f32[2]{0} parameter(1)
  ROOT a = f32[2]{0} add(p, q), metadata={op_name="x" stack_frame_id=1}
}
"""


@pytest.mark.parametrize("text", [
    _HEADERED,
    _HEADERED.replace("(f32[2]{0}, /*", "(f32[2]{0}, f32[3]{0}, /*"),                  # a layout that does not fit
    _HEADERED.replace("->f32[2]{0}}", "->f32[2]{0} f32[2]{0}}"),                      # not a layout
    _HEADERED.replace("is_scheduled=true", "is_scheduled=maybe"),                      # a bad value
    _HEADERED.replace("is_scheduled=true", "no_such_attribute=1"),                    # an unknown attribute
    _HEADERED.replace("HloModule m,", "HloModule m:,"),                                # a colon (left to Lark)
    _HEADERED.replace("HloModule m,", "// c\nHloModule m,"),                           # a comment (left to Lark)
    _HEADERED.replace('1 "a.py"', '1 "a.py"\n2 {'),                                   # a broken entry
    _HEADERED.replace("StackFrames\n", "StackFrames\n1\n"),
    _HEADERED.replace("HloModule m, ", "HloModule m ,\n  "),                          # attributes over lines
    _HEADERED.split("\n\nFileNames")[0] + "\n\nENTRY e {\n  ROOT p = f32[2]{0} parameter(0)\n}\n",
    "FileNames\n1 \"a.py\"\n\nENTRY e {\n  ROOT p = f32[2]{0} parameter(0)\n}\n",   # sections without a header
])
def test_prefix_outcomes_are_lark_outcomes(text, monkeypatch):
    """The whole parse with the scanner's prefix and with Lark's: the same module or the same errors."""
    with monkeypatch.context() as mp:
        mp.setattr(frontend, "_scan_prefix", lambda *a: None)
        lark = _outcome(text)
    assert _outcome(text) == lark


def test_the_common_prefix_is_read_without_lark():
    lark, t = frontend._parser()
    first = frontend._FIRST_COMP.search(_HEADERED)
    raw = frontend._scan_prefix(_HEADERED, first.start(), t)
    assert raw is not None and [n for n, _ in raw.sections] == ["FileNames", "FunctionNames", "FileLocations",
                                                                 "StackFrames"]
    assert [a[0] for a in raw.header[1]] == ["is_scheduled", "entry_computation_layout",
                                             "allow_spmd_sharding_propagation_to_output"]


# ----------------------------------------------------------------------------- array-literal lines

def _token(x):
    return None if x is None else (str(x), getattr(x, "line", None), getattr(x, "column", None))


def _record(r):
    return (r.is_root, r.name, _token(r.name_tok), r.shape, _token(r.shape_tok), r.opcode, _token(r.opcode_tok),
            [(a.kind, a.name, a.shape, a.text, _token(a.tok)) for a in r.args],
            [(n, _deep(v), _token(tok)) for n, v, tok in r.attrs])


def _literal_lines(text: str):
    """(cursor, end of line) of each line that starts like `name = shape op({`."""
    for m in re.finditer(r"(?m)^[ \t]*(?=(?:ROOT[ \t]+)?%?[\w.\-]+[ \t]*=[ \t]*[a-z0-9]+\[[^\]\n]*\]\S*[ \t]+"
                         r"[a-z\-]+\([ \t]*\{)", text):
        eol = text.find("\n", m.end())
        if eol > 0:
            yield frontend._Cursor(text, m.end()), eol


def _both_records(text, cur, end):
    lark, t = frontend._parser()
    t.text = text
    fast = frontend._literal_line(text, cur, end)
    if fast is None:
        return None, None
    return _record(fast), _record(frontend._parse_slice(text, cur, end).computations[0].instrs[0])


_LITERAL_LINES = """HloModule m

ENTRY e {
  a = s32[3]{0} constant({1, 2, 3}), metadata={op_name="x"}
  ROOT %b = f32[2,2]{1,0} constant({ { 1.5, -inf }, {nan, 2e-3} }) , sharding={replicated}
  c = pred[2]{0} constant({true, false})
  d = f32[0]{0} constant({})
  e = u32[1]{0} constant({7}), frontend_attributes={_xla="1"}
  f = f32[2]{0} constant( {1, 2})
  g = s32[2]{0} constant({1, 2}) /* c */
  h = s32[2]{0} constant({1, 2}), bad_value={
}
"""


def test_array_literal_lines_read_as_lark_reads_them():
    """A constant's line with an array literal gives Lark's record (tokens, positions, values)."""
    read = 0
    for cur, end in _literal_lines(_LITERAL_LINES):
        fast, lark = _both_records(_LITERAL_LINES, cur, end)
        if fast is not None:
            read += 1
            assert fast == lark
    assert read == 6


def test_every_sample_literal_line_reads_as_lark_reads_it():
    read = 0
    for p in _corpus():
        text = p.read_text(errors="replace")
        for cur, end in _literal_lines(text):
            try:
                fast, lark = _both_records(text, cur, end)
            except HloError:
                continue
            if fast is not None:
                read += 1
                assert fast == lark, (p, cur.line)
    assert read > 50


@pytest.mark.parametrize("line", [
    "ROOT c = s32[3]{0} constant({1, 2, 3}), metadata={op_name=\"x\"}",
    "ROOT c = s32[3]{0} constant({1, 2}), metadata={op_name=\"x\"}",                 # too few values
    "ROOT c = s32[3]{0} constant({1, 2, 3}), sharding={devices=[2]0,1}",
    "ROOT c = s32[3]{0} constant({1, 2, 3}), dimensions={[}",                       # a bad value
    "ROOT c = s32[3]{0} constant({1, 2, 3}), no_such={1}",
    "ROOT c = token[] constant({})",
])
def test_literal_line_outcomes_are_lark_outcomes(line, monkeypatch):
    text = f"HloModule m\n\nENTRY e {{\n  p = f32[2]{{0}} parameter(0)\n  {line}\n}}\n"
    with monkeypatch.context() as mp:
        mp.setattr(frontend, "_literal_line", lambda *a: None)
        lark = _outcome(text)
    assert _outcome(text) == lark
