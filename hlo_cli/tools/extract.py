"""`hlo extract`: a small self-contained module computing one instruction, with the real values.

The piece: the instruction NAME of computation C, its operands HEIGHT levels up (constants they read
are taken along whatever the level), and its users DEPTH levels down (in C).  What the piece reads
from outside it is cut: each cut value becomes a parameter named as the instruction it was (a
tuple becomes the tuple of its leaves' parameters; a token an `after-all()`), or, by option, a
constant holding the value, or a parameter given zeros or random values.  The computations the
piece calls (fusions, loops, reducers) come along as they are; instructions keep their metadata and
layouts, so the module reads like the one it came from.  ROOT: NAME, or the tuple of the piece's
instructions no other instruction of the piece uses (DEPTH > 0).

The values are the run's: hlo runs the module (or reads an `hlo run --dump-dir` directory) and
takes, at NAME's EXECUTION-th execution, the latest value of every cut instruction and the values
the ROOT gives (the expected value).  `verify` runs the extracted module on those values: with cut
values kept as they were it gives the expected value bit for bit.
"""
from __future__ import annotations

import dataclasses
import difflib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import HloInputError
from ..pipeline.io import leaves_with_shapes
from ..ir.module import Instruction, Module
from ..ir.shape import Shape
from . import slicing

CUTS = ("parameters", "constants", "zeros", "random")
_HEADER_DROP = ("entry_computation_layout", "input_output_alias", "buffer_donor", "allow_spmd_sharding_propagation_to_output",
                "allow_spmd_sharding_propagation_to_parameters")


@dataclass
class Extracted:
    module: Module
    text: str
    inputs: dict                      # parameter name -> array, in parameter order
    expected: list                    # the ROOT's array leaves
    root: str
    cut: list                         # the names of the cut instructions
    piece: list                       # the names of the instructions taken
    execution: int = 1
    per_device: bool = False          # values one per device, stacked (hlo run --per-device)
    notes: list = field(default_factory=list)


def find_instruction(module, name: str, computation: str | None = None):
    """(computation, instruction) named NAME (in COMPUTATION when given); HloInputError when there is
    none (with the closest names) or several."""
    hits = [(c, i) for c, i in module.instructions() if i.name == name.lstrip("%")
            and (computation is None or c.name == computation)]
    if not hits:
        names = [i.name for _, i in module.instructions()]
        close = difflib.get_close_matches(name.lstrip("%"), names, n=3)
        raise HloInputError(f"--instruction {name}: no such instruction in module {module.name}"
                            + (f" (did you mean {', '.join('%' + c for c in close)}?)" if close else ""))
    if len(hits) > 1:
        raise HloInputError(f"--instruction {name}: {len(hits)} computations have one "
                            f"({', '.join(c.name for c, _ in hits)}); choose with --computation")
    return hits[0]


def select(comp, name: str, height: int, depth: int) -> list[str]:
    """The names of the piece, in COMP's order."""
    by = comp.by_name
    want = {name}
    frontier = {name}
    for _ in range(height):
        nxt = set()
        for n in frontier:
            for o in by[n].operands:
                if o not in want and by[o].opcode != "parameter":
                    nxt.add(o)
        want |= nxt
        frontier = nxt
    users: dict = {}
    for i in comp.instructions:
        for o in i.operands:
            users.setdefault(o, []).append(i.name)
    frontier = {name}
    for _ in range(depth):
        nxt = {u for n in frontier for u in users.get(n, ()) if u not in want}
        want |= nxt
        frontier = nxt
    for n in list(want):                       # the constants the piece reads come along
        for o in by[n].operands:
            if by[o].opcode == "constant":
                want.add(o)
    return [i.name for i in comp.instructions if i.name in want]


def with_contracted_products(comp, module, piece: list[str]) -> list[str]:
    """PIECE with the multiply (and negate) of every add/subtract in it that XLA CPU contracts into
    one FMA (interpreter/contraction.py): cut at the add, the piece would read the rounded product
    and round twice, not computing the value the whole module computes."""
    from ..interpreter.contraction import contracted_products
    folded = contracted_products(comp, module)
    want = set(piece)
    for n in piece:
        want.update(folded.get(n, ()))
    if len(want) == len(piece):
        return piece
    by = comp.by_name
    for n in list(want):                       # the constants the products read come along
        for o in by[n].operands:
            if by[o].opcode == "constant":
                want.add(o)
    return [i.name for i in comp.instructions if i.name in want]


class _Stop(BaseException):
    pass


def capture(module, args, comp, piece: list, sinks: list, cut: list, name: str, execution: int, options,
            progress=None, dv=None):
    """Run MODULE on ARGS until NAME's EXECUTION-th execution (in COMP) and every sink after it has
    run; (the latest value of each cut instruction then, the sinks' values).  With DV (a multi-device
    DeviceRun) every value is one per device, stacked on a leading axis.  HloInputError when NAME
    runs fewer times."""
    from ..interpreter import run_module
    latest, got = {}, {}
    count = dv.grid.count if dv is not None else None

    def _copy(v, ev=None):
        return _per_device(v, ev, count) if count is not None else _plain_copy(v)
    cutset, pieceset = set(cut), set(piece)
    state = {"count": 0, "armed": False}

    def hook(ev):
        if ev.computation.name != comp.name:
            return
        n = ev.instruction.name
        if n in cutset:
            latest[n] = _copy(ev.value, ev)
        if n == name:
            state["count"] += 1
            if state["count"] == execution:
                state["armed"] = True
        if state["armed"] and n in pieceset and n not in got:
            got[n] = _copy(ev.value, ev)
            if all(s in got for s in sinks):
                raise _Stop()
    try:
        if dv is not None:
            dv.run(dv.distribute(list(args)), options, hook, progress)
        else:
            run_module(module, list(args), options, hook, progress)
    except _Stop:
        pass
    # (users the run never executes, e.g. a get-tuple-element nothing reads, are left out by the caller)
    if not state["armed"]:
        raise HloInputError(f"--execution {execution}: {name} ran {state['count']} time"
                            f"{'s' if state['count'] != 1 else ''} in this run")
    return latest, got


def _plain_copy(v):
    if isinstance(v, tuple):
        return tuple(_plain_copy(x) for x in v)
    return np.array(v, copy=True) if isinstance(v, np.ndarray) else v


def _per_device(v, ev, count: int):
    """EV's value with every array leaf one per device (a value held once repeated), stacked."""
    devices = getattr(ev, "devices", None)
    if devices is not None and tuple(int(d) for d in devices) != tuple(range(count)):
        raise HloInputError(f"{ev.instruction.name} runs on devices {list(devices)} only (of {count}); extract an "
                            f"instruction every device runs")
    shape = ev.instruction.shape

    def go(x, s):
        if s.is_tuple:
            return tuple(go(a, t) for a, t in zip(x, s.tuple_shapes))
        if not isinstance(x, np.ndarray) and not isinstance(x, np.generic):
            return x
        x = np.asarray(x)
        if devices is not None and x.ndim == s.rank + 1:
            return np.array(x, copy=True)
        return np.array(np.broadcast_to(x, (count,) + x.shape), copy=True)
    return go(v, shape)


def values_from_dump(directory: str, comp, piece, sinks, cut, name: str, execution: int):
    """The same values from an `hlo run --dump-dir` directory (its manifest and .npy files)."""
    d = Path(directory)
    try:
        doc = json.loads((d / "manifest.json").read_text())
    except (OSError, ValueError) as e:
        raise HloInputError(f"--values-from {directory}: not an `hlo run --dump-dir` directory ({e})") from None
    if doc.get("summary_only"):
        raise HloInputError(f"--values-from {directory}: the dump holds statistics only (--dump-summary)")
    entries = [e for e in doc.get("instructions", []) if e.get("computation") == comp.name]
    target = next((e for e in entries if e.get("instruction") == name and e.get("execution", 1) == execution), None)
    if target is None:
        raise HloInputError(f"--values-from {directory}: the dump has no value of {name} (execution {execution}; "
                            f"was it dumped with a --dump-filter?)")
    order = target["order"]
    by = comp.by_name

    def load(e, shape):
        if e.get("per_device"):
            raise HloInputError(f"--values-from {directory}: a multi-device dump; extract from the module and its "
                                f"inputs instead")
        arrays = [np.load(d / f, allow_pickle=False) for f in e.get("files", [])]
        from ..interpreter.inputs import coerce
        leaves = [coerce(a, s, f"{e['instruction']} in {directory}") for a, s in
                  zip(arrays, list(shape.leaves()) if shape.is_tuple else [shape])]
        return _unflatten(leaves, shape)
    latest, got = {}, {}
    for c in cut:
        cands = [e for e in entries if e.get("instruction") == c and e["order"] < order]
        if cands:
            latest[c] = load(max(cands, key=lambda e: e["order"]), by[c].shape)
    for s in set(piece) & set(sinks):
        cands = [e for e in entries if e.get("instruction") == s and e["order"] >= order]
        if cands:
            got[s] = load(min(cands, key=lambda e: e["order"]), by[s].shape)
    missing = [c for c in cut if c not in latest and not slicing.is_token(by[c].shape)]
    if missing:
        raise HloInputError(f"--values-from {directory}: the dump has no value of {', '.join(missing[:5])} (dumped "
                            f"with a --dump-filter?)")
    return latest, got


def _unflatten(leaves: list, shape: Shape):
    it = iter(leaves)

    def build(s):
        if s.is_tuple:
            return tuple(build(t) for t in s.tuple_shapes)
        if s.element_type in ("token", "opaque"):
            return None
        return next(it)
    return build(shape)


def extract(module, instruction: str, *, args=None, computation: str | None = None, height: int = 0,
            depth: int = 0, execution: int = 1, cut_as: str = "parameters", values_from: str | None = None,
            options=None, seed: int = 0) -> Extracted:
    """The piece around INSTRUCTION as a module, with the values of the run on ARGS (or of the dump
    VALUES_FROM); see the module docstring.  CUT_AS: parameters (the real values as inputs),
    constants (the real values written in), zeros or random (parameters given those values; the
    expected value is then what hlo computes on them)."""
    from ..interpreter import RunOptions
    if cut_as not in CUTS:
        raise HloInputError(f"--cut {cut_as}: one of {', '.join(CUTS)}")
    comp, inst = find_instruction(module, instruction, computation)
    name = inst.name
    piece = with_contracted_products(comp, module, select(comp, name, height, depth))
    pset = set(piece)
    by = comp.by_name
    used = {o for n in piece for o in by[n].operands}
    sinks = [n for n in piece if n not in used or n == name]
    sinks = [n for n in sinks if by[n].opcode != "constant" or n == name]
    options = options or RunOptions()
    from ..pipeline.devices import DeviceRun
    dv = DeviceRun(module, {})
    if not dv.multi:
        dv = None
    elif dv.global_values:
        raise HloInputError(f"module {module.name} runs before SPMD partitioning (its values are global arrays): "
                            f"extract from a program per device (the module after XLA's partitioning)")
    elif values_from is not None:
        raise HloInputError("--values-from: a multi-device module; extract from the module and its inputs")
    for _ in range(2):               # again without the users the run never executed
        cut = []
        for n in piece:
            for o in by[n].operands:
                if o not in pset and o not in cut:
                    cut.append(o)
        if values_from is not None:
            latest, got = values_from_dump(values_from, comp, piece, sinks, cut, name, execution)
        else:
            latest, got = capture(module, args, comp, piece, sinks, cut, name, execution, options, dv=dv)
        dead = [s for s in sinks if s not in got]
        if not dead:
            break
        piece = [n for n in piece if n not in dead]
        pset = set(piece)
        used = {o for n in piece for o in by[n].operands}
        sinks = [n for n in piece if (n not in used or n == name) and (by[n].opcode != "constant" or n == name)]
    rng = np.random.default_rng(seed)
    entry: list[Instruction] = []
    inputs: dict = {}
    drop = ("control-predecessors",)

    # a product XLA CPU contracts into an add of the piece reads its cut operands as parameters even
    # with --cut constants: XLA folds a product of constants first, so written in they would give
    # the product rounded on its own, not the FMA the whole module computes
    from ..interpreter.contraction import contracted_products
    folded = {m for n, ms in contracted_products(comp, module).items() if n in pset for m in ms}
    fed = {o for m in folded for o in by[m].operands if o in cut}
    # a product contracted into an add of the piece is not an output of it: as an output XLA CPU
    # keeps it a value of its own (rounded; its common subexpression elimination would merge a
    # second copy of it back), and the add would no longer be the FMA the whole module computes
    inner = [s for s in sinks if s in folded and s in used]
    sinks = [s for s in sinks if s not in inner]
    kept = []

    def leaf(base, shape, value):
        if cut_as == "constants" and base not in fed:
            if dv is not None:
                if any(not np.array_equal(value[0], v, equal_nan=True) for v in value[1:]):
                    raise HloInputError(f"--cut constants: {base} differs between devices; cut it as a parameter")
                value = value[0]
            return slicing.constant(base, shape, value), None
        if cut_as == "constants":
            kept.append(base)
        if cut_as == "zeros":
            value = np.zeros_like(np.asarray(value))
        elif cut_as == "random":
            from ..interpreter.inputs import random_value
            value = random_value(shape, rng)
            if dv is not None:
                value = np.stack([random_value(shape, rng) for _ in range(dv.grid.count)])
        return slicing.parameter(base, 0, shape, keep_layout=True), np.asarray(value)
    for n in cut:
        insts, vals = slicing.as_parameters(n, by[n].shape, latest.get(n), by[n].loc, leaf)
        for i in insts:
            if i.opcode == "parameter":
                i = dataclasses.replace(i, parameter_number=len(inputs), loc=by[n].loc)
                inputs[i.name] = vals[i.name]
            entry.append(i)
    for n in piece:
        i = by[n]
        entry.append(_keep(i, drop))
    if len(sinks) == 1:
        root = sinks[0]
        expected_value = got[root]
    else:
        root = f"{name}.extracted"
        entry.append(Instruction(root, "tuple", Shape.tuple_of([by[s].shape for s in sinks]), tuple(sinks)))
        expected_value = tuple(got[s] for s in sinks)
    attrs = {k: v for k, v in module.attrs.items() if k not in _HEADER_DROP}
    out = slicing.build_module(f"extracted_{_safe(name)}", module, entry, root, attrs, plain=False)
    out = dataclasses.replace(out, stack_frames=module.stack_frames)
    from ..ir.printer import format_module
    text = format_module(out)
    root_shape = out.entry_computation.root_instruction.shape
    expected = [np.asarray(v) for v, _ in leaves_with_shapes(expected_value, root_shape)]
    ex = Extracted(out, text, inputs, expected, root, cut, piece, execution, per_device=dv is not None)
    if dv is not None:
        ex.notes.append(f"a program on {dv.grid.count} devices: every input and the expected value hold one value per "
                        f"device, stacked on a leading axis (hlo run --per-device)")
    if inner:
        ex.notes.append(f"{', '.join(inner)}: not an output of the piece: XLA CPU contracts "
                        f"{'it' if len(inner) == 1 else 'each'} into an add of the piece (one FMA), which an "
                        f"output of its own would prevent")
    if kept:
        ex.notes.append(f"--cut constants: {', '.join(kept)} kept as parameters: each feeds a multiply that XLA CPU "
                        f"contracts into an add of the piece (one FMA), which a product of constants would not be")
    if cut_as in ("zeros", "random"):
        ex.expected = run_extracted(ex, options)
        ex.notes.append(f"cut values {cut_as}: the expected value is what hlo computes on them")
    return ex


def _keep(inst, drop):
    return dataclasses.replace(inst, attrs={k: v for k, v in inst.attrs.items() if k not in drop})


def _safe(name: str) -> str:
    import re
    return re.sub(r"[^\w.\-]", "_", name)


def run_extracted(ex: Extracted, options=None) -> list:
    """hlo's result leaves of the extracted module on its inputs (parsed back from its text)."""
    from ..interpreter import RunOptions, run_module
    from ..parser import parse
    mod = parse(ex.text)
    if ex.per_device:
        from ..pipeline.devices import DeviceRun
        dv = DeviceRun(mod, {"per_device": True})
        res = dv.run(dv.distribute(list(ex.inputs.values())), options or RunOptions(), None, None)
        return [leaf.stacked if leaf.stacked is not None else
                np.array(np.broadcast_to(leaf.global_value, (dv.grid.count,) + np.shape(leaf.global_value)))
                for leaf in dv.leaves(res)]
    res = run_module(mod, list(ex.inputs.values()), options or RunOptions())
    return [np.asarray(v) for v, _ in leaves_with_shapes(res, mod.entry_computation.root_instruction.shape)]


def verify(ex: Extracted, options=None) -> dict:
    """Run the extracted module on its inputs: {"identical": bool, "rows": per leaf}."""
    from ..diff.values import compare_leaves
    got = run_extracted(ex, options)
    rows, same = [], len(got) == len(ex.expected)
    for k, (g, w) in enumerate(zip(got, ex.expected)):
        bits = g.dtype == w.dtype and g.shape == w.shape and g.tobytes() == w.tobytes()
        same = same and bits
        row = {"key": f"out{k}", "identical": bits}
        if not bits:
            row.update(compare_leaves([w], [g], 0.0, 0.0))
        rows.append(row)
    return {"identical": same, "rows": rows}


def write(ex: Extracted, out: str, force: bool = False) -> dict:
    """OUT (the module text), OUT's stem + .inputs.npz and + .expected.npz (keys out0...).  Refuses
    (HloInputError) to replace an existing file unless FORCE."""
    from ..pipeline.io import replace_file, storable, write_new
    p = Path(out)
    stem = p.name[:-len(p.suffix)] if p.suffix else p.name
    paths = {"module": p, "inputs": p.with_name(stem + ".inputs.npz"), "expected": p.with_name(stem + ".expected.npz")}
    if not ex.inputs:
        del paths["inputs"]
    if not force:
        there = [str(q) for q in paths.values() if q.exists() or q.is_symlink()]
        if there:
            raise HloInputError(f"{', '.join(there)} already exist{'s' if len(there) == 1 else ''}; pass --force "
                                f"to replace {'it' if len(there) == 1 else 'them'}")
    put = replace_file if force else (lambda path, fn, what: write_new(path, fn, what))
    data = ex.text.encode()
    put(paths["module"], lambda f: f.write(data), "--output")
    if "inputs" in paths:
        arrays = {k: storable(v) for k, v in ex.inputs.items()}
        put(paths["inputs"], lambda f: np.savez(f, **arrays), "--output")
    exp = {f"out{k}": storable(v) for k, v in enumerate(ex.expected)}
    put(paths["expected"], lambda f: np.savez(f, **exp), "--output")
    return {k: str(v) for k, v in paths.items()}
