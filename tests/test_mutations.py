"""Mutation tests: break real modules (samples/jax, before and after optimization) one place at a time,
on the text, and `hlo check` must name the broken instruction.

Three kinds of mutation, each applied to instructions chosen deterministically (by a hash of the file
and instruction name):

- a declared dimension: one dimension of the result shape grows by one;
- an attribute: dimensions={...} of transpose/broadcast/reduce/reverse, a slice bound, a window size,
  a dot contracting dimension, a get-tuple-element index, a pad amount, dynamic-slice or gather
  slice sizes; each mutation is made so the module is certainly invalid (the new value changes the
  result or breaks a constraint);
- an element type of the result.

What must hold: the first error (in source order) names the mutated instruction, and every error names
either it or an instruction its value flows to (a user, transitively; through a computation's root
to the instructions that call the computation).
"""
from __future__ import annotations

import re
import zlib
from collections import defaultdict
from pathlib import Path

import pytest

from hlo_cli.checker import check_module
from hlo_cli.errors import HloError
from hlo_cli.parser import parse

ROOT = Path(__file__).resolve().parent.parent
JAX = sorted((ROOT / "samples" / "jax").glob("*.hlo"))

# per file and kind; rng modules are ten times larger (slower to re-parse), so they get fewer
PER_KIND = 10
PER_KIND_LARGE = 4

# opcodes whose declared result is free (not a function of operands and attributes): a changed
# declaration is not an error there
FREE_RESULT = {"parameter", "constant", "iota", "rng", "rng-bit-generator", "rng-get-and-update-state",
               "custom-call", "infeed", "recv", "recv-done", "after-all", "dynamic-reshape"}
# ... and opcodes whose result *type* is free (conversions; dot/convolution's preferred type)
FREE_TYPE = FREE_RESULT | {"convert", "bitcast-convert", "stochastic-convert", "bitcast", "dot", "convolution",
                           "ragged-dot", "scaled-dot", "reduce-precision"}

_HEAD = re.compile(r"^(?P<lead>\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*)(?P<shape>\S.*?)\s+"
                   r"(?P<op>[a-z][a-z0-9\-]*)\((?P<rest>.*)$")
_ARRAY = re.compile(r"(?P<et>[a-z][a-z0-9]*)\[(?P<dims>[^\]]*)\]")
_TAIL = re.compile(r", (?:metadata|frontend_attributes|backend_config|sharding|statistics|origin)=")


class Site:
    """One instruction of a parsed module and where its text is."""

    def __init__(self, comp, inst, lines):
        self.comp, self.inst = comp, inst
        self.k = inst.loc.line - 1
        self.line = lines[self.k]
        self.m = _HEAD.match(self.line)

    @property
    def ok(self) -> bool:
        return self.m is not None and self.m["name"] == self.inst.name and self.m["op"] == self.inst.opcode

    def head_and_tail(self):
        """The line split before its metadata-like attributes (whose strings may contain anything)."""
        t = _TAIL.search(self.line)
        cut = t.start() if t else len(self.line)
        return self.line[:cut], self.line[cut:]


def _rank(key: str) -> int:
    return zlib.crc32(key.encode())


def _choose(sites, kind: str, path: Path, n: int):
    return sorted(sites, key=lambda s: _rank(f"{path.name}:{s.comp.name}:{s.inst.name}:{kind}"))[:n]


def _operand_shapes(site):
    by = site.comp.by_name
    return [by[o].shape for o in site.inst.operands]


# ----------------------------------------------------------------------------- mutations

def mutate_dimension(site):
    """One dimension of the first array leaf of the declared shape grows by one."""
    shape_text = site.m["shape"]
    a = _ARRAY.search(shape_text)
    if a is None or not a["dims"]:
        return None
    dims = a["dims"].split(",")
    if not all(d.isdigit() for d in dims):
        return None
    choices = list(range(len(dims)))
    if site.inst.opcode == "broadcast":          # only dimensions mapped from the operand are checked
        choices = list(site.inst.attrs.get("dimensions") or ())
    if not choices:
        return None
    j = choices[_rank(site.inst.name) % len(choices)]
    dims[j] = str(int(dims[j]) + 1)
    new_shape = shape_text[:a.start("dims")] + ",".join(dims) + shape_text[a.end("dims"):]
    return site.line[:site.m.start("shape")] + new_shape + site.line[site.m.end("shape"):]


_OTHER_TYPE = {"pred": "s32", "f16": "f32", "bf16": "f32", "f32": "s32", "f64": "f32", "s8": "u8", "u8": "s8",
               "s16": "s32", "u16": "u32", "s32": "f32", "u32": "s32", "s64": "s32", "u64": "u32",
               "c64": "f32", "c128": "f64"}


def mutate_element_type(site):
    shape_text = site.m["shape"]
    a = _ARRAY.search(shape_text)
    if a is None or a["et"] not in _OTHER_TYPE:
        return None
    new_shape = shape_text[:a.start("et")] + _OTHER_TYPE[a["et"]] + shape_text[a.end("et"):]
    return site.line[:site.m.start("shape")] + new_shape + site.line[site.m.end("shape"):]


def _braces(values) -> str:
    return "{" + ",".join(map(str, values)) + "}"


def _sub_attr(site, pattern: str, replacement: str):
    head, tail = site.head_and_tail()
    new, n = re.subn(pattern, lambda _m: replacement, head, count=1)
    return new + tail if n == 1 and new != head else None


def mutate_attribute(site):
    inst, op = site.inst, site.inst.opcode
    attrs = inst.attrs
    ops = _operand_shapes(site)
    x = ops[0] if ops else None
    if op == "transpose":
        perm = list(attrs["dimensions"])
        for i in range(len(perm)):
            for j in range(i + 1, len(perm)):
                if x.dims[perm[i]] != x.dims[perm[j]]:
                    perm[i], perm[j] = perm[j], perm[i]
                    return _sub_attr(site, r"\bdimensions=\{[^}]*\}", "dimensions=" + _braces(perm))
        return None
    if op == "broadcast":
        dims = list(attrs.get("dimensions") or ())
        if not dims:
            return None
        out = inst.shape.dims
        bad = next((t for t in range(len(out)) if t not in dims and out[t] != x.dims[0]), len(out))
        dims[0] = bad
        return _sub_attr(site, r"\bdimensions=\{[^}]*\}", "dimensions=" + _braces(dims))
    if op == "reduce" and x is not None and not x.is_tuple:
        dims = list(attrs["dimensions"])
        if not dims:
            return None
        kept = [d for d in range(x.rank) if d not in dims and x.dims[d] != x.dims[dims[0]]]
        dims[0] = kept[0] if kept else x.rank
        return _sub_attr(site, r"\bdimensions=\{[^}]*\}", "dimensions=" + _braces(sorted(dims)))
    if op == "reverse":
        dims = list(attrs["dimensions"]) or [0]
        dims[0] = x.rank
        return _sub_attr(site, r"\bdimensions=\{[^}]*\}", "dimensions=" + _braces(dims))
    if op == "slice":
        spec = attrs["slice"].dimensions
        parts = [(d.start, d.limit, d.stride) for d in spec]
        k = _rank(inst.name) % len(parts)
        s, lim, st = parts[k]
        parts[k] = (s, lim - 1, st) if st == 1 and lim - 1 > s else (s, x.dims[k] + 1, st)
        text = "{" + ", ".join(f"[{a}:{b}]" if c == 1 else f"[{a}:{b}:{c}]" for a, b, c in parts) + "}"
        return _sub_attr(site, r"\bslice=\{[^}]*\}", "slice=" + text)
    if op in ("reduce-window", "select-and-scatter", "convolution") and attrs.get("window") is not None:
        win = attrs["window"].dimensions
        cands = [k for k, w in enumerate(win) if w.stride == 1 or op == "convolution"]
        if not cands:
            return None
        k = cands[_rank(inst.name) % len(cands)]
        sizes = [w.size for w in win]
        sizes[k] += 1
        return _sub_attr(site, r"(?<=\bsize=)[0-9x]+", "x".join(map(str, sizes)))
    if op == "dot":
        lhs, rhs = ops[0], ops[1]
        for side, shape in (("lhs", lhs), ("rhs", rhs)):
            contracting = list(attrs.get(f"{side}_contracting_dims") or ())
            batch = set(attrs.get(f"{side}_batch_dims") or ())
            if not contracting:
                continue
            other = [d for d in range(shape.rank) if d not in batch and d not in contracting
                     and shape.dims[d] != shape.dims[contracting[0]]]
            if other:
                contracting[0] = other[0]
                return _sub_attr(site, rf"\b{side}_contracting_dims=\{{[^}}]*\}}",
                                 f"{side}_contracting_dims=" + _braces(contracting))
        return None
    if op == "get-tuple-element":
        idx = attrs["index"]
        elems = x.tuple_shapes
        other = next((j for j, s in enumerate(elems) if s.without_layout() != elems[idx].without_layout()),
                     len(elems))
        return _sub_attr(site, r"\bindex=\d+", f"index={other}")
    if op == "pad":
        pads = [(d.low, d.high, d.interior) for d in attrs["padding"].dimensions]
        lo, hi, it = pads[0]
        pads[0] = (lo + 1, hi, it)
        text = "x".join(f"{a}_{b}" + (f"_{c}" if c else "") for a, b, c in pads)
        return _sub_attr(site, r"\bpadding=[0-9_x\-]+", "padding=" + text)
    if op == "dynamic-slice":
        sizes = list(attrs["dynamic_slice_sizes"])
        k = _rank(inst.name) % len(sizes)
        sizes[k] = sizes[k] - 1 if sizes[k] > 0 else 1
        return _sub_attr(site, r"\bdynamic_slice_sizes=\{[^}]*\}", "dynamic_slice_sizes=" + _braces(sizes))
    if op == "gather":
        sizes = list(attrs["slice_sizes"])
        k = _rank(inst.name) % len(sizes)
        sizes[k] += 1
        return _sub_attr(site, r"\bslice_sizes=\{[^}]*\}", "slice_sizes=" + _braces(sizes))
    return None


KINDS = {"dimension": mutate_dimension, "attribute": mutate_attribute, "element-type": mutate_element_type}


def _eligible(site, kind: str) -> bool:
    op = site.inst.opcode
    if not site.ok or site.inst.shape is None:
        return False
    if kind == "dimension":
        return op not in FREE_RESULT
    if kind == "element-type":
        return op not in FREE_TYPE and not op.endswith(("-start", "-done", "-update"))
    return True


# ----------------------------------------------------------------------------- what may be reported

def _downstream(module, comp_name: str, inst_name: str) -> set[str]:
    """The instruction and every instruction its value can reach (users, transitively; through a
    computation's root to the instructions calling that computation)."""
    users = defaultdict(set)              # (comp, name) -> {(comp, name)}
    callers = defaultdict(set)            # comp -> {(comp, name)}
    for comp in module.computations:
        for inst in comp.instructions:
            for o in inst.operands:
                users[(comp.name, o)].add((comp.name, inst.name))
            for called in inst.called_computations:
                callers[called].add((comp.name, inst.name))
    roots = {comp.name: comp.root for comp in module.computations}
    seen = {(comp_name, inst_name)}
    todo = [(comp_name, inst_name)]
    while todo:
        node = todo.pop()
        nxt = set(users[node])
        if roots.get(node[0]) == node[1]:
            nxt |= callers[node[0]]
        for n in nxt - seen:
            seen.add(n)
            todo.append(n)
    return {name for _, name in seen}


def _cases():
    out = []
    for path in JAX:
        n = PER_KIND_LARGE if path.name.startswith("rng") else PER_KIND
        for kind in KINDS:
            out.append(pytest.param(path, kind, n, id=f"{path.name}-{kind}"))
    return out


@pytest.mark.parametrize("path,kind,n", _cases())
def test_mutations_are_reported_on_the_mutated_instruction(path, kind, n):
    text = path.read_text()
    module = parse(text, str(path))
    assert not [d for d in check_module(module, text) if d.severity == "error"]
    lines = text.split("\n")
    sites = [Site(c, i, lines) for c, i in module.instructions() if i.loc.line]
    sites = [s for s in sites if _eligible(s, kind)]
    tried = 0
    problems = []
    for site in sorted(sites, key=lambda s: _rank(f"{path.name}:{s.comp.name}:{s.inst.name}:{kind}")):
        if tried >= n:
            break
        new_line = KINDS[kind](site)
        if new_line is None or new_line == site.line:
            continue
        tried += 1
        mutated = "\n".join(lines[:site.k] + [new_line] + lines[site.k + 1:])
        where = f"{path.name}:{site.k + 1} {kind}: {site.line.strip()[:100]}\n   -> {new_line.strip()[:100]}"
        try:
            mmod = parse(mutated, str(path))
        except HloError as e:
            names = {d.instruction for d in e.diagnostics}
            if site.inst.name not in names:
                problems.append(f"{where}\n   the parser rejects it without naming %{site.inst.name}: {e}")
            continue
        errs = [d for d in check_module(mmod, mutated) if d.severity == "error"]
        if not errs:
            problems.append(f"{where}\n   no error reported")
            continue
        first = errs[0]
        allowed = _downstream(module, site.comp.name, site.inst.name)
        stray = [d for d in errs if d.instruction not in allowed]
        if first.instruction != site.inst.name or stray:
            shown = "\n     ".join(d.format(False) for d in errs[:5])
            problems.append(f"{where}\n   first error names %{first.instruction}, not %{site.inst.name}"
                            + (f"; unrelated: {[d.instruction for d in stray]}" if stray else "")
                            + f"\n     {shown}")
    assert not problems, "\n".join(problems)
    assert tried > 0 or kind == "attribute"


def test_enough_mutations_are_tried():
    """The deterministic choice yields many distinct mutations over the samples (no silent shrinking)."""
    counts = defaultdict(int)
    for path in JAX:
        text = path.read_text()
        module = parse(text, str(path))
        lines = text.split("\n")
        n = PER_KIND_LARGE if path.name.startswith("rng") else PER_KIND
        for kind, fn in KINDS.items():
            sites = [s for s in (Site(c, i, lines) for c, i in module.instructions() if i.loc.line)
                     if _eligible(s, kind)]
            made = 0
            for site in sorted(sites, key=lambda s: _rank(f"{path.name}:{s.comp.name}:{s.inst.name}:{kind}")):
                if made >= n:
                    break
                if fn(site) not in (None, site.line):
                    made += 1
                    counts[(kind, site.inst.opcode)] += 1
    by_kind = defaultdict(int)
    for (kind, _), c in counts.items():
        by_kind[kind] += c
    assert by_kind["dimension"] >= 150 and by_kind["element-type"] >= 150 and by_kind["attribute"] >= 80, dict(by_kind)
    attr_ops = {op for (kind, op) in counts if kind == "attribute"}
    assert {"transpose", "broadcast", "reduce", "slice", "dot", "get-tuple-element"} <= attr_ops, attr_ops
    assert attr_ops & {"reduce-window", "convolution", "select-and-scatter"}, attr_ops
