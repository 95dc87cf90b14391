"""Parse errors: every module of samples/invalid/ that is invalid at parse level is rejected, and the
first diagnostic points where its `// expect: ... at LINE:COL` line says, with a message that says
what was expected and what was seen.  Plus one inline case per message class."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from hlo_cli.errors import Diagnostic, HloInputError, HloSyntaxError
from hlo_cli.parser import parse
from hlo_cli.sources.reading import read_source

ROOT = Path(__file__).resolve().parent.parent
INVALID = ROOT / "samples" / "invalid"
FILES = sorted([*INVALID.glob("*.hlo"), *(INVALID / "xla_crashes").glob("*.hlo")])


def rel(path: Path) -> str:
    return path.relative_to(INVALID).as_posix()


# Errors that need shape inference: the parser accepts these, `hlo check` reports them
# (samples/invalid/README.md, "Checked by hlo check, not the parser").
CHECKED_BY_HLO_CHECK = {
    "conditional_branch_count.hlo", "conditional_nonscalar_selector.hlo",
    "operand_shape_mismatch.hlo", "signature_result_mismatch.hlo",
}

# Key words of the first diagnostic's message, in our wording (matched case-insensitively).
EXPECTED = {
    "cannot_infer_shape.hlo": ["cannot infer shape for opcode parameter", "must be written"],
    "shape_inference_failure.hlo": ["failed to infer shape for opcode add", "f32[3]", "f32[4]"],
    "bad_dim_labels.hlo": ["dim_labels", "b01f-01io->b01f"],
    "bad_layout_empty_braces.hlo": ["expected an opcode", "'{}' is not a layout"],
    "bad_layout_length.hlo": ["1 minor_to_major entry", "rank 2"],
    "bad_layout_suffix_order.hlo": ["expected '}' at the end of the layout", "T(...) must come before S(...)"],
    "bad_name_is_type.hlo": ["expects an instruction name", "'f32'", "element type"],
    "bad_name_percent_digit.hlo": ["expects an instruction name", "'%1x'", "'%' must be followed by a letter"],
    "bad_name_percent_type.hlo": ["illegal instruction name", "%s32", "element type"],
    "bad_padding_config.hlo": ["padding", "'1-1'"],
    "bad_shape_dim_overflow.hlo": ["dimension size 99999999999999999999 is too large"],
    "bad_shape_empty_dim.hlo": ["expected an integer dimension size", "got ','"],
    "bad_shape_negative_dim.hlo": ["invalid dimension size -2"],
    "bad_shape_unclosed_tuple.hlo": ["expected ')'", "got 'parameter'"],
    "bad_shape_unknown_type.hlo": ["unknown element type 'f33'"],
    "bad_slice_range.hlo": ["expects [start:limit:step] or [start:limit]", "4 numbers", "[0:4:1:1]"],
    "bad_window_field.hlo": ["unexpected window field 'step'", "size"],
    "binary_junk.hlo": ["binary"],
    "bool_attribute_given_int.hlo": ["is_stable", "expected true or false", "got '1'"],
    "duplicate_attribute.hlo": ["attribute 'metadata' is given twice"],
    "duplicate_computation.hlo": ["computation 'helper' is defined twice"],
    "duplicate_instruction.hlo": ["instruction name 'x' is used twice"],
    "duplicate_parameter_number.hlo": ["parameter number 0 is already used"],
    "empty_file.hlo": ["expects HloModule, ENTRY or a computation", "end of file"],
    "forward_reference_operand.hlo": ["operand 'later'", "used before its definition"],
    "header_only.hlo": ["expects a computation after the module header", "end of file"],
    "input_output_alias_bad_kind.hlo": ["unexpected aliasing kind 'sometimes-alias'", "must-alias"],
    "literal_capitalized_nan.hlo": ["unexpected token 'NaN' in literal"],
    "literal_complex_for_real.hlo": ["unexpected '(' in literal", "parens are only valid for complex literals"],
    "literal_double_overflow.hlo": ["1e400 is out of range for double"],
    "literal_f16_out_of_range.hlo": ["value 1e+06 is out of range for f16", "[-65504, 65504]"],
    "literal_float_for_int.hlo": ["expects integer for primitive type s32", "got '1.5'"],
    "literal_hex.hlo": ["unexpected token '0x10' in literal", "hexadecimal"],
    "literal_nan_payload_out_of_range.hlo": ["NaN payload 0x800000 is out of range for f32", "0x7fffff"],
    "literal_nan_payload_unsupported.hlo": ["f8e4m3fn does not support NaN payloads"],
    "literal_real_for_complex.hlo": ["expects (real, imag) for complex type c64", "got '1'"],
    "literal_s8_out_of_range.hlo": ["value 200 is out of range for s8 [-128, 127]"],
    "literal_too_deep.hlo": ["expects nested array in rank 1, but sees larger"],
    "literal_too_few_elements.hlo": ["expects 3 elements in dimension 0, but sees 2"],
    "literal_too_few_rows.hlo": ["expects 3 elements in dimension 0, but sees 2"],
    "literal_too_many_elements.hlo": ["expects 3 elements on the minor-most dimension, but sees more"],
    "literal_tuple_elided.hlo": ["expects '(' in front of tuple elements", "got '{'"],
    "literal_u4_out_of_range.hlo": ["value 16 is out of range for u4 [0, 15]"],
    "literal_u64_overflow.hlo": ["integer literal 18446744073709551616 is too large"],
    "literal_u8_negative.hlo": ["value -1 is out of range for u8 [0, 255]"],
    "literal_wrong_nesting.hlo": ["expects nested array in rank 2, but sees 1"],
    "missing_required_attribute.hlo": ["attribute dimensions is expected but not seen", "reduce"],
    "missing_required_attribute_gte.hlo": ["attribute index is expected but not seen", "get-tuple-element"],
    "negative_parameter_number.hlo": ["parameter number must be >= 0", "got -1"],
    "no_header_signature_first.hlo": ["expects HloModule or ENTRY before a computation with a signature"],
    "nul_byte.hlo": ["binary"],
    "only_comments.hlo": ["expects HloModule, ENTRY or a computation", "only comments"],
    "replica_groups_malformed.hlo": ["expects a list of integer lists", "'{0,1}'"],
    "sharding_maximal_without_device.hlo": ["maximal shardings should have exactly one device assigned"],
    "sharding_unknown_word.hlo": ["unexpected 'everywhere' in sharding", "replicated"],
    "stack_frames_missing_section.hlo": ["expects the 'FunctionNames' section after 'FileNames'"],
    "syntax_attribute_space_before_equals.hlo": ["expects attribute name", "'index'", "no space"],
    "syntax_bad_character.hlo": ["unexpected character '@'"],
    "syntax_empty_computation.hlo": ["expects an instruction name", "got '}'", "no instructions"],
    "syntax_lone_slash.hlo": ["unexpected character '/'"],
    "syntax_missing_equals.hlo": ["expected '='", "got 'f32[]'"],
    "syntax_missing_module_name.hlo": ["expects a module name after HloModule", "'ENTRY'", "keyword"],
    "syntax_missing_rbrace.hlo": ["'}'", "end of file"],
    "syntax_missing_rparen.hlo": ["')'", "got '}'"],
    "syntax_name_glued_to_equals.hlo": ["expects an instruction name", "'x='", "attribute name"],
    "syntax_nested_instruction_with_attribute.hlo": ["nested instructions cannot have attributes"],
    "syntax_trailing_comma_attributes.hlo": ["a name", "got '}'"],
    "syntax_trailing_garbage.hlo": ["'123'"],
    "syntax_truncated.hlo": ["end of file"],
    "syntax_unterminated_comment.hlo": ["unterminated comment"],
    "syntax_unterminated_string.hlo": ["unterminated string"],
    "two_entries.hlo": ["expects only one ENTRY computation", "'second'", "'first'"],
    "two_roots.hlo": ["one computation should have only one ROOT", "'x'", "'y'"],
    "undefined_computation.hlo": ["computation does not exist", "'no_such_comp'"],
    "undefined_control_predecessor.hlo": ["instruction 'ghost' is not defined", "control predecessor"],
    "undefined_operand.hlo": ["operand 'y'", "is not defined in computation 'main'"],
    "unknown_async_wrapped_opcode.hlo": ["unknown async wrapped opcode 'frobnicate'", "'frobnicate-start'"],
    "unknown_attribute.hlo": ["unexpected attribute 'colour'", "negate", "metadata"],
    "unknown_comparison_direction.hlo": ["direction", "got 'LTE'", "LT"],
    "unknown_header_attribute.hlo": ["unexpected module attribute 'replicas'", "replica_count"],
    "unknown_opcode.hlo": ["unknown opcode 'frobnicate'"],
    "wrong_operand_count.hlo": ["add expects 2 operands, but has 1"],
    "xla_crashes/constant_bool_for_int.hlo": ["expects integer for primitive type s32", "got 'true'",
                                              "pred values"],
    "xla_crashes/constant_token.hlo": ["token-shaped constants are not allowed"],
    "xla_crashes/dynamic_reshape_bad_sizes.hlo": ["dynamic-reshape needs one size operand per result dimension",
                                                  "3 operands", "has 2"],
    "xla_crashes/tuple_non_tuple_shape.hlo": ["tuple result shape must be a tuple", "f32[4]"],
}

# The `// expect:` line of this file says 6:29, but its dynamic-reshape is on line 7 (7:40 is its '(',
# where operand-count errors point, as in wrong_operand_count.hlo).
LOCATION_OVERRIDES = {"xla_crashes/dynamic_reshape_bad_sizes.hlo": (7, 40)}



def expect_line(path: Path):
    first = path.read_bytes().split(b"\n", 1)[0].decode("latin-1")
    m = re.fullmatch(r"// expect: (.*) at (\d+):(\d+)\s*", first)
    assert m, f"{path.name}: line 1 must be '// expect: <message> at LINE:COL'"
    return m.group(1), (int(m.group(2)), int(m.group(3)))


def reject(path: Path):
    """The error parsing the file raises (read_source, then parse)."""
    try:
        text, name = read_source(str(path))
        parse(text, name)
    except (HloSyntaxError, HloInputError) as e:
        return e
    pytest.fail(f"{rel(path)} was accepted")


PARSE_LEVEL = [p for p in FILES if rel(p) not in CHECKED_BY_HLO_CHECK]


def test_every_invalid_file_is_classified():
    names = {rel(p) for p in FILES}
    assert names == set(EXPECTED) | CHECKED_BY_HLO_CHECK, names ^ (set(EXPECTED) | CHECKED_BY_HLO_CHECK)
    for p in FILES:
        expect_line(p)


@pytest.mark.parametrize("path", PARSE_LEVEL, ids=rel)
def test_invalid_file_is_rejected(path):
    err = reject(path)
    assert err.diagnostics, "an error always carries diagnostics"
    d = err.diagnostics[0]
    assert isinstance(d, Diagnostic) and d.severity == "error" and d.message
    assert str(err) == d.message or isinstance(err, HloInputError)


@pytest.mark.parametrize("path", PARSE_LEVEL, ids=rel)
def test_invalid_file_location_and_message(path):
    name = rel(path)
    err = reject(path)
    d = err.diagnostics[0]
    _, where = expect_line(path)
    where = LOCATION_OVERRIDES.get(name, where)
    assert (d.line, d.column) == where, f"{d.line}:{d.column}: {d.message}"
    for fragment in EXPECTED[name]:
        assert fragment.lower() in d.message.lower(), d.message
    assert d.file == str(path)
    # the caret line shows the offending source line
    lines = path.read_bytes().decode("utf-8", "replace").split("\n")
    assert d.source_line == lines[d.line - 1]
    assert d.format().splitlines()[-1] == " " * (d.column + 1) + "^"


@pytest.mark.parametrize("path", [INVALID / n for n in sorted(CHECKED_BY_HLO_CHECK)], ids=lambda p: p.name)
def test_shape_errors_are_left_to_hlo_check(path):
    text, name = read_source(str(path))
    parse(text, name)


def test_diagnostics_are_in_source_order():
    for path in PARSE_LEVEL:
        ds = reject(path).diagnostics
        assert [(d.line, d.column) for d in ds] == sorted((d.line, d.column) for d in ds)


# ----------------------------------------------------------------------------- one case per class

def error_of(text: str) -> HloSyntaxError:
    with pytest.raises(HloSyntaxError) as ei:
        parse(text, "t.hlo")
    return ei.value


def first(text: str):
    d = error_of(text).diagnostics[0]
    return d.message, (d.line, d.column)


def pos(text: str, needle: str, nth: int = 0):
    """(line, column) of the nth occurrence of `needle` in `text`."""
    k = -1
    for _ in range(nth + 1):
        k = text.index(needle, k + 1)
    return text.count("\n", 0, k) + 1, k - text.rfind("\n", 0, k)


def module(*lines: str) -> str:
    return "HloModule m\n\nENTRY main {\n" + "\n".join(lines) + "\n}\n"


ADD = "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n\n"


def check(text, needle, *words, nth=0):
    msg, at = first(text)
    for w in words:
        assert w in msg, msg
    assert at == pos(text, needle, nth), (at, msg)
    return msg


def test_undefined_operand():
    check(module("  x = f32[] parameter(0)", "  ROOT a = f32[] add(x, nope)"), "nope",
          "operand 'nope' of 'a' is not defined in computation 'main'")


def test_undefined_operand_in_the_general_path():
    # typed operands make the instruction go through the general (located) path
    check(module("  x = f32[] parameter(0)", "  ROOT a = f32[] add(f32[] x, f32[] nope)"), "nope", "'nope'")


def test_forward_references():
    msg = check(module("  ROOT a = f32[] negate(b)", "  b = f32[] parameter(0)"), "b)", "used before its definition")
    assert "line 5" in msg
    check(module("  ROOT a = f32[] negate(a)"), "a)", "uses itself")
    check(module("  ROOT x = f32[] parameter(0), control-predecessors={y}", "  y = f32[] parameter(1)"), "y}",
          "control predecessor 'y' is used before its definition")
    text = ("HloModule m\n\nENTRY main {\n  x = f32[8] parameter(0)\n  z = f32[] constant(0)\n"
            "  ROOT r = f32[] reduce(x, z), dimensions={0}, to_apply=add\n}\n\n" + ADD)
    check(text, "add\n", "computation 'add' is used before its definition")


def test_duplicate_names():
    check(module("  x = f32[] parameter(0)", "  x = f32[] parameter(1)", "  ROOT y = f32[] add(x, x)"), "x =",
          "instruction name 'x' is used twice in computation 'main'", nth=1)
    check("HloModule m\n\nf {\n  ROOT p = f32[] parameter(0)\n}\n\nf {\n  ROOT q = f32[] parameter(0)\n}\n", "f {",
          "computation 'f' is defined twice", nth=1)


def test_two_roots():
    check(module("  ROOT x = f32[] parameter(0)", "  ROOT %y = f32[] negate(f32[] x)"), "ROOT", "only one ROOT",
          nth=1)


def test_two_entries():
    check("HloModule m\nENTRY a {\n  ROOT x = f32[] parameter(0)\n}\n"
          "ENTRY %b () -> f32[] {\n  ROOT y = f32[] parameter(0)\n}\n", "ENTRY", "only one ENTRY", nth=1)


def test_duplicate_and_negative_parameter_numbers():
    check(module("  a = f32[] parameter(0)", "  b = f32[] parameter(0)", "  ROOT s = f32[] add(a, b)"), "0)",
          "parameter number 0 is already used", nth=1)
    check(module("  ROOT a = f32[] parameter(-1)"), "-1", "parameter number must be >= 0")
    msg, _ = first(module("  a = f32[] parameter(0)", "  b = f32[] parameter(2)", "  ROOT s = f32[] add(a, b)"))
    assert "parameter(1) is missing" in msg


@pytest.mark.parametrize("etype, value, words", [
    ("u4", "16", ["value 16 is out of range for u4 [0, 15]"]),
    ("s8", "200", ["value 200 is out of range for s8 [-128, 127]"]),
    ("s4", "-9", ["value -9 is out of range for s4 [-8, 7]"]),
    ("u1", "2", ["value 2 is out of range for u1 [0, 1]"]),
    ("s16", "32768", ["out of range for s16"]),
    ("u32", "-1", ["value -1 is out of range for u32"]),
    ("s32", "9223372036854775808", ["out of range for s32"]),
    ("u64", "18446744073709551616", ["too large"]),
    ("f16", "65520", ["value 65520 is out of range for f16"]),
    ("bf16", "1e39", ["out of range for bf16"]),
    ("f32", "1e39", ["out of range for f32"]),
    ("f64", "1e309", ["out of range for double"]),
    ("f8e4m3fn", "1000", ["out of range for f8e4m3fn [-448, 448]"]),
    ("f8e5m2fnuz", "1e6", ["out of range for f8e5m2fnuz"]),
    ("pred", "1.5", ["expects integer for primitive type pred"]),
    ("s32", "1.5", ["expects integer for primitive type s32"]),
    ("c64", "(1e39, 0)", ["real part 1e+39 is out of range for c64"]),
])
def test_literal_range_errors(etype, value, words):
    check(module(f"  ROOT c = {etype}[] constant({value})"), value.lstrip("("), *words)


@pytest.mark.parametrize("shape, text, words, needle", [
    ("f32[3]", "{1, 2}", ["expects 3 elements in dimension 0, but sees 2"], "})"),
    ("f32[3]", "{1, 2, 3, 4}", ["expects 3 elements on the minor-most dimension, but sees more"], "4"),
    ("s32[2,2]", "{{1, 2}, {3}}", ["expects 2 elements in dimension 1 at index [1], but sees 1"], "}}"),
    ("f32[2]", "{{1}, {2}}", ["expects nested array in rank 1, but sees larger"], "{1}"),
])
def test_literal_size_errors(shape, text, words, needle):
    check(module(f"  ROOT c = {shape} constant({text})"), needle, *words)


def test_literal_error_on_a_later_line_of_a_multi_line_literal():
    text = module("  ROOT c = s8[2,2] constant({", "    {1, 2},", "    {3, 300}", "  })")
    check(text, "300", "value 300 is out of range for s8")


def test_unknown_opcode():
    check(module("  x = f32[] parameter(0)", "  ROOT y = f32[] frobnicate(x)"), "frobnicate",
          "unknown opcode 'frobnicate'")


def test_unknown_attribute():
    check(module("  x = f32[] parameter(0)", "  ROOT y = f32[] negate(x), colour=\"red\""), "colour",
          "unexpected attribute 'colour' for negate")


def test_missing_required_attribute():
    check(module("  p = (f32[], s32[]) parameter(0)", "  ROOT x = f32[] get-tuple-element(p)"), "get-tuple-element",
          "attribute index is expected but not seen")
    text = "HloModule m\n\n" + ADD + "ENTRY main {\n  x = f32[8] parameter(0)\n  z = f32[] constant(0)\n" \
           "  ROOT r = f32[] reduce(x, z), to_apply=add\n}\n"
    check(text, "reduce", "attribute dimensions is expected but not seen")


def test_wrong_operand_count():
    check(module("  x = f32[] parameter(0)", "  ROOT a = f32[] add(x)"), "(x)", "add expects 2 operands, but has 1")


def test_attribute_value_errors_point_into_the_value():
    check(module("  x = f32[4] parameter(0)", "  ROOT s = f32[2] slice(x), slice={[0:2], [0:4:1:1]}"), "[0:4",
          "4 numbers")
    check(module("  ROOT x = f32[4] parameter(0), sharding={replicated, manual}"), ", manual", "unexpected ','")
    check(module("  ROOT x = f32[4] parameter(0), sharding={devices=[2]0,1 bogus=3}"), "bogus",
          "unknown attribute 'bogus' in sharding")
    check(module("  ROOT x = f32[4] parameter(0), sharding={devices=[1]0}"), "devices",
          "more than one device")
    check(module("  ROOT x = (f32[4], f32[]) parameter(0), sharding={{replicated}, {maximal}}"), "maximal",
          "maximal shardings should have exactly one device")
    check(module("  x = f32[4] parameter(0)", "  ROOT y = f32[4] negate(x), sharding={replicated last}"), "last",
          "unexpected 'last' in sharding")


def test_names():
    check(module("  ROOT nan = f32[] parameter(0)"), "nan", "'nan', which is a keyword")
    check(module("  ROOT %token = f32[] parameter(0)"), "%token", "illegal instruction name")
    parse(module("  ROOT %nan = f32[] parameter(0)"))          # %-names may be keywords
    check(module("  ROOT x$ = f32[] parameter(0)"), "$", "unexpected character '$'")
    check(module("  %nan = f32[] parameter(0)", "  ROOT y = f32[] negate(nan)"), "nan)",
          "expects an operand name, got 'nan'")
    check("HloModule m\n\nENTRY f32 {\n  ROOT x = f32[] parameter(0)\n}\n", "f32 {", "expects a computation name, got 'f32'")
    parse("HloModule m\n\nENTRY %f32 {\n  ROOT x = f32[] parameter(0)\n}\n")   # XLA accepts it


def test_name_glued_to_equals():
    check(module("  x= f32[] parameter(0)", "  ROOT y = f32[] negate(x)"), "x=", "'x=' reads as an attribute name")
    parse(module("  %x= f32[] parameter(0)", "  ROOT y = f32[] negate(x)"))     # fine with '%'


def test_header_errors():
    check("HloModule m, launch_id=1\n\nENTRY main {\n  ROOT x = f32[] parameter(0)\n}\n", "launch_id",
          "unexpected module attribute 'launch_id'")
    check("HloModule m, replica_count =2\n\nENTRY main {\n  ROOT x = f32[] parameter(0)\n}\n", "replica_count",
          "expects attribute name")
    check("HloModule true\n\nENTRY main {\n  ROOT x = f32[] parameter(0)\n}\n", "true",
          "expects a module name after HloModule, got 'true'")


def test_stack_frame_section_errors():
    sections = ('HloModule m\nFileNames\n1 "a.py"\nFunctionNames\n1 "f"\nFileLocations\n'
                '1 {file_name_id=1 function_name_id=1 line=1}\nStackFrames\n'
                '1 {file_location_id=1 parent_frame_id=0}\nENTRY main {\n  ROOT x = f32[] parameter(0)\n}\n')
    check(sections, "{file_name_id", "sub-attribute end_line is expected but not seen")
    text = sections.replace("line=1}", "line=1 end_line=1 column=1 end_column=2 bogus=1}")
    check(text, "bogus", "unexpected attribute 'bogus'")
    text = sections.replace('FunctionNames\n1 "f"\n', "").replace("FileNames", "FunctionNames")
    check(text, "FunctionNames", "expects the 'FileNames' section, got 'FunctionNames'")
    check('FileNames\n1 "a.py"\nFunctionNames\nFileLocations\nStackFrames\n'
          'ENTRY main {\n  ROOT x = f32[] parameter(0)\n}\n', "FileNames", "expects HloModule before the FileNames")


def test_shape_errors():
    check(module("  ROOT x = f32[2,3]{0} parameter(0)"), "{0}", "1 minor_to_major entry")
    check(module("  x = f32[2] parameter(0)", "  ROOT y = f32[2]{} negate(f32[2] x)"), "{}", "'{}' is not a layout")
    check(module("  ROOT x = f32[16]{0:S(1)E(8)} parameter(0)"), "E(8)", "E(...) must come before S(...)")
    check(module("  ROOT x = f32[2,,3] parameter(0)"), ",3", "expected an integer dimension size")


def test_structure_errors_xla_would_crash_on():
    check(module("  a = f32[4] parameter(0)", "  ROOT t = f32[4] tuple(a)"), "f32[4] tuple",
          "tuple result shape must be a tuple")
    check(module("  a = f32[4] parameter(0)", "  ROOT t = f32[4] tuple(f32[4] a)"), "f32[4] tuple",
          "tuple result shape must be a tuple")
    check(module("  v = f32[10] parameter(0)", "  d = s32[] parameter(1)",
                 "  ROOT r = f32[<=2,<=5] dynamic-reshape(v, d)"), "(v, d)", "one size operand per result dimension")
    parse(module("  v = f32[10] parameter(0)", "  d = s32[] parameter(1)",
                 "  ROOT r = f32[<=2,<=5] dynamic-reshape(v, d, d)"))
    check(module("  ROOT c = (f32[], token[]) constant((1, {}))"), "(f32[]", "token-shaped constants are not allowed")
    check(module("  ROOT c = s32[] constant(true)"), "true", "expects integer for primitive type s32")


def test_several_independent_errors_are_all_reported():
    err = error_of(module("  x = f32[] parameter(0)",
                          "  a = f32[] frobnicate(x)",
                          "  b = s8[] constant(300)",
                          "  c = f32[] negate(nope)",
                          "  ROOT d = f32[] negate(x), colour=1"))
    assert [(d.line, d.code) for d in err.diagnostics] == [(5, "E050"), (6, "E055"), (7, "E057"), (8, "E060")]
    assert err.diagnostics[0].message == str(err)


def test_errors_in_inline_computations_keep_their_location():
    text = module("  x = f32[8] parameter(0)", "  z = f32[] constant(0)",
                  "  ROOT r = f32[] reduce(x, z), dimensions={0}, to_apply={",
                  "    a = f32[] parameter(0)",
                  "    ROOT s = f32[] add(a, missing)",
                  "  }")
    check(text, "missing", "'missing'")


def test_diagnostic_format_has_a_caret():
    err = error_of(module("  x = f32[] parameter(0)", "  ROOT y = f32[] frobnicate(x)"))
    lines = err.format().splitlines()
    assert lines[0] == "t.hlo:5:18: error: unknown opcode 'frobnicate'"
    assert lines[1] == "    ROOT y = f32[] frobnicate(x)"
    assert lines[2] == " " * 19 + "^"


def test_read_source_errors(tmp_path):
    empty = tmp_path / "empty.hlo"
    empty.write_text("  \n")
    with pytest.raises(HloInputError, match="empty"):
        read_source(str(empty))
    binary = tmp_path / "b.hlo"
    binary.write_bytes(b"\x08\x01\x12\x00\x00HloModule")
    with pytest.raises(HloInputError, match="binary"):
        read_source(str(binary))
    latin = tmp_path / "l.hlo"
    latin.write_bytes(b"HloModule m\n// caf\xe9\n")
    with pytest.raises(HloInputError, match="UTF-8") as ei:
        read_source(str(latin))
    assert ei.value.diagnostics[0].line == 2
    with pytest.raises(HloInputError, match="no such file"):
        read_source(str(tmp_path / "missing.hlo"))
    with pytest.raises(HloInputError, match="directory"):
        read_source(str(tmp_path))
    for e in (HloInputError("x"),):
        assert e.exit_code == 2
