"""The fast scanner (parser/frontend.py `scan_module`) reads a module in the common form without Lark's
parser; for every text it must give exactly what the Lark path gives: the same IR (values, source
locations, printed text, serialized form) or the same located errors."""
from __future__ import annotations

from hypothesis import given, settings, HealthCheck
from hypothesis import strategies as st

import pytest

from hlo_cli.errors import HloError
from hlo_cli.ir.printer import format_module
from hlo_cli.ir.serial import deserialize_module, serialize_module
from hlo_cli.parser import frontend, parse


def _outcome(text: str):
    try:
        m = parse(text, "t.hlo")
    except HloError as e:
        return ("error", str(e), [(d.message, d.line, d.column, d.code, d.source_line)
                                  for d in getattr(e, "diagnostics", [])])
    locs = [(c.name, c.loc, [(i.name, i.loc) for i in c.instructions]) for c in m.computations]
    return ("ok", m, deserialize_module(serialize_module(m)), format_module(m), locs)


def _both(text: str, monkeypatch):
    """(the Lark path's outcome, the scanner's outcome, whether the scanner read the text)."""
    real = frontend.scan_module
    with monkeypatch.context() as mp:
        mp.setattr(frontend, "scan_module", lambda t: None)
        lark = _outcome(text)
    return lark, _outcome(text), real(text) is not None


# ----------------------------------------------------------------------------- generated modules

_NAME = st.from_regex(r"%?[a-z][a-z0-9_]{0,6}(\.[0-9]{1,3})?", fullmatch=True)
_WS = st.sampled_from([" ", "  ", "\t", ""])
_GAP = st.sampled_from(["\n", "\n\n", "\n  \n", "\n\t", "\n    "])


@st.composite
def _line(draw, defined: list, k: int):
    """One instruction line using the names defined so far (or, sometimes, something wrong)."""
    a = draw(st.sampled_from(defined))
    b = draw(st.sampled_from(defined))
    form = draw(st.sampled_from(["add", "neg", "meta", "const", "arr", "tuple", "typed", "iota", "comment",
                                 "bcast", "undefined", "unknown", "badshape", "attr", "gte"]))
    sp = draw(_WS)
    name = f"v{k}"
    if form == "add":
        return name, f"{name} ={sp}f32[4]{{0}} add({a},{sp}{b})"
    if form == "neg":
        return name, f"%{name} = f32[4] negate(%{a})"
    if form == "meta":
        return name, (f'{name} = f32[4]{{0}} multiply({a}, {b}), metadata={{op_name="x/y" '
                      f'source_file="a.py" source_line={k}}}')
    if form == "const":
        return name, f"{name} = f32[4]{{0}} broadcast(c), dimensions={{}}"
    if form == "arr":
        return name, f"{name} = f32[4]{{0}} constant({{1, 2, 3, {k}}})"
    if form == "tuple":
        return name, f"{name} = (f32[4]{{0}}, f32[4]{{0}}) tuple({a}, {b})"
    if form == "typed":
        return name, f"{name} = f32[4]{{0}} add(f32[4]{{0}} {a}, f32[4]{{0}} {b})"
    if form == "iota":
        return name, f"{name} = f32[4]{{0}} all-reduce({a}), replica_groups=[1,1]<=[1], to_apply=sum"
    if form == "comment":
        return name, f"{name} = f32[4]{{0}} subtract({a}, {b}) /* c */ // d"
    if form == "bcast":
        return name, f"{name} = f32[2,4]{{1,0}} broadcast({a}), dimensions={{1}}"
    if form == "undefined":
        return name, f"{name} = f32[4]{{0}} add({a}, nowhere{k})"
    if form == "unknown":
        return name, f"{name} = f32[4]{{0}} frobnicate({a})"
    if form == "badshape":
        return name, f"{name} = f32[4,]{{0}} add({a}, {b})"
    if form == "attr":
        return name, f"{name} = f32[4]{{0}} add({a}, {b}), frontend_attributes={{k=\"v\"}}, sharding={{replicated}}"
    return name, f"{name} = f32[4]{{0}} get-tuple-element({a}), index=0"


@st.composite
def _module(draw):
    parts = [draw(st.sampled_from(["HloModule m\n\n", "HloModule m, is_scheduled=true\n\n", ""]))]
    parts.append("sum {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT s = f32[] add(x, y)\n}\n\n")
    head = draw(st.sampled_from(["ENTRY main (p: f32[4], q: f32[4]) -> f32[4] {",
                                 "ENTRY %main (p: f32[4]{0}, q: f32[4]{0}) -> f32[4]{0} {",
                                 "ENTRY main {"]))
    lines = ["p = f32[4]{0} parameter(0)", "q = f32[4]{0} parameter(1)", "c = f32[] constant(1.5)"]
    defined = ["p", "q"]
    for k in range(draw(st.integers(1, 8))):
        name, line = draw(_line(defined, k))
        lines.append(line)
        defined.append(name)
    lines[-1] = "ROOT " + lines[-1]
    body = "".join(draw(_GAP) + draw(st.sampled_from(["  ", "", "\t"])) + line for line in lines)
    tail = draw(st.sampled_from(["\n}\n", "\n}", "}\n", "\n}\n\n// end\n", "\n", "\n}\n}\n"]))
    return "".join(parts) + head + body + tail


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_module())
def test_scanner_and_lark_agree(monkeypatch, text):
    lark, fast, _ = _both(text, monkeypatch)
    assert fast == lark


# ----------------------------------------------------------------------------- chosen texts

_PLAIN = """HloModule m

add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}

ENTRY main (p: f32[4], q: f32[4]) -> f32[4] {
  p = f32[4]{0} parameter(0)
  q = f32[4]{0} parameter(1)
  c = s32[2]{0} constant({1, 2})
  a = f32[4]{0} add(p, q), metadata={op_name="a\\nb"}
  r = f32[4]{0} all-reduce(a), replica_groups=[1,1]<=[1], to_apply=add
  ROOT t = f32[4]{0} negate(r)
}
"""


@pytest.mark.parametrize("text", [
    _PLAIN,
    _PLAIN.replace("\n", "\r\n"),
    _PLAIN.replace("  a = f32[4]{0} add(p, q)", "  /* c */ a = f32[4]{0} add(p, q)"),
    _PLAIN.replace("negate(r)\n", "negate(r)\n  , sharding={replicated}\n"),      # an attribute on the next line
    _PLAIN.replace("}\n\nENTRY", "}, execution_thread=\"main\"\n\nENTRY"),
    _PLAIN.replace("add(p, q)", "add(p, undefined)"),
    _PLAIN.replace("ROOT t = f32[4]{0} negate(r)\n}", "ROOT t = f32[4]{0} negate(r)"),  # no closing brace
    _PLAIN.replace("f32[4]{0} add(p, q)", "f32[4,]{0} add(p, q)"),
    _PLAIN.replace("HloModule m", "HloModule m, bogus=1"),
    _PLAIN.replace("-> f32[4] {", "-> f32[4,] {"),
    _PLAIN.replace("ENTRY main", "ENTRY ROOT"),
], ids=["plain", "crlf", "comment", "attribute-next-line", "thread", "undefined", "no-brace", "bad-shape",
        "bad-header", "bad-signature", "keyword-name"])
def test_chosen_texts(monkeypatch, text):
    lark, fast, _ = _both(text, monkeypatch)
    assert fast == lark


def test_the_scanner_reads_the_common_form(monkeypatch):
    """The plain module, general-form lines (a literal array, an iota replica list) included, is read by
    the scanner (else the test above proves nothing about it)."""
    assert _both(_PLAIN, monkeypatch)[2]


# ----------------------------------------------------------------------------- signatures

_PARAM_SHAPE = st.sampled_from(["f32[4]", "f32[4]{0}", "s32[]", "bf16[2,3]{1,0}", "f32[2,]", "f32[4]{0:T(8,128)}",
                                "(f32[], s32[2])", "pred[1,2,3]{2,1,0}", "f33[4]", "f32[4]{0", "u8[<=4]"])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(_NAME, _PARAM_SHAPE, _WS), max_size=5), st.sampled_from(["", ",", " "]))
def test_plain_parameter_lists_read_as_the_general_split_reads_them(monkeypatch, params, trail):
    """Signatures of plain `name: shape` parameters are read by a regex; the result (parameters,
    their positions, or the error) is the one of the character-by-character split."""
    sig = "(" + ", ".join(f"{n}:{ws}{s}" for n, s, ws in params) + trail + ") -> f32[4]"
    text = f"HloModule m\n\nENTRY e {sig} {{\n  ROOT p = f32[4]{{0}} parameter(0)\n}}\n"
    with monkeypatch.context() as mp:
        mp.setattr(frontend, "_simple_params", lambda inner, tok: None)
        general = _outcome(text)
    assert _outcome(text) == general


# ----------------------------------------------------------------------------- iota device lists

_COLLECTIVE = """HloModule m, replica_count=4

sum {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}

ENTRY main {
  p = f32[4]{0} parameter(0)
  ROOT r = f32[4]{0} all-reduce(p),%sGROUPS, to_apply=sum
}
"""


@pytest.mark.parametrize("groups", ["[2,2]<=[4]", "[4,1]<=[2,2]T(1,0)", "[1,4]<=[4]", "[2,2]<=[4]T(0)",
                                    "[2,2]<=[3]", "[2,2]<=[4]T(1,0)"])
def test_an_iota_device_list_reads_as_the_general_rules_read_it(groups):
    """`replica_groups=[2,2]<=[4]` is part of an INSTR_LINE (the fast path); written after a comment the
    same attribute goes through the grammar's general rules: the same value either way, and the same
    checker findings."""
    from hlo_cli.checker import check_module
    fast_text = _COLLECTIVE.replace("%s", " ").replace("GROUPS", f"replica_groups={groups}")
    general_text = _COLLECTIVE.replace("%s", " /* c */ ").replace("GROUPS", f"replica_groups={groups}")
    assert frontend.scan_module(fast_text).computations[1].instrs[1].__class__.__name__ == "LineInstr"
    if groups in ("[2,2]<=[3]", "[2,2]<=[4]T(1,0)"):    # 4 devices from 3; T of the wrong rank: the
        errors = []                     # same error, at the value, which the comment moves 8 columns right
        for text in (fast_text, general_text):
            with pytest.raises(HloError) as e:
                parse(text, "t.hlo")
            errors.append([(d.message, d.line, d.column) for d in e.value.diagnostics])
        assert [(m, l, c + 8) for m, l, c in errors[0]] == errors[1]
        return
    fast, general = parse(fast_text, "t.hlo"), parse(general_text, "t.hlo")
    f_inst, g_inst = fast.entry_computation.instructions[-1], general.entry_computation.instructions[-1]
    assert f_inst == g_inst
    assert repr(f_inst.attrs["replica_groups"]) == repr(g_inst.attrs["replica_groups"])

    def findings(m, text):
        return [(d.code, d.message, d.line) for d in check_module(m, text)]
    assert findings(fast, fast_text) == findings(general, general_text)


@pytest.mark.parametrize("groups", ["[2,2]<=[", "[2,2]<=4", "[a]<=[4]", "[2,2]<=[4]T(1,0"])
def test_a_malformed_iota_device_list_is_reported_as_before(monkeypatch, groups):
    text = _COLLECTIVE.replace("%s", " ").replace("GROUPS", f"replica_groups={groups}")
    lark, fast, _ = _both(text, monkeypatch)
    assert fast == lark and fast[0] == "error"
