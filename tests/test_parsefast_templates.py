"""Body templates (parser/frontend.py `body_template`, builder.py `_build_templated`): a body that is an
earlier body's text with other names put in is read and built from that body's template.  For every
text the outcome must be exactly that of the line-by-line reading: the same IR (values, source
locations, printed text, serialized form) or the same located errors."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hlo_cli.parser import frontend
from tests.test_fused_body import _outcome


def _both(text: str, monkeypatch):
    """(the outcome without templates, the outcome with them, how many bodies a template read)."""
    with monkeypatch.context() as mp:
        mp.setattr(frontend, "TEMPLATES", False)
        plain = _outcome(text)
    raw = frontend.scan_module(text)
    read = sum(type(c.fast) is frontend.TemplateBody for c in raw.computations) if raw is not None else 0
    return plain, _outcome(text), read


_BODY = [   # (name, line with {n} for the names: {0} is this line's own)
    "{0} = f32[4]{{0}} parameter(0)",
    "{1} = f32[4]{{0}} parameter(1)",
    "{2} = f32[4]{{0}} add({0}, {1}), metadata={{op_name=\"jit(f)/add\" stack_frame_id=3}}",
    "{3} = f32[2]{{0}} constant({{1, 2}})",
    "{4} = f32[4]{{0}} multiply({2}, {0})",
    "{5} = (f32[4]{{0}}, f32[2]{{0}}) tuple({4}, {3})",
    "ROOT {6} = f32[4]{{0}} get-tuple-element({5}), index=0",
]


def _computation(cname: str, names: list[str], mutate: str | None, k: int) -> str:
    lines = [line.format(*names) for line in _BODY]
    if mutate == "literal":           # a piece between names differs
        lines[4] = lines[4].replace("multiply", "subtract")
    elif mutate == "operand":         # an operand names another definition than the template's
        lines[4] = lines[4].replace(f"({names[2]}, ", f"({names[1]}, ")
    elif mutate == "forward":         # an operand named before it is defined
        lines[2] = lines[2].replace(f"{names[1]})", f"{names[4]})")
    elif mutate == "undefined":
        lines[4] = lines[4].replace(f", {names[0]})", ", %nowhere)")
    elif mutate == "blank":
        lines[3] = "\n" + lines[3]
    elif mutate == "extra":
        lines.insert(6, f"%extra.{k} = f32[4]{{0}} negate({names[4]})")
    elif mutate == "unknown":         # an error in the body
        lines[4] = lines[4].replace("multiply", "frobnicate")
    elif mutate == "control":
        lines[4] += f", control-predecessors={{{names[2]}}}"
    elif mutate == "ctrl_fixed":      # control-predecessors naming a fixed name
        lines[4] += ", control-predecessors={%a.1}"
    elif mutate in ("map_0", "map_1", "map_missing"):    # a called computation, the same or another
        callee = {"map_0": "%sum.0", "map_1": "%sum.1", "map_missing": "%nowhere"}[mutate]
        lines[4] = f"{names[4]} = f32[4]{{0}} map({names[2]}, {names[0]}), dimensions={{0}}, to_apply={callee}"
    elif mutate == "param_gap":
        lines[1] = lines[1].replace("parameter(1)", "parameter(2)")
    elif mutate == "unicode_gap":
        lines[2] = lines[2].replace(" = ", "é = ", 1)
    return (f"%{cname} (p.{k}: f32[4], q.{k}: f32[4]) -> f32[4] {{\n" +
            "".join("  " + line + "\n" for line in lines) + "}\n")


_NEW_NAME = st.one_of(st.from_regex(r"[a-z_][a-z0-9_.\-]{0,6}", fullmatch=True),
                      st.sampled_from(["a.1", "f32", "ROOT", "constant", "x-y", "é", "aé", "A_1", "_"]))
_MUTATIONS = st.sampled_from([None] * 6 + ["literal", "operand", "forward", "undefined", "blank", "extra",
                                           "unknown", "control", "ctrl_fixed", "param_gap", "unicode_gap"] +
                              ["map_0", "map_1", "map_missing"] * 3)
_SUMS = "".join(f"%sum.{k} (x: f32[], y: f32[]) -> f32[] {{\n  %x.{k} = f32[] parameter(0)\n"
                f"  %y.{k} = f32[] parameter(1)\n  ROOT %s.{k} = f32[] add(%x.{k}, %y.{k})\n}}\n\n" for k in range(2))


@st.composite
def _module(draw):
    copies = draw(st.integers(1, 5))
    parts = ["HloModule m\n\n", _SUMS]
    for k in range(copies):
        names = ["%" + draw(_NEW_NAME) for _ in range(7)]
        if draw(st.booleans()):
            names = [f"%v{j}.{k}" for j in range(7)]
        parts.append(_computation(f"body.{k}", names, draw(_MUTATIONS), k) + "\n")
    calls = ", ".join(f"%p{k}" for k in range(copies))
    entry = ["ENTRY %main (a: f32[4], b: f32[4]) -> f32[4] {", "  %a = f32[4]{0} parameter(0)",
             "  %b = f32[4]{0} parameter(1)"]
    for k in range(copies):
        entry.append(f"  %p{k} = f32[4]{{0}} call(%a, %b), to_apply=%body.{k}")
    entry.append("  ROOT %t = (" + ", ".join(["f32[4]{0}"] * copies) + f") tuple({calls})")
    return "".join(parts) + "\n".join(entry) + "\n}\n"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_module())
def test_templates_and_lines_agree(monkeypatch, text):
    plain, templated, _ = _both(text, monkeypatch)
    assert templated == plain


def _plain_module(mutations):
    parts = ["HloModule m\n\n", _SUMS]
    for k, mutate in enumerate(mutations):
        parts.append(_computation(f"body.{k}", [f"%v{j}.{k}" for j in range(7)], mutate, k) + "\n")
    entry = ["ENTRY %main (a: f32[4], b: f32[4]) -> f32[4] {", "  %a = f32[4]{0} parameter(0)",
             "  %b = f32[4]{0} parameter(1)"]
    entry += [f"  %p{k} = f32[4]{{0}} call(%a, %b), to_apply=%body.{k}" for k in range(len(mutations))]
    entry.append("  ROOT %t = f32[4]{0} add(%p0, %p1)")
    return "".join(parts) + "\n".join(entry) + "\n}\n"


def test_repeated_bodies_are_read_by_the_template(monkeypatch):
    text = _plain_module([None] * 4)
    plain, templated, read = _both(text, monkeypatch)
    assert read == 4 and templated == plain and templated[0] == "ok"
    body = templated[1].computations[4]
    assert [i.loc.line for i in body.instructions] == list(range(36, 43))
    assert body.instructions[4].operands == ("v2.2", "v0.2")
    assert str(body.instructions[3].literal) == str(templated[1].computations[2].instructions[3].literal)


def test_bodies_calling_other_computations_read_their_attributes_again(monkeypatch):
    text = _plain_module(["map_0", "map_1", "map_0", "map_missing", "control"])
    plain, templated, read = _both(text, monkeypatch)
    assert read >= 3 and templated == plain and templated[0] == "error"
    text = _plain_module(["map_0", "map_1", "map_1"])
    plain, templated, read = _both(text, monkeypatch)
    assert read == 3 and templated == plain and templated[0] == "ok"
    assert [c.instructions[4].attrs["to_apply"].name for c in templated[1].computations[2:5]] == \
        ["sum.0", "sum.1", "sum.1"]


def test_a_template_whose_body_fails_reports_every_body(monkeypatch):
    """The template's own body has an error: the bodies read by it are built from their lines and
    report their own errors, at their own places."""
    text = _plain_module(["unknown", "unknown", None])
    plain, templated, read = _both(text, monkeypatch)
    assert read == 2 and templated == plain and templated[0] == "error"
    assert [d[1] for d in templated[2]] == [20, 30]


def test_names_that_differ_badly_are_reported_as_without_templates(monkeypatch):
    for names in (["%a"] * 7, ["%f32"] + [f"%w{j}" for j in range(1, 7)]):
        text = ("HloModule m\n\n" + _computation("body.0", [f"%v{j}" for j in range(7)], None, 0) + "\n" +
                _computation("body.1", names, None, 1) +
                "\nENTRY %main (a: f32[4], b: f32[4]) -> f32[4] {\n  %a = f32[4]{0} parameter(0)\n"
                "  %b = f32[4]{0} parameter(1)\n  %p = f32[4]{0} call(%a, %b), to_apply=%body.0\n"
                "  ROOT %q = f32[4]{0} call(%a, %b), to_apply=%body.1\n}\n")
        plain, templated, read = _both(text, monkeypatch)
        assert read == 1 and templated == plain and templated[0] == "error"


# ----------------------------------------------------------------------------- signatures

_PARAM_NAME = st.one_of(st.from_regex(r"%?[a-z_][a-z0-9_.\-]{0,5}", fullmatch=True),
                        st.sampled_from(["1a", "a1", "é", "aé", "%x.1", "ROOT", "f32", "a-b", "_"]))
_PARAM_SHAPE = st.sampled_from(["f32[]", "f32[4]{0}", "s32[2,3]{1,0}", "(f32[], s32[2])", "bf16[8,128]{1,0:T(8,128)}",
                                "(s32[], /*index=1*/u32[4])", "f32[2,]", "u8[3]"])


def _sig_record(sig):
    kind, params, result = sig
    return kind, [(n, s, p.value, p.line, p.column, p.type) for n, s, p in params], result


def _sig_outcome(fn, tok):
    try:
        return _sig_record(fn(tok))
    except frontend.ShapeTokenError as e:
        return ("error", str(e.tok), e.tok.line, e.tok.column)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_PARAM_SHAPE, max_size=4), _PARAM_SHAPE, st.lists(st.lists(_PARAM_NAME, min_size=4, max_size=4),
                                                                  min_size=1, max_size=4),
       st.sampled_from([", ", ",", ",  "]))
def test_signatures_kept_by_their_pieces_read_as_without(monkeypatch, shapes, result, namings, comma):
    """Signatures that differ only in their parameter names read from the kept entry as they read
    without it (names, shapes, positions of the names, errors)."""
    monkeypatch.setattr(frontend, "_SIGNATURES", {})
    for k, names in enumerate(namings):
        text = "(" + comma.join(f"{n}: {s}" for n, s in zip(names, shapes)) + f") -> {result}"
        tok = frontend.Tok("SIGNATURE", text, 10, 3 + k, 7)
        assert _sig_outcome(frontend._signature_of, tok) == \
            _sig_outcome(lambda t: frontend._signature_fast(frontend._FAST, [t]), tok)
