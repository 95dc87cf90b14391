"""The verifier behind `hlo check` (hlo_cli.checker.check_module).

- every real module (samples/jax, before and after optimization), every per-opcode sample
  (samples/ops) and every samples/syntax module XLA accepts checks clean; the syntax modules XLA's
  verifier rejects are listed with the reason, and must be reported on the right instructions;
- the modules of samples/invalid that only a shape checker can reject (README section "Checked by
  `hlo check`, not the parser") are reported on the right instruction, at the README's location;
- modules generated with JAX (an MLP gradient, a convolution, a scan, a sort), before and after
  XLA's optimizations, check clean;
- one small module per rule of the checker: layouts, entry layout, bitcast sizes, layout-sensitive
  checks, called-computation signatures, recursion, schedules, aliasing, broadcasting notes, warnings.
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from hlo_cli.checker import CODES, check_module
from hlo_cli.tools.check import check_file as _check_file
from hlo_cli.tools.check import worst_status as _worst
from hlo_cli.errors import HloError
from hlo_cli.ir.attributes import ComputationRef
from hlo_cli.parser import parse
from hlo_cli.sources.reading import read_source

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"

# The house message template, with the instruction's name in front:
#   %name: <opcode>: <what> must <constraint>, got <actual> for <operand shapes>
TEMPLATE = re.compile(r"^%[^:\s]+: [a-z][a-z0-9-]*: \S.* must .+, got .+ for \(.*\)$")


def check(text: str, **kw):
    module = parse(text, "t.hlo")
    return check_module(module, text, **kw)


def errors(diags):
    return [d for d in diags if d.severity == "error"]


def error_names(diags) -> set[str]:
    return {d.instruction for d in errors(diags)}


def codes(diags) -> list[str]:
    return [d.code for d in diags]


def check_path(path: Path, **kw):
    """What `hlo check FILE` reports: parse errors, or the checker's diagnostics."""
    results = _check_file(str(path), False, kw.get("layout_sensitive", False), True)
    return [d for r in results for d in r.diags], _worst(r.status for r in results)


# ----------------------------------------------------------------------------- samples that are valid

JAX = sorted((SAMPLES / "jax").glob("*.hlo"))
OPS = sorted((SAMPLES / "ops").glob("*.hlo"))
SYNTAX = sorted((SAMPLES / "syntax").glob("*.hlo"))
# hlo's two documented syntax extensions (XLA rejects them; hlo reads them like their standard form)
EXTENSIONS = sorted(p for p in (SAMPLES / "syntax" / "extended").glob("*.hlo")
                    if p.name.startswith(("layout_short_form", "tuple_access_hash")))

# samples/syntax modules that XLA's parser accepts but XLA rejects when it verifies them
# (HloVerifier / LayoutUtil::ValidateLayoutForShape; StableHLO's verifier where XLA's is silent).
# file -> {instruction that must be reported: why XLA rejects it}
XLA_REJECTS_AT_VERIFICATION = {
    "attr_collectives_async.hlo": {
        "cs": "copy-start's shape must be (operand, operand, u32[]) (ShapeVerifier::HandleCopyStart); "
              "the sample declares a 4-tuple",
    },
    "attr_window_conv.hlo": {
        "c5": "dim_labels fb01 make dimension 1 (size 1) the batch, so the result is f32[1,16,6,6], not the "
              "declared f32[4,16,6,6] (StableHLO: inferred shape '[1, 16, 6, 6]' is incompatible)",
        "rwn": "reduce-window without window={...} has an empty window, which must have one dimension "
               "per operand dimension (InferReduceWindowShape)",
    },
    "ops_async.hlo": {
        "s": "output_to_operand_aliasing={{}: (0, {})} on async-start aliases the whole async state "
             "((f32[4]), f32[4], s32[]) with the f32[4] parameter",
    },
    "layouts.hlo": {
        "g": "#(s32): an index type in the layout of a dense array (ValidateLayoutForShape: 'layout has a "
             "index_primitive_type, but is not a sparse array')",
        "h": "*(u32): a pointer type in the layout of a dense array",
        "l": "#(s32)*(s64) in the layout of a dense array",
        "q": "T(): an empty tile ('layout has invalid tiles')",
    },
    "attr_collectives.hlo": {
        "ar4": "constrain_layout=true on one all-reduce and not on the others "
               "(VerifyLayoutConstrainedAllReduce: 'a mix of layout constrained and unconstrained AllReduce')",
    },
    "shapes_dynamic.hlo": {
        name: "an unbounded dynamic dimension '?': HloVerifier's Preprocess rejects it unless "
              "allow_unbounded_dynamism is set (it is off by default and in XLA CPU's pipeline)"
        for name in ("b", "c", "d", "t")
    },
    "layout_index_type_nonint.hlo": {
        "p": "#(f32)*(bf16): index and pointer types in the layout of a dense array (XLA: 'layout has a "
             "index_primitive_type, but is not a sparse array: f32[16]')",
    },
}


@pytest.mark.parametrize("path", JAX + OPS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_real_and_per_opcode_samples_check_clean(path):
    diags, status = check_path(path)
    assert not errors(diags), "\n".join(d.format() for d in errors(diags))
    assert status == "ok"


@pytest.mark.parametrize("path", SYNTAX + EXTENSIONS, ids=lambda p: p.name)
def test_syntax_samples(path):
    diags, status = check_path(path)
    want = XLA_REJECTS_AT_VERIFICATION.get(path.name)
    if want is None:
        assert not errors(diags), "\n".join(d.format() for d in errors(diags))
        assert status == "ok"
    else:
        assert status == "errors"
        assert error_names(diags) == set(want), "\n".join(d.format() for d in errors(diags))


def test_the_rejected_syntax_samples_exist():
    names = {p.name for p in SYNTAX}
    assert set(XLA_REJECTS_AT_VERIFICATION) <= names


def test_jax_samples_layout_sensitive_after_layout_assignment():
    """After XLA's layout assignment (*.opt.hlo) every layout rule holds, so even the layout-sensitive
    check is clean; before it, JAX's layouts are placeholders and elementwise ops change them."""
    for path in (p for p in JAX if p.name.endswith(".opt.hlo")):
        diags, status = check_path(path, layout_sensitive=True)
        assert not errors(diags), "\n".join(d.format() for d in errors(diags))
    diags, _ = check_path(SAMPLES / "jax" / "mlp_train_step.hlo", layout_sensitive=True)
    assert "mul.18" in error_names(diags) and set(codes(errors(diags))) == {"C112"}


# ----------------------------------------------------------------------------- samples/invalid

def _invalid_section() -> list[str]:
    """The files of samples/invalid/README.md's section "Checked by `hlo check`, not the parser"."""
    readme = (SAMPLES / "invalid" / "README.md").read_text()
    m = re.search(r"^## Checked by `?hlo check`?, not the parser\s*$(.*?)(?=^## |\Z)", readme, re.M | re.S)
    if m is None:
        return ["operand_shape_mismatch.hlo", "conditional_branch_count.hlo", "conditional_nonscalar_selector.hlo",
                "signature_result_mismatch.hlo"]
    table = re.search(r"^\|.*?(?=^[^|])", m.group(1), re.M | re.S)     # the section's first table
    return re.findall(r"^\| `([\w.-]+\.hlo)` \|", table.group(0) if table else "", re.M)


CHECKER_INVALID = _invalid_section()
# the instruction each must be reported on (for a signature: its root)
INVALID_INSTRUCTION = {
    "conditional_branch_count.hlo": "c",
    "conditional_nonscalar_selector.hlo": "c",
    "operand_shape_mismatch.hlo": "a",
    "signature_result_mismatch.hlo": "x",
}


def test_invalid_section_lists_the_known_files():
    assert set(INVALID_INSTRUCTION) <= set(CHECKER_INVALID), CHECKER_INVALID


@pytest.mark.parametrize("name", CHECKER_INVALID)
def test_invalid_samples_for_the_checker(name):
    path = SAMPLES / "invalid" / name
    first = path.read_text().splitlines()[0]
    m = re.search(r" at (\d+):(\d+)\s*$", first)
    assert m, first
    line, col = int(m.group(1)), int(m.group(2))
    diags, status = check_path(path)
    assert status == "errors", "\n".join(d.format() for d in diags)
    want = INVALID_INSTRUCTION.get(name)
    if want is None:         # a file added to the section later: the instruction defined on that line
        src = path.read_text().splitlines()[line - 1]
        want = re.match(r"\s*(?:ROOT\s+)?%?([\w.-]+)\s*=", src).group(1)
    errs = errors(diags)
    assert errs and all(d.instruction == want for d in errs), "\n".join(d.format() for d in errs)
    d = errs[0]
    assert d.line == line, d.format()
    if d.code.startswith("C"):
        # the checker points at the offending token, where the README says (XLA's parser reports
        # the same token, sometimes just after it)
        assert d.column == col, d.format()
        assert TEMPLATE.match(d.message.splitlines()[0]) or "signature" in d.message, d.message


# ----------------------------------------------------------------------------- modules made by JAX

def _jax_programs():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    lax = jax.lax

    def mlp_grad(params, x, y):
        def loss(p):
            h = jnp.tanh(x @ p["w1"] + p["b1"])
            logits = h @ p["w2"] + p["b2"]
            logp = jax.nn.log_softmax(logits)
            return -jnp.mean(jnp.sum(logp * y, axis=-1))
        value, grads = jax.value_and_grad(loss)(params)
        return value, jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)

    params = {"w1": jnp.ones((8, 16), jnp.float32), "b1": jnp.zeros((16,), jnp.float32),
              "w2": jnp.ones((16, 4), jnp.float32), "b2": jnp.zeros((4,), jnp.float32)}

    def conv(x, k):
        y = lax.conv_general_dilated(x, k, window_strides=(2, 1), padding="SAME", rhs_dilation=(1, 2),
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return jax.nn.relu(y).max(axis=(1, 2))

    def scan(xs, h0):
        def step(h, x):
            h = jnp.tanh(h * 0.5 + x)
            return h, h.sum()
        return lax.scan(step, h0, xs)

    def sort(x, v):
        keys, vals = lax.sort((x, v), num_keys=1)
        return keys, vals, jnp.argsort(-x), jnp.sort(x.reshape(4, 4), axis=0)

    return [
        ("mlp_grad", mlp_grad, (params, jnp.ones((5, 8), jnp.float32), jnp.ones((5, 4), jnp.float32))),
        ("conv", conv, (jnp.ones((2, 8, 8, 3), jnp.float32), jnp.ones((3, 3, 3, 5), jnp.float32))),
        ("scan", scan, (jnp.ones((6, 4), jnp.float32), jnp.zeros((4,), jnp.float32))),
        ("sort", sort, (jnp.arange(16, dtype=jnp.float32)[::-1], jnp.arange(16, dtype=jnp.int32))),
    ]


def test_modules_generated_with_jax_check_clean():
    jax = pytest.importorskip("jax")
    checked = 0
    for name, fn, args in _jax_programs():
        lowered = jax.jit(fn).lower(*args)
        for stage, text in (("hlo", lowered.as_text("hlo")), ("compiled", lowered.compile().as_text())):
            module = parse(text, f"{name}.{stage}.hlo")
            diags = check_module(module, text)
            assert not errors(diags), f"{name} ({stage}):\n" + "\n".join(d.format() for d in errors(diags))
            if stage == "compiled":
                assert not errors(check_module(module, text, layout_sensitive=True)), f"{name} ({stage})"
            checked += sum(len(c.instructions) for c in module.computations)
    assert checked > 200


# ----------------------------------------------------------------------------- every problem, located

def test_every_problem_is_reported_with_its_location_and_template():
    text = """HloModule m

ENTRY main {
  x = f32[2,3] parameter(0)
  y = f32[3,2] parameter(1)
  a = f32[2,3] add(x, y)
  t = f32[2,3] transpose(y), dimensions={1,0}
  b = f32[3,3] multiply(x, t)
  r = f32[2] reduce(x, x), dimensions={1}, to_apply=nothing
  ROOT out = (f32[2,3], f32[3,3]) tuple(a, b)
}
"""
    with pytest.raises(HloError):          # the undefined computation is the parser's business
        parse(text)
    text = text.replace("  r = f32[2] reduce(x, x), dimensions={1}, to_apply=nothing\n", "")
    diags = check(text)
    errs = errors(diags)
    assert [(d.instruction, d.code) for d in errs] == [("a", "C100"), ("b", "C101")]
    a, b = errs
    assert (a.line, a.column) == (6, 16)        # the opcode
    assert (b.line, b.column) == (8, 7)         # the declared shape
    for d in errs:
        assert TEMPLATE.match(d.message.splitlines()[0]), d.message
        assert d.source_line.strip().startswith(d.instruction + " =")
    assert "f32[2,3] vs" in a.message or "[2,3]" in a.message
    # the inferred and the declared shape, in HLO notation
    assert "inferred shape f32[2,3], got f32[3,3] for (f32[2,3], f32[2,3])" in b.message
    formatted = b.format()
    lines = formatted.splitlines()
    assert lines[0].startswith("t.hlo:8:7: error: %b: multiply: ")
    assert lines[2].index("^") - 2 == 6 and lines[1][2 + 6:].startswith("f32[3,3]")


def test_users_of_a_wrong_instruction_are_checked_against_its_declared_shape():
    # only the wrong instruction is reported: its users agree with what it declares
    text = """HloModule m
ENTRY main {
  x = f32[4] parameter(0)
  n = f32[5] negate(x)
  e = f32[5] exponential(n)
  ROOT s = f32[5] add(n, e)
}
"""
    assert error_names(check(text)) == {"n"}


def test_operand_selected_by_the_rule_message_is_pointed_at():
    text = """HloModule m
b0 {
  ROOT p = f32[4] parameter(0)
}
ENTRY main {
  a = f32[4] parameter(0)
  ROOT c = f32[4] conditional(a, a), branch_computations={b0}
}
"""
    (d,) = errors(check(text))
    assert (d.instruction, d.line, d.column) == ("c", 7, 31)


def test_inline_operand_shapes_must_match():
    text = """HloModule m
ENTRY main {
  x = f32[3]{0} parameter(0)
  ok = f32[3] negate(f32[3]{0} x)
  ROOT bad = f32[3] negate(s32[3] x)
}
"""
    (d,) = errors(check(text))
    assert (d.code, d.instruction, d.line, d.column) == ("C103", "bad", 5, 28)
    assert "s32[3]" in d.message and "f32[3]" in d.message


def test_shapeless_instructions_are_inferred_or_reported():
    """The parser may leave result shapes out (XLA infers them); the checker infers what it can and
    reports what it cannot, at the '(' like XLA does."""
    text = """HloModule m
ENTRY main {
  x = f32[2,3] parameter(0)
  n = f32[2,3] negate(x)
  p = f32[] parameter(1)
  ROOT t = (f32[2,3], f32[]) tuple(n, p)
}
"""
    module = parse(text, "t.hlo")
    entry = module.entry_computation
    stripped = tuple(dataclasses.replace(i, shape=None) if i.name in ("n", "p", "t") else i
                     for i in entry.instructions)
    comp = dataclasses.replace(entry, instructions=stripped)
    module = dataclasses.replace(module, computations=(comp,))
    diags = check_module(module, text)
    (d,) = errors(diags)
    assert (d.code, d.instruction, d.line, d.column) == ("C104", "p", 5, 22)
    assert TEMPLATE.match(d.message), d.message
    # n was inferred, and t is skipped (one of its operands is unknown) rather than reported again


# ----------------------------------------------------------------------------- layouts

@pytest.mark.parametrize("layout,code,fragment", [
    ("{0,0}", "C110", "exactly once"),
    ("{1,2}", "C110", "exactly once"),
    ("{1,0:T(0,2)}", "C111", "tile"),
    ("{1,0:T()}", "C111", "tile"),
    ("{1,0:E(-1)}", "C111", "element size"),
    ("{1,0:L(0)}", "C111", "tail padding"),
    ("{1,0:S(-2)}", "C111", "memory space"),
    ("{1,0:#(s32)}", "C111", "index type"),
])
def test_malformed_layouts(layout, code, fragment):
    text = f"HloModule m\nENTRY e {{\n  ROOT p = f32[2,3]{layout} parameter(0)\n}}\n"
    (d,) = errors(check(text))
    assert (d.code, d.instruction, d.line, d.column) == (code, "p", 3, 12)
    assert fragment in d.message and TEMPLATE.match(d.message)


def test_well_formed_layouts_are_accepted():
    text = """HloModule m
ENTRY e {
  a = f32[8,128]{0,1:T(8,128)(2,1)} parameter(0)
  b = bf16[16,256]{1,0:T(8,*)(2,1)(1)} parameter(1)
  c = s4[16]{0:E(4)} parameter(2)
  d = f32[16]{0:L(8)S(1)} parameter(3)
  ROOT t = f32[] constant(0)
}
"""
    assert not errors(check(text, warnings=False))


def test_entry_computation_layout_must_agree_with_the_entry():
    base = """HloModule m, entry_computation_layout={LAYOUT}
ENTRY e {
  x = f32[2,3]{1,0} parameter(0)
  ROOT n = f32[2,3]{1,0} negate(x)
}
"""
    assert not errors(check(base.replace("LAYOUT", "(f32[2,3]{1,0})->f32[2,3]{1,0}"), layout_sensitive=True))
    d, = errors(check(base.replace("LAYOUT", "(f32[2,4]{1,0})->f32[2,3]{1,0}")))
    assert (d.code, d.instruction) == ("C122", "x")
    d, = errors(check(base.replace("LAYOUT", "(f32[2,3]{1,0}, f32[])->f32[2,3]{1,0}")))
    assert d.code == "C122" and "one shape per parameter" in d.message
    d, = errors(check(base.replace("LAYOUT", "(f32[2,3]{1,0})->s32[2,3]{1,0}")))
    assert (d.code, d.instruction) == ("C122", "n")
    # layouts only count when the check is layout-sensitive
    other = base.replace("LAYOUT", "(f32[2,3]{0,1})->f32[2,3]{1,0}")
    assert not errors(check(other))
    d, = errors(check(other, layout_sensitive=True))
    assert (d.code, d.instruction) == ("C122", "x")


def test_bitcast_keeps_the_byte_size():
    text = """HloModule m
ENTRY e {
  x = f32[2,3]{1,0} parameter(0)
  ok = s32[6]{0} bitcast(x)
  ok2 = f16[3,2,2]{2,1,0} bitcast(x)
  ROOT bad = f32[7]{0} bitcast(x)
}
"""
    d, = errors(check(text, warnings=False))
    # the bitcast rule reports it (C100); the checker's own size check (C113) is the backstop
    assert d.code in ("C100", "C113") and d.instruction == "bad"
    assert "24 bytes" in d.message and "28 bytes" in d.message


def test_layout_sensitive_elementwise_and_forwarding_ops():
    text = """HloModule m
ENTRY e {
  x = f32[2,3]{1,0} parameter(0)
  y = f32[2,3]{0,1} parameter(1)
  same = f32[2,3]{1,0} add(x, x)
  changed = f32[2,3]{0,1} negate(x)
  mixed = f32[2,3]{1,0} add(x, y)
  s = f32[] constant(1)
  b = f32[2,3]{0,1} broadcast(s), dimensions={}
  tr = f32[3,2]{1,0} transpose(x), dimensions={1,0}
  tup = (f32[2,3]{1,0}, f32[2,3]{0,1}) tuple(x, y)
  g = f32[2,3]{1,0} get-tuple-element(tup), index=1
  ROOT out = (f32[2,3]{1,0}, f32[2,3]{0,1}, f32[2,3]{1,0}, f32[2,3]{0,1}, f32[3,2]{1,0}, f32[2,3]{1,0}) tuple(same, changed, mixed, b, tr, g)
}
"""
    assert not errors(check(text))
    errs = errors(check(text, layout_sensitive=True))
    assert [(d.code, d.instruction) for d in errs] == [("C112", "changed"), ("C112", "mixed"), ("C112", "g")]
    assert "negate cannot change layout" in errs[0].message


# ----------------------------------------------------------------------------- structure

def test_called_computations_need_the_right_signature():
    text = """HloModule m
add_vec {
  a = f32[2] parameter(0)
  b = f32[2] parameter(1)
  ROOT s = f32[2] add(a, b)
}
add_s32 {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT s = s32[] add(a, b)
}
cmp_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[4,2] parameter(0)
  z = f32[] constant(0)
  r1 = f32[4] reduce(x, z), dimensions={1}, to_apply=add_vec
  r2 = f32[4] reduce(x, z), dimensions={1}, to_apply=add_s32
  v = f32[8] parameter(1)
  srt = f32[8] sort(v), dimensions={0}, to_apply=cmp_f32
  ROOT t = (f32[4], f32[4], f32[8]) tuple(r1, r2, srt)
}
"""
    errs = errors(check(text))
    assert [d.instruction for d in errs] == ["r1", "r2", "srt"], "\n".join(d.format() for d in errs)
    assert all(d.code == "C100" and TEMPLATE.match(d.message.splitlines()[0]) for d in errs)
    assert "pred[]" in errs[2].message


def test_recursion_among_computations():
    text = """HloModule m
f {
  p = f32[] parameter(0)
  ROOT c = f32[] negate(p)
}
ENTRY e {
  x = f32[] parameter(0)
  ROOT r = f32[] call(x), to_apply=f
}
"""
    module = parse(text, "t.hlo")
    f = module.computation_map["f"]
    c = f.by_name["c"]
    p = f.by_name["p"]
    loop = dataclasses.replace(c, opcode="call", operands=("p",), attrs={"to_apply": ComputationRef("f")})
    f2 = dataclasses.replace(f, instructions=(p, loop))
    module = dataclasses.replace(module, computations=(f2, module.entry_computation))
    diags = check_module(module, text)
    rec = [d for d in diags if d.code == "C120"]
    assert len(rec) == 1 and rec[0].instruction == "c" and "f -> f" in rec[0].message


def test_scheduled_modules_define_values_before_use():
    text = """HloModule m, is_scheduled=true
ENTRY e {
  x = f32[] parameter(0)
  a = f32[] negate(x)
  b = f32[] negate(a)
  ROOT r = f32[] add(a, b)
}
"""
    assert not errors(check(text))
    module = parse(text, "t.hlo")
    e = module.entry_computation
    x, a, b, r = e.instructions
    swapped = dataclasses.replace(e, instructions=(x, b, a, r))
    module = dataclasses.replace(module, computations=(swapped,))
    (d,) = errors(check_module(module, text))
    assert (d.code, d.instruction) == ("C124", "b") and "%a" in d.message
    # without is_scheduled the order is free
    module = dataclasses.replace(module, attrs={})
    assert not errors(check_module(module, text))


@pytest.mark.parametrize("alias,fragment", [
    ("{ {0}: (0, {}, may-alias) }", None),
    ("{ {2}: (0, {}) }", "output index must exist"),
    ("{ {0}: (3, {}) }", "parameter number must be below 2"),
    ("{ {0}: (1, {}) }", None),                    # may-alias (the default) of other shapes: XLA allows it
    ("{ {0}: (1, {}, must-alias) }", "must-alias output must have exactly the shape of parameter 1"),
    ("{ {}: (0, {}) }", "the aliased output must be an array"),
    ("{ {0}: (0, {1}) }", "parameter index must exist"),
    ("{ {0}: (0, {}), {1}: (0, {}) }", "aliased at most once"),
])
def test_input_output_alias(alias, fragment):
    text = f"""HloModule m, input_output_alias={alias}
ENTRY e {{
  x = f32[4] parameter(0)
  y = s32[] parameter(1)
  n = f32[4] negate(x)
  ROOT t = (f32[4], f32[4]) tuple(n, x)
}}
"""
    errs = errors(check(text))
    if fragment is None:
        assert not errs
    else:
        assert len(errs) == 1 and errs[0].code == "C123" and fragment in errs[0].message, errs


@pytest.mark.parametrize("alias,ecl,fragment", [
    ("{ {0}: (0, {}, must-alias) }", "", None),
    ("{ {0}: (0, {}, must-alias) }", ", entry_computation_layout={(f32[2,3]{0,1})->(f32[2,3]{1,0})}",
     "layout included"),
    ("{ {0}: (0, {}, may-alias) }", ", entry_computation_layout={(f32[2,3]{0,1})->(f32[2,3]{1,0})}", None),
])
def test_must_alias_compares_layouts(alias, ecl, fragment):
    """VerifyEntryComputationLayout compares a must-alias pair's shapes exactly (the entry layout's)."""
    text = f"""HloModule m, input_output_alias={alias}{ecl}
ENTRY e {{
  x = f32[2,3] parameter(0)
  ROOT t = (f32[2,3]) tuple(x)
}}
"""
    errs = errors(check(text))
    assert (fragment is None) == (not errs), errs
    if fragment:
        assert fragment in errs[0].message


def test_may_alias_of_other_sizes_is_an_error_only_when_layouts_matter():
    text = """HloModule m, input_output_alias={ {0}: (0, {}) }
ENTRY e {
  x = f32[4] parameter(0)
  c = f32[8] constant({1, 2, 3, 4, 5, 6, 7, 8})
  ROOT t = (f32[8]) tuple(c)
}
"""
    assert not errors(check(text))
    errs = errors(check(text, layout_sensitive=True))
    assert [d.code for d in errs] == ["C123"] and "byte size of parameter 0" in errs[0].message


def test_signature_result_must_match_but_parameter_list_is_only_a_warning():
    text = """HloModule m
ENTRY main (x: f32[3], extra: s32[]) -> f32[3] {
  ROOT x = f32[3] parameter(0)
}
"""
    diags = check(text)
    assert not errors(diags)
    (w,) = [d for d in diags if d.code == "W204"]
    assert w.severity == "warning" and (w.line, w.column) == (2, 13)
    bad = text.replace("-> f32[3]", "-> s32[3]")
    (d,) = errors(check(bad))
    assert (d.code, d.instruction, d.line, d.column) == ("C125", "x", 2, 41)


# ----------------------------------------------------------------------------- broadcasting

def test_implicit_broadcasting_is_explained():
    text = """HloModule m
ENTRY main {
  x = f32[2,3] parameter(0)
  y = f32[3] parameter(1)
  z = f32[1,3] parameter(2)
  w = f32[4] parameter(3)
  a = f32[2,3] add(x, y)
  b = f32[2,3] multiply(x, z)
  c = f32[2,3] subtract(x, w)
  ROOT t = (f32[2,3], f32[2,3], f32[2,3]) tuple(a, b, c)
}
"""
    a, b, c = errors(check(text))
    assert "would broadcast to [2,3] under XLA's client rules" in a.message
    assert "%y becomes f32[2,3] broadcast(%y), dimensions={1}" in a.message
    assert "f32[3] reshape(%z); then f32[2,3] broadcast(<reshaped>), dimensions={1}" in b.message
    assert "would not broadcast under XLA's client rules" in c.message
    assert "dimension 1 has sizes 3 and 4" in c.message


# ----------------------------------------------------------------------------- warnings

def test_warnings_and_their_switch():
    text = """HloModule m
cond {
  cp = (s32[]) parameter(0)
  ROOT t = pred[] constant(true)
}
body {
  p = (s32[]) parameter(0)
  ROOT q = (s32[]) tuple(i)
  i = s32[] get-tuple-element(p), index=0
}
ENTRY main {
  k = f32[4] constant({...})
  unused = f32[4] negate(k)
  z = s32[] constant(0)
  init = (s32[]) tuple(z)
  ROOT w = (s32[]) while(init), condition=cond, body=body
}
"""
    text = text.replace("  ROOT q = (s32[]) tuple(i)\n  i = s32[] get-tuple-element(p), index=0\n",
                        "  i = s32[] get-tuple-element(p), index=0\n  ROOT q = (s32[]) tuple(i)\n")
    diags = check(text)
    assert not errors(diags)
    got = {(d.code, d.instruction) for d in diags}
    assert got == {("W200", "k"), ("W201", "unused"), ("W202", "w")}
    assert all(d.severity == "warning" for d in diags)
    assert not check(text, warnings=False)


def test_codes_are_documented():
    text = "HloModule m\nENTRY e {\n  x = f32[2] parameter(0)\n  ROOT y = f32[3] negate(x)\n}\n"
    for d in check(text):
        assert d.code in CODES


def test_check_module_without_text_still_locates():
    text = "HloModule m\nENTRY e {\n  x = f32[2] parameter(0)\n  ROOT y = f32[3] negate(x)\n}\n"
    module = parse(text, "t.hlo")
    (d,) = errors(check_module(module))
    assert (d.line, d.column, d.source_line) == (4, 8, None)


def test_read_source_roundtrip_for_crlf():
    path = SAMPLES / "syntax" / "crlf_line_endings.hlo"
    text, name = read_source(str(path))
    diags = check_module(parse(text, name), text)
    assert all("\r" not in (d.source_line or "") for d in diags)


@pytest.mark.parametrize("text", [
    # an unbounded operand and a scalar result: no broadcasting hint, and no internal error
    "HloModule m\nENTRY e {\n  a = f32[] parameter(0)\n  b = f32[?] parameter(1)\n  ROOT c = f32[] add(a, b)\n}\n",
    "HloModule m\nENTRY e {\n  a = f32[] parameter(0)\n  b = f32[<=4] parameter(1)\n  ROOT c = f32[<=4] add(a, b)\n}\n",
])
def test_dynamic_operands_of_different_ranks_are_plain_errors(text):
    errs = errors(check(text))
    assert any("dimensions must be equal" in d.message for d in errs)
    assert not any("would broadcast" in d.message for d in errs)
