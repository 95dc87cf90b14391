"""The printer writes a frontend attribute's JSON-dict value raw only when it reads back unchanged.
ir/printer decides that without the parser (a lower layer may not import it); here the decision is
checked against the parser itself, on generated values and on the edges (nesting, integer lists)."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hlo_cli.ir.printer import lexes_as_json_dict, raw_dict_ok
from hlo_cli.parser import parse


def reads_back(v: str) -> bool:
    """What the parser does with `frontend_attributes={k=V}`."""
    if not lexes_as_json_dict(v):
        return False
    text = f"HloModule m, frontend_attributes={{k={v}}}\n\nENTRY e {{\n  ROOT c = f32[] constant(0)\n}}\n"
    try:
        m = parse(text)
    except Exception:       # noqa: BLE001 -- any refusal means: quote it
        return False
    return m.attrs["frontend_attributes"].items == (("k", v),)


PIECES = ["{", "}", "[", "]", "(", ")", "=", ":", ",", "<", "<=", "->", "-", "T", "T(", "a", "b1", '"s"',
          '"x\\"y"', "'q'", "'", " ", "\n", "\t", "/*c*/", "//", "/", "f32[2]", "f32[2]{0}", "f32[2]{1,0}",
          "f32[<=2]", "bf16[]", "f16[2]<0>", "s32[", "s32[a]", "pred[2,3]{1,0:T(2,128)}", "{1,2}", "{1, 2}",
          "{}", "{ }", "1", "-0", "{-0}", "true", "%x", "\\", "@", "é"]


@settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.sampled_from(PIECES), max_size=12))
def test_printer_agrees_with_the_parser(pieces):
    v = "{" + "".join(pieces) + "}"
    assert raw_dict_ok(v) == reads_back(v), v


def test_edges():
    cases = ["{}", "{1,2}", "{1, 2}", "{-0}", '{"a": 1}', '{"a":{"b":[1,2]}}', "{a=b=c}", "{a==b}", "{a=}",
             '{"a"="b"}', "{x=<=}", "{x=->}", "{'a'=1}", "{T(1)}", "{x=T(1)}", " {a}", "{a} ", "{a}{b}",
             '{"a" /* c */}', "{// c\n}", "{f32[2]{1,0}}", "{f32[2]{0}}"]
    cases += ["{" * k + "}" * k for k in (254, 255, 256, 257, 300)]
    for v in cases:
        assert raw_dict_ok(v) == reads_back(v), v[:40]
