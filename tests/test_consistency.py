"""The consistency law between the shape rules and the interpreter: for every instruction the
interpreter evaluates, the shape rule's result (inferred the way `hlo check` infers it) is the shape
of the value computed: same element type (as a NumPy dtype), same dimensions, same tuple structure.

Checked on the real modules of samples/jax (with their recorded inputs), and as a hypothesis
property over small generated modules of elementwise, broadcast, reduce, transpose, slice and other
shape operations.  Opcodes without an evaluation rule yet are left out (the module using them is not
run, or the generator does not emit them), but never silently: each test asserts how much it checked.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from hlo_cli.checker import check_module
from hlo_cli.errors import HloError
from hlo_cli.interpreter import run, rule_for
from hlo_cli.ir.dtypes import ELEMENT_TYPES
from hlo_cli.parser import parse
from hlo_cli.shapes import RULES, infer_shape
from hlo_cli.shapes.registry import computation_shapes, context_for

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
JAX = sorted((ROOT / "samples" / "jax").glob("*.hlo"))


def value_mismatch(value, shape) -> str | None:
    """None if `value` has exactly `shape` (element type, dims, tuple structure), else why not."""
    if shape.is_tuple:
        if not isinstance(value, tuple) or len(value) != len(shape.tuple_shapes):
            return f"expected a tuple of {len(shape.tuple_shapes)}, got {type(value).__name__}"
        for k, (v, s) in enumerate(zip(value, shape.tuple_shapes)):
            why = value_mismatch(v, s)
            if why:
                return f"element {k}: {why}"
        return None
    if shape.element_type in ("token", "opaque"):
        return None if not isinstance(value, np.ndarray) else f"expected a {shape.element_type}, got an array"
    if isinstance(value, np.generic):
        # a NumPy scalar has dims () and a dtype: for the law it is a 0-d array (whether the
        # interpreter should hand out ndarrays only is its own contract, checked by check_values)
        value = np.asarray(value)
    if not isinstance(value, np.ndarray):
        return f"expected an array, got {type(value).__name__}"
    want = ELEMENT_TYPES[shape.element_type].numpy
    if value.dtype != want:
        return f"dtype {value.dtype}, the rule says {shape.element_type} ({want})"
    if tuple(value.shape) != tuple(shape.dims):
        return f"dims {list(value.shape)}, the rule says {list(shape.dims)}"
    return None


# Evaluation rules known to compute a value of the wrong shape (the law catches them; reported to the
# interpreter's authors).  A module whose *first* violation is one of these is set aside with its
# reason: what follows in that module are consequences of the wrong value.
# (opcode, custom_call_target prefix or None) -> why
KNOWN_VALUE_BUGS: dict[tuple[str, str | None], str] = {}


def _known_bug(inst) -> str | None:
    for (op, target), why in KNOWN_VALUE_BUGS.items():
        if inst.opcode == op and (target is None or str(inst.attrs.get("custom_call_target", "")).startswith(target)):
            return why
    return None


class LawHook:
    """An interpreter hook comparing each computed value with the shape rule's result."""

    def __init__(self, module):
        self.module = module
        self.comp_shapes = computation_shapes(module)
        self.checked = Counter()
        self.problems: list[str] = []
        self.first_bug: str | None = None       # the known bug behind the first violation, if any

    def __call__(self, ev):
        inst = ev.instruction
        if inst.opcode == "parameter":
            return
        by = ev.computation.by_name
        operands = [by[o].shape for o in inst.operands]
        inferred = infer_shape(inst.opcode, operands, inst.attrs, context_for(self.module, inst, self.comp_shapes))
        why = value_mismatch(ev.value, inferred)
        if why is not None and not self.problems and self.first_bug is None:
            self.first_bug = _known_bug(inst)
        if why is not None and len(self.problems) < 20:
            self.problems.append(f"{ev.computation.name}/%{inst.name} ({inst.opcode}): inferred "
                                 f"{inferred.to_str(False)}, value: {why}")
        self.checked[inst.opcode] += 1


def _runnable(module) -> list[str]:
    """The opcodes of `module` without an evaluation rule."""
    return sorted({i.opcode for _, i in module.instructions() if rule_for(i.opcode) is None})


def _inputs(path: Path, module):
    case = path.name.split(".")[0]
    npz = np.load(path.parent / f"{case}.inputs.npz")
    return [npz[f"arg{k}"] for k in range(len(module.entry_computation.parameters))]


def test_law_on_the_jax_samples():
    ran, left_out, failed, known = [], {}, {}, {}
    total = Counter()
    problems = []
    for path in JAX:
        module = parse(path.read_text(), str(path))
        missing = _runnable(module)
        if missing:
            left_out[path.name] = missing
            continue
        hook = LawHook(module)
        try:
            with np.errstate(all="ignore"):
                run(module, *_inputs(path, module), hook=hook, check_values=False)
        except HloError as e:
            # an evaluation rule that fails is the interpreter's business (its own tests); the
            # instructions evaluated before it still count, and the list is shown if too few ran
            failed[path.name] = str(e).splitlines()[0]
        else:
            ran.append(path.name)
        if hook.problems and hook.first_bug is not None:
            known[path.name] = f"{hook.first_bug} (first: {hook.problems[0]})"
            ran = [r for r in ran if r != path.name]
            continue
        problems += [f"{path.name}: {p}" for p in hook.problems]
        total.update(hook.checked)
    assert not problems, "\n".join(problems)
    # not silent: most modules run, and many instructions of many opcodes are compared
    # every sample runs: all opcodes have evaluation rules and none fails
    assert not left_out and not failed and not known, (left_out, failed, known)
    assert len(ran) >= 22, ran
    assert sum(total.values()) >= 5000, total
    assert len(total) >= 40, sorted(total)
    for op in ("dot", "convolution", "reduce", "reduce-window", "while", "conditional", "sort", "gather",
               "scatter", "broadcast", "transpose", "slice", "dynamic-slice", "fusion", "call"):
        assert total[op] > 0, (op, left_out, failed, known)


def test_interpreter_values_have_the_declared_shapes():
    """With the evaluator's own check on (check_values=True, as `hlo run` does), every runnable sample
    runs: each value is an ndarray of its declared shape."""
    failures = []
    for path in JAX:
        module = parse(path.read_text(), str(path))
        if _runnable(module):
            continue
        try:
            with np.errstate(all="ignore"):
                run(module, *_inputs(path, module))
        except HloError as e:
            failures.append(f"{path.name}: {str(e).splitlines()[0]}")
    assert not failures, "\n".join(failures)


# ----------------------------------------------------------------------------- generated modules

ADD = "add_{t} {{\n  a = {t}[] parameter(0)\n  b = {t}[] parameter(1)\n  ROOT s = {t}[] add(a, b)\n}}\n"
MAX = "max_{t} {{\n  a = {t}[] parameter(0)\n  b = {t}[] parameter(1)\n  ROOT s = {t}[] maximum(a, b)\n}}\n"

UNARY = {"f32": ["negate", "abs", "exponential", "tanh", "floor", "ceil", "sign", "cosine", "sine", "sqrt",
                 "round-nearest-even", "logistic"],
         "s32": ["negate", "abs", "sign", "not", "popcnt", "count-leading-zeros"]}
BINARY = {"f32": ["add", "subtract", "multiply", "maximum", "minimum", "divide", "power", "atan2", "remainder"],
          "s32": ["add", "subtract", "multiply", "maximum", "minimum", "and", "or", "xor"]}
SHAPE_OPS = ["broadcast", "reduce", "transpose", "slice", "reshape", "reverse", "concatenate", "pad", "convert",
             "compare-select", "iota-add"]


def _available(ops):
    return [o for o in ops if rule_for(o) is not None and o in RULES]


def _shape_ops_available():
    need = {"broadcast": ["broadcast"], "reduce": ["reduce", "add"], "transpose": ["transpose"],
            "slice": ["slice"], "reshape": ["reshape"], "reverse": ["reverse"], "concatenate": ["concatenate"],
            "pad": ["pad"], "convert": ["convert"], "compare-select": ["compare", "select"],
            "iota-add": ["iota", "add"]}
    return [k for k in SHAPE_OPS if all(rule_for(o) is not None and o in RULES for o in need[k])]


def _s(t, dims):
    return f"{t}[{','.join(map(str, dims))}]"


def _composite(fn):
    return st.composite(fn)


@_composite
def programs(draw):
    """(HLO text, number of instructions, input arrays): a chain of operations on one value, each
    result shape computed here from the semantics, independently of the shape rules."""
    t = draw(st.sampled_from(["f32", "s32"]))
    rank = draw(st.integers(0, 3))
    dims = [draw(st.integers(1, 4)) for _ in range(rank)]
    lines = [f"  p0 = {_s(t, dims)} parameter(0)"]
    params = [(t, list(dims))]
    cur, n = "p0", 0
    steps = draw(st.integers(1, 6))
    shape_ops = _shape_ops_available()
    for k in range(steps):
        name = f"v{k}"
        kind = draw(st.sampled_from(["unary", "binary", "shape", "shape"]))
        if kind == "unary" and _available(UNARY[t]):
            op = draw(st.sampled_from(_available(UNARY[t])))
            lines.append(f"  {name} = {_s(t, dims)} {op}({cur})")
        elif kind == "binary" and _available(BINARY[t]):
            op = draw(st.sampled_from(_available(BINARY[t])))
            other = draw(st.sampled_from(["self", "param"]))
            if other == "param":
                pname = f"p{len(params)}"
                lines.append(f"  {pname} = {_s(t, dims)} parameter({len(params)})")
                params.append((t, list(dims)))
                n += 1
            else:
                pname = cur
            lines.append(f"  {name} = {_s(t, dims)} {op}({cur}, {pname})")
        elif shape_ops:
            op = draw(st.sampled_from(shape_ops))
            if op == "broadcast":
                if len(dims) >= 4:
                    continue
                pos = draw(st.integers(0, len(dims)))
                size = draw(st.integers(1, 3))
                new = dims[:pos] + [size] + dims[pos:]
                mapping = [d if d < pos else d + 1 for d in range(len(dims))]
                lines.append(f"  {name} = {_s(t, new)} broadcast({cur}), dimensions={{{','.join(map(str, mapping))}}}")
                dims = new
            elif op == "reduce":
                if not dims:
                    continue
                red = sorted(draw(st.sets(st.integers(0, len(dims) - 1), min_size=1)))
                which = draw(st.sampled_from(["add", "max"]))
                init = f"init{k}"
                lines.append(f"  {init} = {t}[] constant(0)")
                n += 1
                new = [d for j, d in enumerate(dims) if j not in red]
                lines.append(f"  {name} = {_s(t, new)} reduce({cur}, {init}), dimensions={{{','.join(map(str, red))}}}, "
                             f"to_apply={which}_{t}")
                dims = new
            elif op == "transpose":
                perm = draw(st.permutations(list(range(len(dims)))))
                new = [dims[p] for p in perm]
                lines.append(f"  {name} = {_s(t, new)} transpose({cur}), dimensions={{{','.join(map(str, perm))}}}")
                dims = new
            elif op == "slice":
                parts, new = [], []
                for d in dims:
                    start = draw(st.integers(0, d - 1))
                    limit = draw(st.integers(start + 1, d))
                    stride = draw(st.integers(1, 2))
                    parts.append(f"[{start}:{limit}:{stride}]")
                    new.append(-(-(limit - start) // stride))
                lines.append(f"  {name} = {_s(t, new)} slice({cur}), slice={{{', '.join(parts)}}}")
                dims = new
            elif op == "reshape":
                total = int(np.prod(dims)) if dims else 1
                factor = draw(st.sampled_from([f for f in (1, 2, 3, 4) if total % f == 0]))
                new = [total // factor, factor] if draw(st.booleans()) else [total]
                lines.append(f"  {name} = {_s(t, new)} reshape({cur})")
                dims = new
            elif op == "reverse":
                rev = sorted(draw(st.sets(st.integers(0, max(len(dims) - 1, 0)), max_size=len(dims))))
                lines.append(f"  {name} = {_s(t, dims)} reverse({cur}), dimensions={{{','.join(map(str, rev))}}}")
            elif op == "concatenate":
                if not dims:
                    continue
                d = draw(st.integers(0, len(dims) - 1))
                new = list(dims)
                new[d] *= 2
                lines.append(f"  {name} = {_s(t, new)} concatenate({cur}, {cur}), dimensions={{{d}}}")
                dims = new
            elif op == "pad":
                if not dims:
                    continue
                cfg, new = [], []
                for d in dims:
                    lo, hi, it = draw(st.integers(-1, 2)), draw(st.integers(0, 2)), draw(st.integers(0, 1))
                    size = lo + hi + d + max(d - 1, 0) * it
                    if size < 0:
                        lo, size = 0, hi + d + max(d - 1, 0) * it
                    cfg.append(f"{lo}_{hi}_{it}" if it else f"{lo}_{hi}")
                    new.append(size)
                pv = f"pv{k}"
                lines.append(f"  {pv} = {t}[] constant(0)")
                n += 1
                padding = "x".join(cfg)
                lines.append(f"  {name} = {_s(t, new)} pad({cur}, {pv}), padding={padding}")
                dims = new
            elif op == "convert":
                t2 = "s32" if t == "f32" else "f32"
                lines.append(f"  {name} = {_s(t2, dims)} convert({cur})")
                t = t2
            elif op == "compare-select":
                z = f"z{k}"
                lines.append(f"  {z} = {_s(t, dims)} broadcast({t}[] constant(0)), dimensions={{}}")
                lines.append(f"  c{k} = {_s('pred', dims)} compare({cur}, {z}), direction=GT")
                lines.append(f"  {name} = {_s(t, dims)} select(c{k}, {cur}, {z})")
                n += 3
            elif op == "iota-add":
                if not dims:
                    continue
                d = draw(st.integers(0, len(dims) - 1))
                lines.append(f"  io{k} = {_s(t, dims)} iota(), iota_dimension={d}")
                lines.append(f"  {name} = {_s(t, dims)} add({cur}, io{k})")
                n += 1
            else:
                continue
        else:
            continue
        cur = name
        n += 1
    lines.append(f"  ROOT out = {_s(t, dims)} copy({cur})" if rule_for("copy") else
                 f"  ROOT out = {_s(t, dims)} negate({cur})")
    n += 1
    comps = "".join(c.format(t=tt) for tt in ("f32", "s32") for c in (ADD, MAX))
    text = "HloModule gen\n\n" + comps + "\nENTRY main {\n" + "\n".join(lines) + "\n}\n"
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    inputs = []
    for pt, pd in params:
        if pt == "f32":
            inputs.append(rng.standard_normal(pd).astype(np.float32))
        else:
            inputs.append(rng.integers(-5, 6, pd).astype(np.int32))
    return text, n, inputs


def test_generator_has_enough_opcodes():
    """The property below only uses opcodes with both rules; there must be plenty of them."""
    assert len(_available(UNARY["f32"])) >= 6, _available(UNARY["f32"])
    assert len(_available(BINARY["f32"])) >= 5, _available(BINARY["f32"])
    assert len(_shape_ops_available()) >= 8, _shape_ops_available()


def test_law_on_generated_modules():
    stats = Counter()

    @settings(max_examples=150, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(programs())
    def prop(program):
        text, n, inputs = program
        module = parse(text, "gen.hlo")
        # a valid module: the checker accepts it (the rules agree with the shapes written here)
        errs = [d for d in check_module(module, text, warnings=False) if d.severity == "error"]
        assert not errs, text + "\n" + "\n".join(d.format() for d in errs)
        hook = LawHook(module)
        with np.errstate(all="ignore"):
            run(module, *inputs, hook=hook, check_values=False)
        assert not hook.problems, text + "\n" + "\n".join(hook.problems)
        stats.update(hook.checked)
        stats["<modules>"] += 1

    prop()
    modules = stats.pop("<modules>")
    assert modules >= 100
    assert sum(stats.values()) >= 500, stats
    assert len(stats) >= 15, sorted(stats)
