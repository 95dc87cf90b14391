"""What XLA's parser reads and refuses, class by class (our own texts; XLA's parser decided each
behaviour, see the notes), and errors that stay located: `hlo check` exits 1 with FILE:LINE:COL."""
from __future__ import annotations

import re

import numpy as np
import pytest
from click.testing import CliRunner

from hlo_cli.cli import main
from hlo_cli.errors import HloSyntaxError
from hlo_cli.ir.attributes import MeshAxis, MeshReplicaGroups
from hlo_cli.ir.printer import format_module as print_module
from hlo_cli.parser import parse


def module(*lines: str, head: str = "HloModule m", before: str = "") -> str:
    return f"{head}\n\n{before}ENTRY main {{\n" + "\n".join(lines) + "\n}\n"


ADD = "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n\n"
WRAPPED = ("wrapped.{k} {{\n  q = f32[4] parameter(0)\n  ROOT r = f32[4] custom-call(q), custom_call_target=\"t\"\n}}"
           "\n\n")


def error_of(text: str):
    with pytest.raises(HloSyntaxError) as ei:
        parse(text, "t.hlo")
    d = ei.value.diagnostics[0]
    return d.message, (d.line, d.column)


def pos(text: str, needle: str, nth: int = 0) -> tuple[int, int]:
    at = -1
    for _ in range(nth + 1):
        at = text.index(needle, at + 1)
    line = text.count("\n", 0, at) + 1
    return line, at - (text.rfind("\n", 0, at) + 1) + 1


def rejects(text: str, needle: str, *words: str, nth: int = 0) -> str:
    msg, at = error_of(text)
    for w in words:
        assert w in msg, msg
    assert at == pos(text, needle, nth), (at, msg)
    return msg


def check_cli(tmp_path, text: str):
    f = tmp_path / "m.hlo"
    f.write_text(text)
    res = CliRunner().invoke(main, ["check", "--no-cache", str(f)])
    assert "Traceback" not in res.output + (res.stderr or "")
    return res, f


# ----------------------------------------------------------------------------- texts XLA reads

def test_header_name_may_end_with_its_colon():
    m = parse(module("  ROOT c = f32[] constant(1)", head="HloModule trailing_colon:, replica_count=2"))
    assert m.name == "trailing_colon" and m.attrs["replica_count"] == 2
    assert print_module(m).startswith("HloModule trailing_colon, ")


def test_header_colon_apart_from_the_name_is_refused():
    text = module("  ROOT c = f32[] constant(1)", head="HloModule spaced :")
    rejects(text, ":", "unexpected ':' after the module name")


@pytest.mark.parametrize("etype, text, want", [
    # XLA's lexer keeps an integer as int64 bits; unsigned types read the bits as uint64
    ("u64", "-1", 2**64 - 1),
    ("u64", "-9223372036854775808", 2**63),
    ("s64", "9223372036854775808", -2**63),
    ("s64", "18446744073709551615", -1),
    ("s8", "18446744073709551615", -1),
])
def test_integers_keep_the_lexers_int64_bits(etype, text, want):
    m = parse(module(f"  ROOT c = {etype}[2] constant({{{text}, 0}})"))
    assert int(m.entry_computation.root_instruction.literal.value[0]) == want


@pytest.mark.parametrize("etype, text", [("u32", "-1"), ("u8", "-1"), ("s32", "9223372036854775808"),
                                         ("u16", "18446744073709551615")])
def test_integers_outside_the_type_after_the_wrap_are_refused(etype, text):
    src = module(f"  ROOT c = {etype}[] constant({text})")
    rejects(src, text, f"value {text} is out of range for {etype}")


@pytest.mark.parametrize("labels, printed", [
    # XLA prints each part as long as its highest dimension number needs, unnamed places as '?'
    ("?b01f_0?1io->b01?f", "?b01f_0?1io->b01?f"),
    ("b0f?_0io->b0f", "b0f_0io->b0f"),
    ("f0_0io->f0", "f0_0io->f0"),                 # b left out is dimension 0, which f then covers
])
def test_dim_labels_with_unknown_dimensions(labels, printed):
    text = module(f"  ROOT r = f32[4] custom-call(), window={{size=2}}, dim_labels={labels}, "
                  'custom_call_target="t"')
    dn = parse(text).entry_computation.root_instruction.attrs["dim_labels"]
    assert str(dn) == printed
    assert parse(print_module(parse(text))).entry_computation.root_instruction.attrs["dim_labels"] == dn


def test_dim_labels_question_marks_round_trip_exactly():
    text = module('  ROOT r = f32[4] custom-call(), window={size=2x2}, dim_labels=?b01f_0?1io->b01?f, '
                  'custom_call_target="t"')
    assert "dim_labels=?b01f_0?1io->b01?f," in print_module(parse(text))


@pytest.mark.parametrize("labels, words", [
    ("bb0f_0io->b0f", ["expects unique input dimension numbers"]),
    ("b3f_0io->b0f", ["expects [0-2bf?] in input dimension numbers"]),
    ("b01f_0io->b0f", ["same number of spatial dimensions", "2, 1 and 1"]),
    ("b1f_0io->b0f", ["spatial dimensions must be numbered 0..0"]),
])
def test_dim_labels_refused(labels, words):
    text = module("  a = f32[1,4,2] parameter(0)", "  k = f32[2,2,3] parameter(1)",
                  f"  ROOT c = f32[1,3,3] convolution(a, k), window={{size=2}}, dim_labels={labels}")
    rejects(text, labels, "dim_labels", *words)


def test_a_lone_instruction_may_leave_its_operands_unnamed():
    m = parse("%product = f32[3]{0} multiply(f32[3]{0}, f32[3]{0})")
    comp = m.entry_computation
    assert [i.name for i in comp.instructions] == ["_0", "_1", "product"]
    assert [i.parameter_number for i in comp.instructions[:2]] == [0, 1]
    assert comp.root_instruction.operands == ("_0", "_1")


def test_named_instructions_need_named_operands():
    text = module("  p = f32[2] parameter(0)", "  ROOT a = f32[2] add(f32[2], p)")
    rejects(text, "f32[2], p", "expects an operand name after the shape f32[2]")


def test_line_comment_ends_at_a_lone_carriage_return():
    text = "HloModule cr // note\rENTRY main {\r  // more\r  ROOT c = f32[] constant(1)\r}\r"
    assert parse(text).entry_computation.root_instruction.opcode == "constant"


# ----------------------------------------------------------------------------- mesh replica groups

def all_reduce(groups: str, replicas: int = 8) -> str:
    return module("  p = f32[8] parameter(0)", f"  ROOT r = f32[8] all-reduce(p), replica_groups={groups}, "
                  "to_apply=add", head=f"HloModule m, replica_count={replicas}", before=ADD)


def mesh_groups(groups: str, replicas: int = 8) -> MeshReplicaGroups:
    return parse(all_reduce(groups, replicas)).entry_computation.root_instruction.attrs["replica_groups"]


def expected_groups(sizes, listed, device_ids=None):
    """Independently of the decoder: devices agree on every axis not listed, and a group runs
    over the listed axes with the last one listed varying fastest."""
    n = int(np.prod(sizes))
    ids = np.arange(n) if device_ids is None else np.array(device_ids)
    coords = np.array(np.unravel_index(np.arange(n), sizes)).T
    others = [a for a in range(len(sizes)) if a not in listed]
    groups: dict = {}
    for flat, c in enumerate(coords):
        key = tuple(c[others])
        order = np.ravel_multi_index(tuple(c[listed]), [sizes[a] for a in listed])
        groups.setdefault(key, {})[int(order)] = int(ids[flat])
    return tuple(tuple(g[k] for k in sorted(g)) for _, g in sorted(groups.items()))


@pytest.mark.parametrize("sizes, listed", [
    ((2, 4), [1]), ((2, 4), [0]), ((2, 4), [1, 0]), ((2, 2, 2), [0, 2]), ((2, 2, 2), [2, 0]),
    ((8,), [0]), ((2, 2, 2), [0, 1, 2]),
])
def test_mesh_groups_vary_the_listed_axes(sizes, listed):
    names = ["x", "y z", "w.1"][:len(sizes)]
    text = ("mesh[" + ",".join(f"'{n}'={s}" for n, s in zip(names, sizes)) + "] {"
            + ",".join(f"'{names[a]}'" for a in listed) + "}")
    rg = mesh_groups(text)
    assert rg.groups == expected_groups(sizes, listed)
    assert str(rg) == text


def test_mesh_groups_with_device_ids_and_round_trip():
    text = "mesh['x'=2,'y'=2], device_ids=(0,2,1,3) {'y'}"
    rg = mesh_groups(text, 4)
    assert rg.groups == expected_groups((2, 2), [1], (0, 2, 1, 3)) == ((0, 2), (1, 3))
    printed = print_module(parse(all_reduce(text, 4)))
    assert f"replica_groups={text}," in printed
    assert parse(printed).entry_computation.root_instruction.attrs["replica_groups"] == rg


@pytest.mark.parametrize("iota, explicit", [
    ("[2,4]T(1,0)", (0, 4, 1, 5, 2, 6, 3, 7)),        # as JAX's 2 x 4 meshes print it
    ("[2,2,2]T(2,0,1)", tuple(int(d) for d in np.arange(8).reshape(2, 2, 2).transpose(2, 0, 1).ravel())),
    ("[8]", tuple(range(8))),
])
def test_mesh_device_ids_iota_form(iota, explicit):
    """device_ids=([reshape]T(perm)) is iota(n) reshaped, transposed and flattened (XLA's parser)."""
    rg = mesh_groups(f"mesh['a'=4,'b'=1,'c'=2], device_ids=({iota}) {{'a'}}")
    assert rg.device_ids == explicit
    assert rg.groups == expected_groups((4, 1, 2), [0], explicit)


@pytest.mark.parametrize("axes, groups", [
    # a sub-axis 'x':(pre)size: the `size` devices of stride pre along x (x = pre-major)
    ("'x':(1)2", ((0, 4), (1, 5), (2, 6), (3, 7))),
    ("'x':(2)2", ((0, 2), (1, 3), (4, 6), (5, 7))),
    ("'x':(4)2", ((0, 1), (2, 3), (4, 5), (6, 7))),
    ("'x':(4)2,'x':(1)2", ((0, 4, 1, 5), (2, 6, 3, 7))),
])
def test_mesh_sub_axes(axes, groups):
    rg = mesh_groups(f"mesh['x'=8] {{{axes}}}")
    assert rg.groups == groups
    assert rg.axes[0] == MeshAxis(0, int(axes.split("(")[1][0]), 2)


@pytest.mark.parametrize("groups, needle, words", [
    ("mesh['x'=2,'y'=4] {'z'}", "'z'", ["'z' is not an axis of the mesh"]),
    ("mesh['x'=2,'y'=1] {'y'}", "{'y'}", ["more than one device per group, but got 1"]),
    ("mesh['x'=2,'x'=4] {'x'}", "'x'", ["duplicate axis names"]),
    ("mesh['x'=8] {'x':(3)2}", "'x':", ["must divide the axis size 8"]),
    ("mesh['x'=8] {'x':(1)8}", "'x':", ["less than the axis size"]),
    ("mesh['x'=8] {'x','x'}", "'x'}", ["overlap"]),
    ("mesh['x'=8] {'x':(1)2,'x':(2)2}", "'x':(2)", ["can be merged"]),
    ("mesh['x'=2,'y'=4], device_ids=(0,1,2,3,4,5,6,6) {'x'}", "mesh", ["permutation of 0..7"]),
    ("maximal_mesh[device_id=3] {}", "maximal_mesh", ["more than one device per group"]),
    ("mesh['x'=2,'y'=4], device_ids=([4,4]T(1,0)) {'x'}", "mesh", ["must reshape the mesh's 8 devices"]),
    ("mesh['x'=2,'y'=4], device_ids=([2,4]T(0,0)) {'x'}", "mesh", ["permute all their dimensions"]),
    ("mesh['x'=2,'y'=4], device_ids=([2,4]) {'x'}", "mesh", ["expected [dims]T(perm)"]),
])
def test_mesh_groups_refused(groups, needle, words):
    text = all_reduce(groups)
    rejects(text, needle, "replica_groups", *words)


# ----------------------------------------------------------------------------- texts XLA refuses

def async_module(*lines: str, before: str = "") -> str:
    return module("  p = f32[4] parameter(0)", *lines, before=before)


START = '  s = ((f32[4]), f32[4], s32[]) custom-call-start(p), custom_call_target="t"'
STATE = "((f32[4]), f32[4], s32[])"


@pytest.mark.parametrize("lines, before, needle, words", [
    ([START, f"  ROOT d = f32[4] negate-done(s)"], "", "negate-done",
     ["expect async wrapped opcode to be custom-call, but got negate"]),
    ([START, f"  u = {STATE} sine-update(s)", "  ROOT d = f32[4] custom-call-done(u)"], "", "sine-update",
     ["expect async wrapped opcode to be custom-call, but got sine"]),
    ([START, '  ROOT d = f32[4] custom-call-done(s), async_execution_thread="side"'], "", "async_execution_thread",
     ["expect async_execution_thread to be main, but got side"]),
    ([f"  s = {STATE} async-start(p), calls=wrapped.0", f"  u = {STATE} async-update(s), calls=wrapped.1",
      "  ROOT d = f32[4] async-done(u)"], WRAPPED.format(k=0) + WRAPPED.format(k=1), "calls=wrapped.1",
     ["expect async_wrapped_computation to be wrapped.0, but got wrapped.1"]),
    (["  n = f32[4] negate(p)", "  ROOT d = f32[4] async-done(n)"], "", "n)",
     ["expects the async-start or async-update before it", "'n' (negate)"]),
])
def test_async_chains_must_agree(lines, before, needle, words):
    rejects(async_module(*lines, before=before), needle, *words)


def test_an_async_computation_has_one_async_start():
    text = async_module(f"  st0 = {STATE} async-start(p), calls=wrapped.0", "  d0 = f32[4] async-done(st0)",
                        f"  st1 = {STATE} async-start(p), calls=wrapped.0", "  ROOT d1 = f32[4] async-done(st1)",
                        before=WRAPPED.format(k=0))
    rejects(text, "st1 =", "computation wrapped.0 is called by more than one async op")


def test_async_chains_that_agree_are_read():
    text = async_module(START, f"  u = {STATE} custom-call-update(s)",
                        '  ROOT d = f32[4] custom-call-done(u), async_execution_thread="main"')
    assert parse(text).entry_computation.root_instruction.opcode == "custom-call-done"


@pytest.mark.parametrize("value, needle, words", [
    ("{mode=high}", "high", ["expects ResultAccuracy type (default or highest) but sees: high"]),
    ("{precision=1}", "precision", ["invalid attribute name: precision"]),
    ("{tolerance={atol=1, bound=2}}", "bound", ["invalid attribute name: bound"]),
    ("{tolerance={rtol=fast}}", "fast", ["expects decimal or integer for rtol"]),
    ("{1e-3}", "1e-3", ["expects attribute name"]),
    ("{mode=highest, tolerance={}}", "tolerance", ["expected '}' to end result_accuracy"]),
])
def test_result_accuracy_refused(value, needle, words):
    text = module("  x = f32[4] parameter(0)", f"  ROOT e = f32[4] exponential(x), result_accuracy={value}")
    rejects(text, needle, "result_accuracy", *words)


@pytest.mark.parametrize("value", ["{mode=DEFAULT}", "{mode=Highest}", "{tolerance={}}",
                                   "{tolerance={atol=0.5,rtol=1e-3,ulps=2}}"])
def test_result_accuracy_read(value):
    text = module("  x = f32[4] parameter(0)", f"  ROOT e = f32[4] exponential(x), result_accuracy={value}")
    assert f"result_accuracy={value}" in print_module(parse(text))


BRANCHES = ("neg {\n  a = f32[4] parameter(0)\n  ROOT n = f32[4] negate(a)\n}\n\n"
            "id {\n  b = f32[4] parameter(0)\n  ROOT c = f32[4] copy(b)\n}\n\n")


@pytest.mark.parametrize("selector, attrs, needle, words", [
    ("pred[]", "branch_computations={neg, id}", "branch_computations",
     ["unexpected attribute 'branch_computations'", "pred[] selector takes true_computation"]),
    ("s32[]", "true_computation=neg, false_computation=id", "true_computation",
     ["unexpected attribute 'true_computation'", "s32[] selector takes branch_computations"]),
    ("pred[]", "true_computation=neg", "conditional",
     ["attribute false_computation is expected but not seen"]),
])
def test_conditional_attributes_follow_the_selector(selector, attrs, needle, words):
    text = module(f"  s = {selector} parameter(0)", "  x = f32[4] parameter(1)",
                  f"  ROOT c = f32[4] conditional(s, x, x), {attrs}", before=BRANCHES)
    rejects(text, needle, *words)


@pytest.mark.parametrize("layout, bad", [("{0:D(X)}", "X"), ("{1,0:D(D,Q)}", "Q"), ("{0:D(C*)}", "C*")])
def test_unknown_dim_level_types_refused(layout, bad):
    rank = layout.count(",") + 1 if layout.startswith("{1") else 1
    shape = f"f32[{','.join(['4'] * rank)}]{layout}"
    text = module(f"  ROOT p = {shape} parameter(0)")
    rejects(text, bad, "DimLevelType abbreviation")


@pytest.mark.parametrize("layout", ["{0:D(C+~)}", "{1,0:D(D,S~)}", "{0:D(H+)}"])
def test_dim_level_types_read(layout):
    rank = 2 if layout.startswith("{1") else 1
    parse(module(f"  ROOT p = f32[{','.join(['4'] * rank)}]{layout} parameter(0)"))


def test_parameter_replication_matches_the_leaves():
    text = module("  p = (f32[2], (s32[], f32[])) parameter(0), parameter_replication={true,false}",
                  "  ROOT g = f32[2] get-tuple-element(p), index=0")
    rejects(text, "parameter_replication", "parameter has 3 leaf buffers, but parameter_replication has 2")


# ----------------------------------------------------------------------------- located, never internal

@pytest.mark.parametrize("attr", ["slice={[0:4]]}", "slice={[0:4}", "sharding={replicated]}",
                                  'frontend_attributes={k="v")}'])
def test_unbalanced_brackets_in_attributes(tmp_path, attr):
    op = "slice(p)" if attr.startswith("slice") else "copy(p)"
    text = module("  p = f32[8] parameter(0)", f"  ROOT r = f32[4] {op}, {attr}")
    res, f = check_cli(tmp_path, text)
    assert res.exit_code == 1
    assert re.search(rf"{re.escape(str(f))}:5:\d+: error: in the value of \w+: unbalanced brackets", res.stderr)


@pytest.mark.parametrize("text, words", [
    ("ROOT acos = f32[256] acos()\n", "acos expects 1 operand, but has 0"),
    ("%m = f32[2] multiply(%a, %b)\n", "operand 'a' of 'm' is not defined"),
    ("p = (f32[2], f32[]) parameter(0), parameter_replication={true}\n", "parameter has 2 leaf buffers"),
])
def test_lone_instructions_give_located_errors(tmp_path, text, words):
    res, f = check_cli(tmp_path, text)
    assert res.exit_code == 1, res.output
    assert f"{f}:1:" in res.stderr and words in res.stderr


# ----------------------------------------------------------------------------- proportional memory

def peak_of(text: str) -> tuple[int, object]:
    import tracemalloc
    parse("HloModule warm\n\nENTRY e {\n  ROOT c = f32[] constant(1)\n}\n")   # grammar loaded
    tracemalloc.start()
    try:
        try:
            result = parse(text, "big.hlo")
        except HloSyntaxError as e:
            result = e
        return tracemalloc.get_traced_memory()[1], result
    finally:
        tracemalloc.stop()


def test_a_large_constant_takes_a_few_times_its_text():
    n = 200_000
    vals = np.random.default_rng(3).standard_normal(n).astype(np.float32)
    words = [f"{v:.9g}" for v in vals]
    rows = ("{" + ", ".join(words[k:k + 100]) + "}" for k in range(0, n, 100))
    text = module(f"  ROOT c = f32[{n // 100},100] constant({{" + ",\n  ".join(rows) + "})")
    peak, m = peak_of(text)
    assert np.array_equal(m.entry_computation.root_instruction.literal.value.ravel(), vals)
    assert peak < 8 * len(text), (peak, len(text))


def test_a_large_malformed_constant_is_located_in_bounded_memory():
    n = 30_000
    text = module(f"  ROOT c = f32[{n}] constant({{" + ", ".join(["0.5"] * (n - 1)) + ", 0.5.5})")
    peak, err = peak_of(text)
    assert isinstance(err, HloSyntaxError)
    assert (err.diagnostics[0].line, err.diagnostics[0].column) == pos(text, "0.5.5")
    assert peak < 60 * len(text), (peak, len(text))


@pytest.mark.parametrize("comment", ["/* {} */", "// {}"])
def test_long_comments_cost_no_more_than_their_text(comment):
    text = "HloModule m\n" + comment.format("x" * 2_000_000) + "\nENTRY e {\n  ROOT c = f32[] constant(1)\n}\n"
    peak, m = peak_of(text)
    assert m.entry_computation.root_instruction.opcode == "constant"
    assert peak < 3 * len(text), (peak, len(text))


def test_a_long_comment_between_operands():
    text = module("  p = f32[] parameter(0)", "  ROOT n = f32[] negate(/* " + "y" * 2_000_000 + " */ p)")
    peak, m = peak_of(text)
    assert m.entry_computation.root_instruction.operands == ("p",)
    assert peak < 6 * len(text), (peak, len(text))


@pytest.mark.parametrize("open_, close", [("{", "}"), ("(", ")"), ("[", "]")])
def test_deep_nesting_stops_early_with_a_located_error(open_, close):
    depth = 20_000
    value = "{a=" + open_ * depth + close * depth + "}"
    text = module("  p = f32[] parameter(0)", f"  ROOT c = f32[] negate(p), frontend_attributes={value}")
    peak, err = peak_of(text)
    assert isinstance(err, HloSyntaxError), err
    d = err.diagnostics[0]
    assert "nested too deeply" in d.message and d.line == 5 and d.column > 0
    assert peak < 200 * len(text), (peak, len(text))     # linear: quadratic would be ~depth/2 times the text


# ----------------------------------------------------------------------------- XLA decides

@pytest.mark.parametrize("text", [
    module("  ROOT c = u64[3] constant({-1, -9223372036854775808, 7})"),
    module("  ROOT c = s64[2] constant({9223372036854775808, 18446744073709551615})"),
    all_reduce("mesh['x'=2,'y'=2], device_ids=(0,2,1,3) {'y'}", 4),
    all_reduce("mesh['x'=8] {'x':(4)2,'x':(1)2}"),
    all_reduce("mesh['x'=4,'y'=2], device_ids=([2,4]T(1,0)) {'x'}"),
    module("  ROOT r = f32[4] custom-call(), window={size=2x2}, dim_labels=?b01f_0?1io->b01?f, "
           'custom_call_target="t"', head="HloModule m:"),
])
def test_xla_reads_these_as_we_do(text):
    """XLA's parser accepts each text; what it prints back reads as the same module here."""
    from hlo_cli.tools.xla_reference import parse_with_xla
    pytest.importorskip("jaxlib._hlo")
    ours = parse(text)
    theirs = parse(parse_with_xla(text).to_string())
    a, b = ours.entry_computation.root_instruction, theirs.entry_computation.root_instruction
    if a.literal is not None:
        assert a.literal == b.literal
    assert a.attrs == b.attrs


@pytest.mark.parametrize("text", [
    module("  ROOT c = u32[] constant(-1)"),
    module("  x = f32[4] parameter(0)", "  ROOT e = f32[4] exponential(x), result_accuracy={mode=high}"),
    module("  ROOT p = f32[4]{0:D(X)} parameter(0)"),
    async_module(START, '  ROOT d = f32[4] custom-call-done(s), async_execution_thread="side"'),
    module("  s = pred[] parameter(0)", "  x = f32[4] parameter(1)",
           "  ROOT c = f32[4] conditional(s, x, x), branch_computations={neg, id}", before=BRANCHES),
])
def test_xla_refuses_these_as_we_do(text):
    from hlo_cli.tools.xla_reference import parse_with_xla
    pytest.importorskip("jaxlib._hlo")
    with pytest.raises(Exception):
        parse_with_xla(text)
    with pytest.raises(HloSyntaxError):
        parse(text)


@pytest.mark.parametrize("dims", ["{,0}", "{0,}", "{0,,1}"])
def test_integer_lists_need_single_commas(dims):
    text = module("  a = f32[2,3] parameter(0)", "  b = f32[3] parameter(1)",
                  f"  ROOT d = f32[2] dot(a, b), lhs_contracting_dims={dims}, rhs_contracting_dims={{0}}")
    rejects(text, dims, "expected a list of integers like {1,2}")


def test_a_bare_percent_is_not_an_operand(tmp_path):
    res, f = check_cli(tmp_path, module("  p = f32[2] parameter(0)", "  ROOT n = f32[2] negate(%)"))
    assert res.exit_code == 1 and f"{f}:5:" in res.stderr
