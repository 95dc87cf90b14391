"""hlo check: the rules, in one pass over the module."""
from __future__ import annotations

from ..errors import Diagnostic
from ..ir.attributes import ComputationRef
from ..ir.dtypes import ELEMENT_TYPES
from ..ir.module import Computation, Instruction, Module
from ..ir.opcodes import OPCODES
from ..ir.shape import COMBINE_DIM, Shape

CODES = {
    "C100": "shape rule violated",
    "C101": "declared shape differs from the inferred one",
    "C102": "no shape rule (internal)",
    "C110": "layout is not a permutation of the dimensions",
    "C111": "malformed tiling, element size or memory space",
    "C112": "layout differs (layout-sensitive check)",
    "C113": "bitcast changes the byte size",
    "C120": "recursion among computations",
    "C121": "called computation has the wrong signature",
    "C122": "entry_computation_layout disagrees with the entry computation",
    "C123": "input/output alias is invalid",
    "C124": "scheduled module uses a value before its definition",
    "C125": "computation signature disagrees with its parameters/root",
    "W200": "elided constant ({...}): its values are unknown",
    "W201": "instruction is never used",
    "W202": "while loop whose condition is constant true",
    "W203": "instruction name used in more than one computation",
}


class _Report:
    def __init__(self, module: Module, text: str | None):
        self.module = module
        self.lines = text.split("\n") if text is not None else None
        self.items: list[Diagnostic] = []

    def add(self, inst_or_comp, code: str, message: str, severity: str = "error"):
        loc = inst_or_comp.loc
        src = None
        if self.lines is not None and 0 < loc.line <= len(self.lines):
            src = self.lines[loc.line - 1]
        name = inst_or_comp.name if isinstance(inst_or_comp, Instruction) else None
        prefix = f"%{name}: " if name else ""
        self.items.append(Diagnostic(prefix + message, loc.file, loc.line, loc.column, severity, code, name, src))


def check_module(module: Module, text: str | None = None, *, layout_sensitive: bool = False,
                 warnings: bool = True) -> list[Diagnostic]:
    from ..shapes import RuleContext, ShapeRuleError, infer_shape
    from ..shapes.registry import computation_shapes
    rep = _Report(module, text)
    comps = module.computation_map
    comp_shapes = computation_shapes(module)
    _check_recursion(module, rep)
    _check_signatures(module, rep)
    seen_names: dict[str, str] = {}
    replicas = module.attrs.get("replica_count", 1)
    partitions = module.attrs.get("num_partitions", 1)
    for comp in module.computations:
        by = comp.by_name
        for inst in comp.instructions:
            if inst.name in seen_names and seen_names[inst.name] != comp.name and warnings:
                rep.add(inst, "W203", f"the name is also used in computation '{seen_names[inst.name]}' "
                        "(XLA renames one of them when it loads the module)", "warning")
            seen_names.setdefault(inst.name, comp.name)
            _check_layouts(inst, rep)
            operands = [by[o].shape for o in inst.operands if o in by]
            if len(operands) != len(inst.operands):
                continue
            ctx = RuleContext(inst.opcode, inst.shape, comp_shapes, replicas, partitions)
            try:
                inferred = infer_shape(inst.opcode, operands, inst.attrs, ctx)
            except ShapeRuleError as e:
                msg = str(e)
                if getattr(e, "code", "") == "S001":
                    rep.add(inst, "C102", msg)
                    continue
                hint = _broadcast_hint(inst, operands)
                rep.add(inst, "C100", msg + (f"\n  note: {hint}" if hint else ""))
                continue
            if inferred is not None and not _same_shape(inferred, inst.shape, False):
                rep.add(inst, "C101", f"{inst.opcode}: declared shape {inst.shape.to_str(False)} differs from the "
                        f"inferred shape {inferred.to_str(False)} for operands "
                        f"({', '.join(s.to_str(False) for s in operands)})")
            elif layout_sensitive:
                _check_layout_preserved(inst, operands, rep)
            if inst.opcode == "bitcast" and operands:
                _check_bitcast_size(inst, operands[0], rep)
        if module.attrs.get("is_scheduled"):
            _check_schedule(comp, rep)
    _check_entry_layout(module, rep, layout_sensitive)
    _check_aliasing(module, rep)
    if warnings:
        _warnings(module, comps, rep)
    rep.items.sort(key=lambda d: (d.file, d.line, d.column, d.code))
    return rep.items


def _same_shape(a: Shape, b: Shape, layout: bool) -> bool:
    if layout:
        return a == b
    return a.without_layout() == b.without_layout()


def _broadcast_hint(inst: Instruction, operands: list[Shape]) -> str | None:
    spec = OPCODES.get(inst.opcode)
    if spec is None or not spec.family.startswith(("elementwise", "compare")):
        return None
    arrays = [s for s in operands if not s.is_tuple]
    if len({s.dims for s in arrays}) <= 1:
        return None
    from ..broadcasting import suggest
    plans = suggest([s.dims for s in arrays], inst.shape.dims if not inst.shape.is_tuple else None)
    if plans is None:
        return ("HLO has no implicit broadcasting, and these operand dims would not broadcast under XLA's "
                "client rules either")
    parts = []
    for name, shape, plan in zip(inst.operands, arrays, plans):
        if plan is not None:
            parts.append(f"%{name} becomes {plan.hlo(shape.element_type, '%' + name)}")
    return "HLO has no implicit broadcasting; make it explicit: " + "; ".join(parts)


def _check_layouts(inst: Instruction, rep: _Report):
    for leaf in inst.shape.leaves():
        lay = leaf.layout
        if lay is None or leaf.element_type in ("token", "opaque", "buffer"):
            continue
        m2m = lay.minor_to_major
        if m2m and sorted(m2m) != list(range(leaf.rank)):
            rep.add(inst, "C110", f"layout {lay} of {leaf.to_str(False)} must list each of the {leaf.rank} "
                    f"dimensions exactly once (minor_to_major is a permutation), got {list(m2m)}")
        for tile in lay.tiles:
            if not tile or any(d <= 0 and d != COMBINE_DIM for d in tile):
                rep.add(inst, "C111", f"tile {tile} of layout {lay} must have positive sizes")
        if lay.element_size_in_bits < 0 or lay.element_size_in_bits > 128:
            rep.add(inst, "C111", f"element size E({lay.element_size_in_bits}) must be between 0 and 128 bits")
        if lay.memory_space < -1:
            rep.add(inst, "C111", f"memory space S({lay.memory_space}) must not be negative")


_LAYOUT_PRESERVING = ("elementwise_unary", "elementwise_binary", "elementwise_ternary", "compare", "convert")


def _check_layout_preserved(inst: Instruction, operands: list[Shape], rep: _Report):
    spec = OPCODES.get(inst.opcode)
    if spec is None or spec.family not in _LAYOUT_PRESERVING or inst.shape.is_tuple:
        return
    for name, s in zip(inst.operands, operands):
        if s.is_tuple or s.rank != inst.shape.rank or s.rank == 0:
            continue
        if s.layout is not None and inst.shape.layout is not None and \
                s.layout.minor_to_major != inst.shape.layout.minor_to_major:
            rep.add(inst, "C112", f"{inst.opcode}: the result layout {inst.shape.layout} must equal operand "
                    f"%{name}'s layout {s.layout} (elementwise ops cannot change layout)")


def _byte_size(s: Shape) -> int | None:
    et = ELEMENT_TYPES.get(s.element_type)
    if et is None or s.is_tuple or et.bits == 0:
        return None
    bits = s.layout.element_size_in_bits if s.layout and s.layout.element_size_in_bits else et.bits
    return s.num_elements * bits


def _check_bitcast_size(inst: Instruction, operand: Shape, rep: _Report):
    a, b = _byte_size(operand), _byte_size(inst.shape)
    if a is not None and b is not None and a != b:
        rep.add(inst, "C113", f"bitcast: the result must keep the operand's size, got {b // 8 if b % 8 == 0 else b / 8} "
                f"bytes ({inst.shape.to_str(False)}) for {a // 8 if a % 8 == 0 else a / 8} bytes "
                f"({operand.to_str(False)})")


def _check_recursion(module: Module, rep: _Report):
    comps = module.computation_map
    graph = {c.name: {n for i in c.instructions for n in i.called_computations} for c in module.computations}
    state: dict[str, int] = {}
    for start in graph:
        if state.get(start):
            continue
        stack = [(start, iter(sorted(graph[start])))]
        state[start] = 1
        path = [start]
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
                path.pop()
                continue
            if nxt not in graph:
                continue
            if state.get(nxt) == 1:
                cycle = path[path.index(nxt):] + [nxt]
                comp = comps[node]
                caller = next((i for i in comp.instructions if nxt in i.called_computations), None)
                rep.add(caller or comp, "C120", "computations call each other recursively: " + " -> ".join(cycle))
                state[nxt] = 2
                continue
            if not state.get(nxt):
                state[nxt] = 1
                stack.append((nxt, iter(sorted(graph[nxt]))))
                path.append(nxt)


def _check_signatures(module: Module, rep: _Report):
    for comp in module.computations:
        if comp.params is None:
            continue
        params = comp.parameters
        if len(comp.params) != len(params):
            rep.add(comp, "C125", f"computation '{comp.name}': the signature lists {len(comp.params)} parameters "
                    f"but the body has {len(params)}")
            continue
        for (pname, pshape), p in zip(comp.params, params):
            if pshape.without_layout() != p.shape.without_layout():
                rep.add(p, "C125", f"computation '{comp.name}': the signature gives parameter {p.parameter_number} "
                        f"shape {pshape.to_str(False)}, the parameter instruction {p.shape.to_str(False)}")
        if comp.result_shape is not None and comp.root in comp.by_name:
            root = comp.by_name[comp.root]
            if comp.result_shape.without_layout() != root.shape.without_layout():
                rep.add(root, "C125", f"computation '{comp.name}': the signature's result "
                        f"{comp.result_shape.to_str(False)} differs from the root's shape {root.shape.to_str(False)}")


def _check_schedule(comp: Computation, rep: _Report):
    seen = set()
    for inst in comp.instructions:
        for o in inst.operands:
            if o not in seen:
                rep.add(inst, "C124", f"the module is scheduled (is_scheduled=true) but operand %{o} runs after "
                        f"its user in computation '{comp.name}'")
        seen.add(inst.name)


def _check_entry_layout(module: Module, rep: _Report, layout_sensitive: bool):
    ecl = module.attrs.get("entry_computation_layout")
    if ecl is None:
        return
    entry = module.entry_computation
    params = entry.parameters
    where = params[0] if params else entry.root_instruction
    if len(ecl.parameters) != len(params):
        rep.add(where, "C122", f"entry_computation_layout lists {len(ecl.parameters)} parameters, the entry "
                f"computation '{entry.name}' has {len(params)}")
        return
    for k, (want, p) in enumerate(zip(ecl.parameters, params)):
        if not _same_shape(want, p.shape, False) or (layout_sensitive and not _same_layouts(want, p.shape)):
            rep.add(p, "C122", f"entry_computation_layout gives parameter {k} {want}, the parameter is {p.shape}")
    root = entry.root_instruction
    if not _same_shape(ecl.result, root.shape, False) or (layout_sensitive and not _same_layouts(ecl.result,
                                                                                                 root.shape)):
        rep.add(root, "C122", f"entry_computation_layout gives the result {ecl.result}, the root is {root.shape}")


def _same_layouts(a: Shape, b: Shape) -> bool:
    la = [s.layout.minor_to_major if s.layout else None for s in a.leaves()]
    lb = [s.layout.minor_to_major if s.layout else None for s in b.leaves()]
    return la == lb


def _subshape(shape: Shape, index) -> Shape | None:
    for k in index:
        if not shape.is_tuple or k >= len(shape.tuple_shapes) or k < 0:
            return None
        shape = shape.tuple_shapes[k]
    return shape


def _check_aliasing(module: Module, rep: _Report):
    alias = module.attrs.get("input_output_alias")
    if alias is None:
        return
    entry = module.entry_computation
    params = entry.parameters
    root = entry.root_instruction
    for out_idx, pnum, pidx, _kind in alias.entries:
        where = root
        out = _subshape(root.shape, out_idx)
        if out is None:
            rep.add(where, "C123", f"input_output_alias: output index {{{','.join(map(str, out_idx))}}} does not "
                    f"exist in the result {root.shape.to_str(False)}")
            continue
        if pnum >= len(params):
            rep.add(where, "C123", f"input_output_alias: parameter {pnum} does not exist")
            continue
        inp = _subshape(params[pnum].shape, pidx)
        if inp is None:
            rep.add(where, "C123", f"input_output_alias: index {{{','.join(map(str, pidx))}}} does not exist in "
                    f"parameter {pnum} {params[pnum].shape.to_str(False)}")
            continue
        if inp.without_layout() != out.without_layout():
            rep.add(where, "C123", f"input_output_alias: output {{{','.join(map(str, out_idx))}}} "
                    f"{out.to_str(False)} cannot alias parameter {pnum} {inp.to_str(False)}")


def _warnings(module: Module, comps, rep: _Report):
    for comp in module.computations:
        used = set()
        for inst in comp.instructions:
            used.update(inst.operands)
            used.update(inst.attrs.get("control-predecessors", ()) or ())
        for inst in comp.instructions:
            if inst.opcode == "constant" and inst.literal is not None and inst.literal.elided:
                rep.add(inst, "W200", "this constant was elided in the dump ({...}); its values are unknown, so "
                        "the module cannot be run faithfully", "warning")
            if inst.name not in used and inst.name != comp.root and inst.opcode not in (
                    "parameter", "outfeed", "send", "send-done", "after-all", "custom-call", "infeed", "recv",
                    "recv-done", "rng-get-and-update-state") and not inst.opcode.endswith(("-done", "-start")):
                rep.add(inst, "W201", f"{inst.opcode} result is never used", "warning")
            if inst.opcode == "while":
                cond = inst.attrs.get("condition")
                if isinstance(cond, ComputationRef) and cond.name in comps:
                    c = comps[cond.name]
                    root = c.by_name.get(c.root)
                    if root is not None and root.opcode == "constant" and root.literal is not None and \
                            not root.literal.elided and bool(root.literal.value):
                        rep.add(inst, "W202", f"the condition '{cond.name}' is the constant true: this loop "
                                "never ends", "warning")
