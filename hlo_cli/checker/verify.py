"""hlo check: the rules, in one pass over the module.

Computations are checked callees first, so a caller's rules see the shapes its called
computations really have (including shapes the text leaves out and the checker infers).  Every
problem is reported, not just the first; an instruction whose operands are unknown (their own
shape could not be inferred) is skipped rather than reported again.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from itertools import chain
from operator import attrgetter

from ..errors import Diagnostic
from ..ir.attributes import BackendConfig, ComputationRef, Metadata
from ..ir.dtypes import ELEMENT_TYPES
from ..ir.gcpause import NoGC
from ..ir.module import Computation, Instruction, Module
from ..ir.opcodes import ELEMENTWISE, IO, OPCODES, async_generic, has_trait, with_trait
from ..ir.shape import COMBINE_DIM, MAX_SHAPE_DEPTH, NUMPY_MAX_RANK, UNBOUNDED, Shape, default_layout, shape_depth
from ..shapes import RuleContext, ShapeRuleError, infer_shape, shapes_text
from ..shapes.families.collective import CODE_ATTRIBUTE
from ..shapes.families.reduction import index_text
from ..shapes.families.shape_ops import size_text
from .positions import SourceIndex
from .scan import ModuleScan

CODES = {
    "C100": "shape rule violated",
    "C101": "declared shape differs from the inferred one",
    "C102": "no shape rule (internal)",
    "C103": "an operand's inline shape differs from the shape of the instruction it names",
    "C104": "the result shape is left out, and cannot be inferred for this opcode",
    "C110": "layout is not a permutation of the dimensions",
    "C111": "malformed tiling, element size, memory space or other layout field",
    "C112": "layout differs (layout-sensitive check)",
    "C113": "bitcast changes the byte size",
    "C120": "recursion among computations",
    "C121": "called computation has the wrong signature",
    "C122": "entry_computation_layout disagrees with the entry computation",
    "C123": "input/output alias is invalid",
    "C124": "scheduled module uses a value before its definition",
    "C125": "computation signature's result disagrees with its root",
    "C126": "a shape in an attribute nests tuples deeper than hlo handles",
    "C127": "an unbounded dynamic dimension '?' (XLA's verifier disallows unbounded dynamism)",
    "C128": "an asynchronous start without its one done (or a done without its start)",
    "C129": "all-reduces of one module are not all layout constrained or all unconstrained",
    "C130": "a malformed replica group: empty, an id out of range of the ids named, or an id twice",
    "C131": "replica groups do not name exactly the module's replicas / partitions / devices",
    "C132": "replica groups of different sizes (all but all-reduce need equal sizes)",
    "C133": "use_global_device_ids without channel_id, or flattened ids without replica_groups",
    "C134": "source_target_pairs: an id out of range, or a source or target twice",
    "C135": "a collective's per-device shape does not fit its group size (all-gather, reduce-scatter, all-to-all)",
    "C136": "sharding invalid for the shape or the device count (XLA's HloSharding::Validate)",
    "C199": "internal error of a shape rule (a bug in hlo)",
    "W200": "elided constant ({...}): its values are unknown",
    "W201": "instruction is never used",
    "W202": "while loop whose condition is constant true",
    "W203": "instruction name used in more than one computation",
    "W204": "computation signature's parameter list disagrees with its parameters (XLA ignores it)",
    "W205": "an array of more than 64 dimensions: XLA runs it, hlo run cannot hold it (NumPy's limit)",
    "W206": "device ids XLA's verifier lets pass but that do not fit the device count (or no count is given)",
    "W207": "a Shardy mesh or sharding (frontend attribute) hlo cannot read or that does not fit the shape",
}


class _Report:
    def __init__(self, module: Module, text: str | None):
        self.module = module
        self.src = SourceIndex(text) if text is not None else None
        self.items: list[Diagnostic] = []

    def add(self, target, code: str, message: str, severity: str = "error", at: int | None = None,
            instruction: str | None = None):
        """Report on `target` (an Instruction or a Computation), at source offset `at` if known."""
        loc = target.loc
        line, col = loc.line, loc.column
        if at is not None and self.src is not None:
            line, col = self.src.position(at)
        src = self.src.line_text(line) if self.src is not None else None
        name = instruction or (target.name if isinstance(target, Instruction) else None)
        prefix = f"%{name}: " if name else ""
        self.items.append(Diagnostic(prefix + message, loc.file, line, col, severity, code, name, src))

    # -- token positions -------------------------------------------------------------------
    def tokens(self, inst: Instruction):
        if self.src is None or not inst.loc.line:
            return None
        return self.src.instruction_tokens(inst.loc.line, inst.loc.column, inst.opcode)

    def opcode_at(self, inst: Instruction) -> int | None:
        t = self.tokens(inst)
        return t[1] if t else None

    def shape_at(self, inst: Instruction) -> int | None:
        t = self.tokens(inst)
        if not t:
            return None
        return t[0] if t[0] is not None else t[1]

    def paren_at(self, inst: Instruction) -> int | None:
        t = self.tokens(inst)
        return t[2] if t else None

    def attribute_at(self, inst: Instruction, name: str) -> int | None:
        """The offset of `name=` among the instruction's attributes (else its opcode)."""
        t = self.tokens(inst)
        if not t:
            return None
        at = self.src.attribute_offset(t[2], name)
        return at if at is not None else t[1]

    def operand_at(self, inst: Instruction, k: int) -> int | None:
        t = self.tokens(inst)
        if not t:
            return None
        offs = self.src.operand_offsets(t[2])
        return offs[k] if 0 <= k < len(offs) else t[1]


def check_module(module: Module, text: str | None = None, *, layout_sensitive: bool = False,
                 warnings: bool = True, replicas: int | None = None,
                 partitions: int | None = None) -> list[Diagnostic]:
    """Every finding about `module` (errors and warnings), sorted by position.  `text` is the
    source the module was parsed from (for the source line and caret of each diagnostic, and
    for pointing at the offending token); it never raises for a problem of the module.
    `replicas` / `partitions` override the header's replica_count / num_partitions (the device
    count replica groups, source-target pairs and shardings are checked against)."""
    with NoGC():      # the checker makes no cycles: collections would only traverse the module again
        piece = _check_part(module, text, layout_sensitive, warnings, replicas, partitions, None)
    if piece.unusual is None:       # (else a shape nests too deep: those findings alone, as found)
        piece.rep.items.sort(key=position_key)
    return piece.rep.items


def position_key(d: Diagnostic):
    """The order of a module's findings: by place, then code (a stable sort keeps the order the
    walks found them in among equals)."""
    return d.file, d.line, d.column, d.code


# A module checked in two parts (checker/pieces.py): the head (the text's first computations, which
# never call the tail's) and the tail (the rest, with the entry computation).  Each part runs the
# per-computation phase and the walks that stay within its own computations; the walks that need
# both parts run on the head's side afterwards, from summaries of the tail (check_across).
HEAD, TAIL = "head", "tail"


class Piece:
    """What checking a module, or one part of it, found: the report (`rep.items`, in the order the
    walks found them), the device counts, each computation's (parameter shapes, result shape) as
    checked, why the parts cannot stand for the whole (`unusual`, None when they can), and the
    module's ModuleScan (`scan`, for check_across)."""

    __slots__ = ("rep", "devices", "comp_shapes", "unusual", "scan")

    def __init__(self, rep: _Report, devices, scan: ModuleScan):
        self.rep, self.devices, self.scan = rep, devices, scan
        self.comp_shapes: dict = {}
        self.unusual: str | None = None


def check_piece(module: Module, text: str, part: str, *, layout_sensitive: bool = False, warnings: bool = True,
                replicas: int | None = None, partitions: int | None = None, callee_shapes=None,
                scan: ModuleScan | None = None) -> Piece:
    """Check one part (HEAD or TAIL) of a module cut in two; `callee_shapes`: the tail's view of
    the head's computations it calls, name -> (parameter shapes, result shape), as their
    signatures declare them (check_across verifies that the head's checked shapes are those);
    `scan`: the part's ModuleScan, when the caller has it."""
    with NoGC():
        return _check_part(module, text, layout_sensitive, warnings, replicas, partitions, part, callee_shapes, scan)


def _check_part(module, text, layout_sensitive, warnings, replicas, partitions, part, callee_shapes=None,
                scan: ModuleScan | None = None) -> Piece:
    from .devices import module_devices
    scan = scan or ModuleScan(module)       # what the walks below need of each computation, in one pass
    piece = Piece(_Report(module, text), module_devices(module, replicas, partitions), scan)
    rep = piece.rep
    if _check_attribute_depths(module, rep, scan):
        piece.unusual = "an attribute shape nests tuples too deep"
        return piece          # the rules below walk shapes recursively
    graph = scan.graph              # each computation's callees
    _check_recursion(module, rep, graph)
    if part is not None and rep.items:
        piece.unusual = "recursion among computations"
        return piece
    piece.comp_shapes, effective = _check_computations(module, rep, scan, piece.devices, layout_sensitive,
                                                       callee_shapes)
    _module_walks(module, rep, piece.devices, effective, layout_sensitive, warnings, part, scan)
    return piece


def _check_computations(module: Module, rep: _Report, scan: ModuleScan, devices, layout_sensitive: bool,
                        callee_shapes):
    """The per-computation phase, callees first: (each computation's (parameter shapes, result
    shape) as checked, each computation's effective shapes by instruction name)."""
    # (parameter shapes, result shape) of every computation, refined as computations are checked
    comp_shapes: dict[str, tuple[list[Shape], Shape | None]] = dict(callee_shapes or ())
    for comp, facts in zip(module.computations, scan.facts):
        root = comp.by_name.get(comp.root)
        comp_shapes[comp.name] = ([p.shape for p in facts.params], root.shape if root is not None else None)
    unknown: set[str] = set()        # computations whose parameter or result shape is unknown
    effective: dict[str, dict[str, Shape | None]] = {}
    rules = _RuleMemo(comp_shapes, scan.calling)
    # a count the module does not give is unknown to the shape rules (XLA's config holds it; they
    # then read shard counts off the declared shapes as XLA's verifier does for a count of 1)
    counts = (devices.replicas if devices.declares("replicas") else None,
              devices.partitions if devices.declares("partitions") else None)
    unknown_id = id(None)
    for comp in _callees_first(module, scan.graph):
        eff = _check_computation(comp, unknown, rep, layout_sensitive, counts, rules)
        effective[comp.name] = eff
        params = [eff.get(p.name) for p in scan.params(comp)]
        result = eff.get(comp.root)
        comp_shapes[comp.name] = (params, result)
        if result is None or unknown_id in map(id, params):
            unknown.add(comp.name)
    return comp_shapes, effective


def _module_walks(module: Module, rep: _Report, devices, effective, layout_sensitive: bool, warnings: bool,
                  part: str | None, scan: ModuleScan):
    """The walks over the module after its computations are checked.  The head of a module in two
    parts skips what concerns the entry computation and the header (the tail's), and the walks
    that need the tail's computations too (check_across); the tail skips the latter."""
    _check_signatures(module, effective, rep, warnings, scan)
    if warnings:
        _check_duplicate_names(module, rep)
    if module.attrs.get("is_scheduled"):
        for comp, facts in zip(module.computations, scan.facts):
            _check_schedule(comp, rep, facts.preds)
    if part != HEAD:
        _check_entry_layout(module, effective, rep, layout_sensitive)
        # (no head computation calls the tail's)
        _check_async_pairs(module, rep, opcodes=[f.opcodes for f in scan.facts])
    if part is None:
        _check_constrained_all_reduces((inst for comp, facts in zip(module.computations, scan.facts)
                                        if not _ALL_REDUCES.isdisjoint(facts.opcodes)
                                        for inst in comp.instructions), rep)
    if part != HEAD:
        _check_aliasing(module, effective, rep, layout_sensitive)
    from .devices import device_findings
    for inst, code, message, severity, attr in device_findings(module, devices, effective, part != HEAD, scan):
        if severity == "warning" and not warnings:
            continue
        if inst is None:            # the module's own attribute: point at it in the header
            at = rep.src.text.find(attr) if rep.src is not None else -1
            rep.add(module.entry_computation, code, message, severity, at=at if at >= 0 else None)
        else:
            rep.add(inst, code, message, severity, at=rep.attribute_at(inst, attr) if attr else rep.opcode_at(inst))
    if warnings:
        _warnings(module, module.computation_map, rep, scan)


def _instructions(module: Module):
    return (inst for comp in module.computations for inst in comp.instructions)


def tail_summary(module: Module, warnings: bool, scan: ModuleScan | None = None) -> dict:
    """What check_across needs of the tail's computations, in plain values: the computations its
    asynchronous starts call, its all-reduces and the while loops whose condition is not its own
    (each as (name, opcode, file, line, column, attribute)), its instruction names (with
    warnings), its computations' names and its instruction count (`scan`: the module's
    ModuleScan, when at hand)."""
    comps = module.computation_map
    summary = {"async": set(), "all_reduces": [], "whiles": [], "names": None, "instructions": 0,
               "computations": list(comps)}
    names = set() if warnings else None
    count = 0
    kinds: dict[str, bool] = {}         # opcode -> whether the summary needs its instructions
    for k, comp in enumerate(module.computations):
        count += len(comp.instructions)
        if names is not None:
            names.update(comp.by_name)
        if scan is not None:
            ops = scan.facts[k].opcodes
            for op in ops:
                if op not in kinds:
                    kinds[op] = _pair_opcode(op).startswith("async-") or op in _ALL_REDUCES or op == "while"
            if not any(map(kinds.__getitem__, ops)):
                continue        # (no instruction of this computation is the summary's)
        for inst in comp.instructions:
            op = inst.opcode
            kind = kinds.get(op)
            if kind is None:
                kind = kinds[op] = _pair_opcode(op).startswith("async-") or op in _ALL_REDUCES or op == "while"
            if not kind:
                continue
            loc = (inst.name, op, inst.loc.file, inst.loc.line, inst.loc.column)
            if _pair_opcode(op).startswith("async-"):
                summary["async"].update(inst.called_computations)
            if op in _ALL_REDUCES:
                summary["all_reduces"].append(loc + (bool(inst.attrs.get("constrain_layout")),))
            elif op == "while":
                cond = inst.attrs.get("condition")
                if isinstance(cond, ComputationRef) and cond.name not in comps:
                    summary["whiles"].append(loc + (cond.name,))
    summary["names"], summary["instructions"] = names, count
    return summary


def check_across(head: Module, text: str, piece: Piece, summary: dict, assumed: dict, warnings: bool) -> None:
    """The head's side of a module checked in two parts: the walks that need both parts (the
    async pairs, the all-reduces' constrain_layout, endless while loops whose condition is the
    head's), added to the head's report; `piece.unusual` says why the parts cannot stand for the
    whole (the head's checked signatures are not those the tail assumed, `assumed`; a name used in
    both parts; a computation of the head that asynchronous operations of both parts call).  The
    tail's instructions come as plain values (tail_summary); `text` is the whole module's."""
    comps = head.computation_map
    if not comps.keys().isdisjoint(summary["computations"]):
        piece.unusual = "a computation defined in both parts"
        return
    scan = piece.scan
    if summary["async"] and not summary["async"].isdisjoint(
            n for i in _instructions(head) if _pair_opcode(i.opcode).startswith("async-") for n in i.called_computations):
        piece.unusual = "a computation called by asynchronous operations of both parts"
        return
    for name, (params, result) in assumed.items():
        mine = piece.comp_shapes.get(name)
        if mine is None or list(mine[0]) != list(params) or mine[1] != result:
            piece.unusual = f"computation '{name}' is not what its signature declares"
            return
    if warnings and summary["names"] and not summary["names"].isdisjoint(
            chain.from_iterable(map(_BY_NAME, head.computations))):
        piece.unusual = "an instruction name used in both parts"
        return
    rep = _Report(head, text)
    _check_async_pairs(head, rep, summary["async"], opcodes=[f.opcodes for f in scan.facts])
    stubs = [_stub(t, "constrain_layout") for t in summary["all_reduces"]]
    mine = [i for comp, facts in zip(head.computations, scan.facts) if not _ALL_REDUCES.isdisjoint(facts.opcodes)
            for i in comp.instructions if i.opcode in _ALL_REDUCES]
    _check_constrained_all_reduces(mine + stubs, rep)
    if warnings:
        for t in summary["whiles"]:
            if t[-1] in comps:
                _warn_endless_loop(_stub(t, "condition"), t[-1], comps, rep)
    piece.rep.items += rep.items


_BY_NAME = attrgetter("by_name")


def _stub(t: tuple, attr: str) -> Instruction:
    """An instruction of the other part as its summary gives it (name, opcode, place, one attribute)."""
    from ..ir.module import Loc
    name, op, file, line, column, value = t
    return Instruction(name, op, None, attrs={attr: value}, loc=Loc(file, line, column))


def _attribute_shapes(attrs):
    """(attribute name, shape) of every shape held by attribute values (the parser checks the
    depth of instruction and signature shapes; these it does not see)."""
    for name, v in attrs.items():
        if isinstance(v, Shape):
            yield name, v
        for s in getattr(v, "shapes", None) or ():
            if isinstance(s, Shape):
                yield name, s
        if name == "entry_computation_layout" and v is not None:
            for s in list(v.parameters) + [v.result]:
                yield name, s


# Attribute values of these types hold no shape (_attribute_shapes yields none for them): strings,
# numbers, integer tuples, a metadata or backend_config text, a called computation's name
_SHAPELESS = frozenset((str, int, bool, float, tuple, type(None), Metadata, BackendConfig, ComputationRef))


def _check_attribute_depths(module: Module, rep: _Report, scan: ModuleScan) -> bool:
    """Report attribute shapes whose tuples nest deeper than MAX_SHAPE_DEPTH; True if any does."""
    found = _attribute_depth(scan.entry or module.entry_computation, module.attrs, module, rep)
    shallow: dict[int, object] = {}     # attribute values found to hold no shape too deep (kept alive)
    shapeless = _SHAPELESS
    for facts in scan.facts:
        for inst in facts.rich:         # (the others have no attribute but their metadata)
            attrs = inst.attrs
            for k, v in attrs.items():
                if (type(v) not in shapeless or k == "entry_computation_layout") and id(v) not in shallow:
                    break
            else:
                continue            # (the usual case: every value shapeless, or seen before in another instruction)
            for k, v in attrs.items():
                if k != "entry_computation_layout" and not any(
                        shape.tuple_shapes is not None and shape_depth(shape) > MAX_SHAPE_DEPTH
                        for _, shape in _attribute_shapes({k: v})):
                    shallow[id(v)] = v
            found = _attribute_depth(inst, attrs, module, rep) or found
    return found


def _attribute_depth(target, attrs, module: Module, rep: _Report) -> bool:
    """Report the first attribute shape of `target` nesting too deep; True if one does."""
    for name, shape in _attribute_shapes(attrs):
        depth = shape_depth(shape) if shape.tuple_shapes is not None else 0
        if depth > MAX_SHAPE_DEPTH:
            at = None
            if attrs is module.attrs and rep.src is not None:
                at = rep.src.text.find(name + "=")          # a module attribute: in the header
                at = at if at >= 0 else None
            rep.add(target, "C126", f"{name}: a shape nests tuples {depth} deep; hlo handles at most "
                    f"{MAX_SHAPE_DEPTH} levels (XLA's parser: 32768)",
                    at=at, instruction=target.name if isinstance(target, Instruction) else None)
            return True
    return False


def _callees_first(module: Module, graph: dict[str, list[str]]) -> list[Computation]:
    """The computations, each after the computations it calls (cycles broken arbitrarily); `graph`:
    each computation's callees."""
    comps = module.computation_map
    out: list[Computation] = []
    state: dict[str, int] = {}
    for start in module.computations:
        if state.get(start.name):
            continue
        if not graph[start.name]:       # (the usual case: a computation calling none)
            state[start.name] = 2
            out.append(comps[start.name])
            continue
        stack = [(start.name, iter(graph[start.name]))]
        state[start.name] = 1
        while stack:
            name, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                state[name] = 2
                out.append(comps[name])
            elif nxt in comps and not state.get(nxt):
                state[nxt] = 1
                stack.append((nxt, iter(graph[nxt])))
    return out


# ------------------------------------------------------------------------------------------ instructions

def _check_computation(comp: Computation, unknown: set[str], rep: _Report, layout_sensitive: bool, counts,
                       rules: "_RuleMemo") -> dict[str, Shape | None]:
    """Check the instructions of `comp`: its effective shapes by instruction name.  `counts`: the
    replica and partition counts the shape rules see (None where the module does not give it)."""
    replicas, partitions = counts
    comp_shapes = rules.comp_shapes
    eff: dict[str, Shape | None] = {}
    memo = rules
    plain = memo.plain_shapes
    results, same, calling = memo.results, memo.same, memo.calling
    shape_of = eff.get
    unknown_id = id(None)
    for inst in comp.instructions:
        declared = inst.shape
        if declared is not None and id(declared) not in plain:
            _check_declared(inst, declared, plain, rep)
        names = inst.operands
        n = len(names)
        if n == 1:          # (the operands' shapes and their identities, built by hand for one or two)
            s = shape_of(names[0])
            operands, ids = [s], (id(s),)
        elif n == 2:
            s, t = shape_of(names[0]), shape_of(names[1])
            operands, ids = [s, t], (id(s), id(t))
        elif n == 0:
            operands, ids = [], ()
        else:
            operands = [*map(shape_of, names)]
            ids = (*map(id, operands),)
        if inst.operand_shapes:
            _check_inline_operand_shapes(inst, eff, rep)
        if unknown_id in ids or (unknown and any(c in unknown for c in inst.called_computations)):
            eff[inst.name] = declared       # (an operand's shape unknown, or a called computation's)
            continue
        attrs = inst.attrs
        hit = None
        if not attrs or (len(attrs) == 1 and "metadata" in attrs):      # _RuleMemo.infer's first look, inline
            hit = results.get((inst.opcode, id(declared), replicas, partitions, n) + ids)
        elif calling is not None and id(inst) not in calling:           # (the same, for other attributes)
            hit = results.get(_rule_key(inst.opcode, declared, replicas, partitions, ids, attrs))
        try:
            inferred = hit[0] if hit is not None else memo.infer(inst, operands, declared, replicas, partitions)
        except ShapeRuleError as e:
            eff[inst.name] = declared
            _report_rule_error(inst, operands, e, rep)
            continue
        except Exception as e:    # a bug in a rule: report it, keep checking the rest
            eff[inst.name] = declared
            rep.add(inst, "C199", f"{inst.opcode}: internal error in its shape rule ({type(e).__name__}: {e}); "
                    "this is a bug in hlo, please report it", at=rep.opcode_at(inst))
            continue
        if declared is None:
            eff[inst.name] = inferred
            if inferred is not None:
                _check_layouts(inst, inferred, rep)
            continue
        eff[inst.name] = declared
        if hit is None or not hit[4]:       # (hit[4]: this memo entry's result found compatible with `declared`)
            if inferred is not None and inferred is not declared and (id(inferred), id(declared)) not in same:
                if not _compatible(inferred, declared):
                    rep.add(inst, "C101", f"{inst.opcode}: the declared shape must equal the inferred shape "
                            f"{inferred.to_str(False)}, got {declared.to_str(False)} for {shapes_text(operands)}",
                            at=rep.shape_at(inst))
                    continue
                same[id(inferred), id(declared)] = (inferred, declared)     # (kept alive: the ids stay theirs)
            if hit is not None:
                hit[4] = True       # (its key holds `declared`)
        if layout_sensitive:
            _check_layout_preserved(inst, operands, rep)
            _check_layout_forwarded(inst, operands, comp_shapes, rep)
        if inst.opcode == "bitcast" and operands and (id(operands[0]), id(declared)) not in memo.bitcasts:
            if not _check_bitcast_size(inst, operands[0], rep):
                memo.bitcasts[id(operands[0]), id(declared)] = (operands[0], declared)   # (kept alive)
    return eff


def _check_declared(inst: Instruction, declared: Shape, plain: dict, rep: _Report):
    """The layouts and the unbounded dimensions of a declared shape; a shape with nothing to report
    is kept in `plain` (by identity, kept alive), not looked at again."""
    if declared.tuple_shapes is None:
        leaves = (declared,)
        unbounded = UNBOUNDED in declared.dims
    else:
        leaves = tuple(declared.leaves())
        unbounded = any(UNBOUNDED in leaf.dims for leaf in leaves)
    if not unbounded and all(leaf.layout is None or leaf.layout is default_layout(len(leaf.dims))
                             for leaf in leaves):
        plain[id(declared)] = declared      # nothing to find in it (kept alive: its id stays its own)
        return
    found = len(rep.items)
    _check_layouts(inst, leaves, rep)
    if unbounded:
        rep.add(inst, "C127", f"{inst.opcode}: the shape must have no unbounded dynamic dimension '?' "
                "(XLA's verifier disallows unbounded dynamism unless asked), got "
                f"{declared.to_str(False)}", at=rep.shape_at(inst))
    elif len(rep.items) == found:
        plain[id(declared)] = declared      # (layouts other than the default, all well formed)


class _Watched(Mapping):
    """The computations' shapes as a rule sees them, noting whether the rule read any, and which
    (`names`; None once it went through all of them)."""

    __slots__ = ("shapes", "read", "names")

    def __init__(self, shapes):
        self.shapes = shapes
        self.read = False
        self.names: set[str] | None = set()

    def __getitem__(self, name):
        self.read = True
        if self.names is not None:
            self.names.add(name)
        return self.shapes[name]

    def __iter__(self):
        self.read = True
        self.names = None
        return iter(self.shapes)

    def __len__(self):
        self.read = True
        self.names = None
        return len(self.shapes)


_NOT_READ_BY_RULES = frozenset(("metadata", "control-predecessors"))


class _RuleMemo:
    """Shape rules are pure functions of (opcode, operand shapes, declared shape, attributes, the module's
    device counts, the called computations' shapes): a result is kept by the first five when the rule
    read no computation's shapes, so the many instructions alike in a large module run their rule once.
    The key holds the objects' identities (the parser shares equal shapes and attribute values, so alike
    instructions hold the same objects); the entry keeps those objects alive, so an identity stays
    theirs. Only results are kept; a rule's error is raised afresh each time.
    A rule that read the shapes of the computations its instruction calls, and only those (a fusion,
    a reduce, a while...), is kept by the same with each called computation given by the identities
    of its shapes (`by_callees`): the many fusions of one signature run their rule once."""

    def __init__(self, comp_shapes, calling: set[int] | None = None):
        self.comp_shapes = comp_shapes
        self.calling = calling      # the identities of the instructions that call computations, when known
        self.same: dict[tuple[int, int], tuple] = {}    # (inferred, declared) shapes found compatible
        self.results: dict = {}
        self.by_callees: dict = {}
        self.plain_shapes: dict[int, Shape] = {}    # declared shapes without layouts or '?' to report
        self.bitcasts: dict[tuple[int, int], tuple] = {}    # (operand, result) shapes of a bitcast found right

    def infer(self, inst: Instruction, operands: list[Shape], declared, replicas, partitions):
        attrs = inst.attrs
        # (both memos hold exact results: an instruction calling computations is looked up by its
        # callees' shapes first, as such instructions rarely share the called computation itself)
        calls = id(inst) in self.calling if self.calling is not None else bool(attrs and inst.called_computations)
        callees = self._callees_key(inst, operands, declared, replicas, partitions) if calls else None
        if callees is not None:
            hit = self.by_callees.get(callees[0])
            if hit is not None:
                return hit[0]
        key = _rule_key(inst.opcode, declared, replicas, partitions, (*map(id, operands),), attrs)
        hit = self.results.get(key)
        if hit is not None:
            return hit[0]
        watched = _Watched(self.comp_shapes)
        inferred = infer_shape(inst.opcode, operands, attrs,
                               RuleContext(inst.opcode, declared, watched, replicas, partitions))
        if not watched.read:
            # (the last item: whether the checker found the result compatible with `declared`)
            self.results[key] = [inferred, tuple(operands), declared, tuple(attrs.values()), False]
        elif callees is not None and watched.names is not None and watched.names <= callees[2]:
            self.by_callees[callees[0]] = (inferred, tuple(operands), declared, tuple(attrs.values()), callees[1])
        return inferred

    def _callees_key(self, inst: Instruction, operands: list[Shape], declared, replicas, partitions):
        """(the key with each attribute naming computations given by their shapes' identities, the
        shape entries it names (kept alive with the result), the names), or None when a named
        computation has no shapes yet."""
        key = [inst.opcode, id(declared), replicas, partitions, len(operands)]
        key += map(id, operands)
        keep, names = [], set()
        for k, v in inst.attrs.items():
            if k in _NOT_READ_BY_RULES:
                continue
            key.append(k)
            if isinstance(v, ComputationRef):
                refs = (v,)
            elif isinstance(v, tuple) and v and isinstance(v[0], ComputationRef):
                refs = v
            else:
                key.append(id(v))
                continue
            key.append(len(refs))
            for r in refs:
                entry = self.comp_shapes.get(r.name)
                if entry is None:
                    return None
                params, result = entry
                keep.append(entry)
                names.add(r.name)
                key.append((len(params), *map(id, params), id(result)))
        return tuple(key), keep, names


def _rule_key(opcode: str, declared, replicas, partitions, ids: tuple, attrs) -> tuple:
    """_RuleMemo.results' key: the opcode, the declared shape, the device counts, the operand shapes
    (`ids`: their identities) and the attributes the rules read (by identity)."""
    if len(attrs) == 1 and "metadata" in attrs:     # (the usual case: no attribute a rule reads)
        return (opcode, id(declared), replicas, partitions, len(ids)) + ids
    key = [opcode, id(declared), replicas, partitions, len(ids), *ids]
    for k, v in attrs.items():
        if k not in _NOT_READ_BY_RULES:
            key.append(k)
            key.append(id(v))
    return tuple(key)


_OPERAND_IN_WHAT = re.compile(r"\boperand (\d+)\b")


def _report_rule_error(inst: Instruction, operands: list[Shape], e, rep: _Report):
    msg = str(e)
    code = getattr(e, "code", "")
    if code == "S001":
        rep.add(inst, "C102", msg, at=rep.opcode_at(inst))
        return
    if inst.shape is None and (code == "S104" or "result shape must be" in msg):
        rep.add(inst, "C104", f"{inst.opcode}: the result shape must be written (XLA cannot infer it for "
                f"{inst.opcode}), got none for {shapes_text(operands)}", at=rep.paren_at(inst))
        return
    if code.startswith("S13"):          # the collective family's device-group findings (C130-C135)
        attr = CODE_ATTRIBUTE.get(code)
        if f": {attr} must" not in msg and ": replica_groups must" in msg:
            attr = "replica_groups"     # flattened ids without groups: point at the empty groups
        rep.add(inst, "C" + code[1:], msg, at=rep.attribute_at(inst, attr) if attr else rep.shape_at(inst))
        return
    at = rep.opcode_at(inst)
    # "<opcode>: <what> must ...": when <what> names one operand, point at it
    what = msg.split(" must ", 1)[0]
    named = {int(k) for k in _OPERAND_IN_WHAT.findall(what)}
    if len(named) == 1:
        k = named.pop()
        if k < len(inst.operands):
            at = rep.operand_at(inst, k)
    hint = _broadcast_hint(inst, operands)
    rep.add(inst, "C100", msg + (f"\n  note: {hint}" if hint else ""), at=at)


def _check_inline_operand_shapes(inst: Instruction, eff, rep: _Report):
    """`negate(f32[4] x)`: the written operand shape must be compatible with x's shape."""
    if not inst.operand_shapes:
        return
    for k, (name, written) in enumerate(zip(inst.operands, inst.operand_shapes)):
        actual = eff.get(name)
        if written is None or actual is None or _compatible(written, actual):
            continue
        actual_all = [eff.get(o) for o in inst.operands]
        ops = "(" + ", ".join(s.to_str(False) if s is not None else "?" for s in actual_all) + ")"
        rep.add(inst, "C103", f"{inst.opcode}: the declared shape of operand {k} must be compatible with the "
                f"shape of %{name}, {actual.to_str(False)}, got {written.to_str(False)} for {ops}",
                at=rep.operand_at(inst, k))


def _strip(s: Shape) -> Shape:
    """The shape without layouts and without dynamic-dimension flags (XLA's ShapeUtil::Compatible)."""
    if s.is_tuple:
        return Shape(s.element_type, tuple_shapes=tuple(_strip(t) for t in s.tuple_shapes))
    return Shape(s.element_type, s.dims, (), None)


def _compatible(a: Shape, b: Shape) -> bool:
    """`_strip(a) == _strip(b)`, without building the stripped shapes (it runs once per instruction)."""
    if a is b:
        return True
    if a.element_type != b.element_type:
        return False
    at, bt = a.tuple_shapes, b.tuple_shapes
    if at is None or bt is None:
        return at is bt and a.dims == b.dims
    return len(at) == len(bt) and all(_compatible(x, y) for x, y in zip(at, bt))


def _broadcast_hint(inst: Instruction, operands: list[Shape]) -> str | None:
    """For elementwise operands whose dims differ: would XLA's client rules broadcast them, and
    which explicit broadcast(...) makes the HLO valid."""
    spec = OPCODES.get(inst.opcode)
    if spec is None or not spec.family.startswith(("elementwise", "compare")):
        return None
    pairs = [(n, s) for n, s in zip(inst.operands, operands) if not s.is_tuple]
    dims = [s.dims for _, s in pairs]
    # select/clamp take scalar operands legitimately
    if inst.opcode in ("select", "clamp"):
        pairs = [(n, s) for n, s in pairs if s.rank > 0]
        dims = [s.dims for _, s in pairs]
    if len(set(dims)) <= 1:
        return None
    if any(s.is_dynamic for _, s in pairs) or (inst.shape is not None and not inst.shape.is_tuple
                                                and inst.shape.is_dynamic):
        return None                 # no client-level broadcasting hint for dynamic dimensions
    from ..shapes.broadcasting import BroadcastError, broadcast_shape, suggest
    declared = inst.shape.dims if inst.shape is not None and not inst.shape.is_tuple else None
    plans = suggest(dims, declared)
    if plans is None:
        why = ""
        try:
            target = dims[0]
            for d in dims[1:]:
                target = broadcast_shape(target, d, None if len(d) == len(target) else
                                         tuple(range(abs(len(target) - len(d)), max(len(target), len(d)))))
        except BroadcastError as e:
            why = f" ({e})"
        return ("HLO has no implicit broadcasting, and these operand dimensions "
                f"{', '.join('[' + ','.join(map(str, d)) + ']' for d in dims)} would not broadcast under XLA's "
                f"client rules either{why}")
    target = next((p.result for p in plans if p is not None), declared)
    parts = []
    for (name, shape), plan in zip(pairs, plans):
        if plan is not None:
            parts.append(f"%{name} becomes {plan.hlo(shape.element_type, '%' + name)}")
    tdims = "[" + ",".join(map(str, target)) + "]" if target is not None else "the result"
    how = " (matching trailing dimensions)" if len({len(d) for d in dims}) > 1 else ""
    return (f"these operands would broadcast to {tdims} under XLA's client rules{how}, but HLO has no "
            "implicit broadcasting; make it explicit: " + "; ".join(parts))


# ------------------------------------------------------------------------------------------ layouts

def _check_layouts(inst: Instruction, leaves, rep: _Report):
    """The layout of each of the shape's array leaves (`leaves`: a shape, or its leaves)."""
    if isinstance(leaves, Shape):
        leaves = leaves.leaves()
    for leaf in leaves:
        lay = leaf.layout
        if lay is None or lay is default_layout(len(leaf.dims)):
            continue                # (what _layout_problems finds nothing in, without its generator)
        for code, msg in _layout_problems(leaf):
            rep.add(inst, code, f"{inst.opcode}: {msg}", at=rep.shape_at(inst))


def _of(leaf: Shape) -> str:
    return f"for ({leaf.to_str(True)})"


def _layout_problems(leaf: Shape):
    """(code, message) for each way the layout of an array shape is malformed (XLA's
    LayoutUtil::ValidateLayoutForShape; every array in HLO text is dense)."""
    lay = leaf.layout
    if lay is None or leaf.element_type in ("token", "opaque", "buffer", "tuple"):
        return
    plain = default_layout(len(leaf.dims))
    if lay is plain or lay == plain:
        return                      # the default layout of its rank: nothing to find
    m2m = lay.minor_to_major
    if sorted(m2m) != list(range(leaf.rank)):
        yield "C110", (f"the layout's minor_to_major must list each of the {leaf.rank} dimensions exactly once, "
                       f"got {{{','.join(map(str, m2m))}}} {_of(leaf)}")
    for tile in lay.tiles:
        if not tile or any(d <= 0 and d != COMBINE_DIM for d in tile):
            ttxt = "T(" + ",".join("*" if d == COMBINE_DIM else str(d) for d in tile) + ")"
            yield "C111", f"a tile of the layout must list positive sizes (or *), got {ttxt} {_of(leaf)}"
    if lay.tail_padding_alignment <= 0:
        yield "C111", f"the layout's tail padding alignment must be positive, got L({lay.tail_padding_alignment}) {_of(leaf)}"
    if lay.index_primitive_type:
        yield "C111", ("the layout must not give an index type (only sparse arrays have one; every array in HLO "
                       f"text is dense), got #({lay.index_primitive_type}) {_of(leaf)}")
    if lay.pointer_primitive_type:
        yield "C111", ("the layout must not give a pointer type (only sparse arrays have one; every array in HLO "
                       f"text is dense), got *({lay.pointer_primitive_type}) {_of(leaf)}")
    if lay.element_size_in_bits < 0:
        yield "C111", f"the layout's element size must not be negative, got E({lay.element_size_in_bits}) {_of(leaf)}"
    if lay.memory_space < -1:
        yield "C111", f"the layout's memory space must be -1 or more, got S({lay.memory_space}) {_of(leaf)}"
    for sc in lay.split_configs:
        if not 0 <= sc.dimension < max(leaf.rank, 1):
            yield "C111", (f"a split config of the layout must name a dimension below the rank {leaf.rank}, "
                           f"got SC({sc.dimension}:...) {_of(leaf)}")


# The opcodes whose layout the layout-sensitive check holds to their operands': the result has the
# layout of each operand of the same rank.  XLA's LayoutAssignment::InstructionCanChangeLayout is false
# for these and for more (collectives, fft, scatter, while, ...), which this check leaves alone: a fact
# of this check, not of the opcode table.
_LAYOUT_PRESERVING_OPS = with_trait(ELEMENTWISE) | {"stochastic-convert", "map", "slice", "dynamic-slice",
                                                    "dynamic-update-slice", "pad", "reverse", "concatenate", "sort"}


def _check_layout_preserved(inst: Instruction, operands: list[Shape], rep: _Report):
    if inst.shape is None or inst.opcode not in _LAYOUT_PRESERVING_OPS:
        return
    if inst.shape.is_tuple and inst.opcode != "sort":
        return
    results = list(inst.shape.leaves())
    for k, (name, s) in enumerate(zip(inst.operands, operands)):
        if s.is_tuple or s.rank == 0:
            continue
        if inst.opcode in ("dynamic-slice", "dynamic-update-slice") and k > 1:
            continue
        res = results[k] if inst.opcode == "sort" and k < len(results) else results[0]
        if s.rank != res.rank or s.layout is None or res.layout is None:
            continue
        if s.layout.minor_to_major != res.layout.minor_to_major:
            rep.add(inst, "C112", f"{inst.opcode}: the result layout must be operand {k}'s layout "
                    f"{{{','.join(map(str, s.layout.minor_to_major))}}} ({inst.opcode} cannot change layout), got "
                    f"{{{','.join(map(str, res.layout.minor_to_major))}}} for {_shapes_with_layout(operands)}",
                    at=rep.shape_at(inst))
            return


def _shapes_with_layout(shapes) -> str:
    return "(" + ", ".join(s.to_str(True) for s in shapes) + ")"


def _m2m(shape: Shape):
    return [tuple(s.layout.minor_to_major) if s.layout is not None else None for s in shape.leaves()]


def _check_layout_forwarded(inst: Instruction, operands: list[Shape], comp_shapes, rep: _Report):
    """Instructions that pass buffers through (tuple, get-tuple-element, call, while, conditional,
    opt-barrier) have exactly the layouts of what they pass through (XLA compares these with
    layouts in its layout-sensitive mode)."""
    op, declared = inst.opcode, inst.shape
    sources: list[tuple[str, Shape]] = []
    if op == "get-tuple-element" and operands and operands[0].is_tuple:
        idx = inst.attrs.get("index")
        if isinstance(idx, int) and 0 <= idx < len(operands[0].tuple_shapes):
            sources.append((f"element {idx} of %{inst.operands[0]}", operands[0].tuple_shapes[idx]))
    elif op == "tuple":
        sources.append(("its operands", Shape.tuple_of(operands)))
    elif op == "opt-barrier" and operands:
        sources.append((f"%{inst.operands[0]}", operands[0]))
    elif op in ("call", "while", "conditional"):
        for name in inst.called_computations:
            if op == "while" and name != getattr(inst.attrs.get("body"), "name", None):
                continue
            entry = comp_shapes.get(name)
            if entry is not None and entry[1] is not None:
                sources.append((f"the root of '{name}'", entry[1]))
    for what, src in sources:
        a, b = _m2m(declared), _m2m(src)
        if len(a) != len(b):
            continue
        for k, (x, y) in enumerate(zip(a, b)):
            if x is not None and y is not None and x != y:
                rep.add(inst, "C112", f"{op}: the result layout must be that of {what}, {src.to_str(True)} "
                        f"({op} cannot change layout), got {declared.to_str(True)}", at=rep.shape_at(inst))
                return


def _byte_size(s: Shape) -> int | None:
    et = ELEMENT_TYPES.get(s.element_type)
    if et is None or s.is_tuple or et.bits == 0 or (s.layout is not None and s.layout.tiles):
        return None
    bits = s.layout.element_size_in_bits if s.layout and s.layout.element_size_in_bits else et.bits
    return s.num_elements * bits


def _check_bitcast_size(inst: Instruction, operand: Shape, rep: _Report) -> bool:
    """Report a bitcast changing the byte size; True if it does."""
    a, b = _byte_size(operand), _byte_size(inst.shape)
    if a is not None and b is not None and a != b:
        rep.add(inst, "C113", f"bitcast: the result must keep the operand's size, {size_text(a)}, got {size_text(b)} "
                f"({inst.shape.to_str(False)}) for ({operand.to_str(False)})", at=rep.shape_at(inst))
        return True
    return False


# ------------------------------------------------------------------------------------------ structure

def _check_recursion(module: Module, rep: _Report, graph: dict[str, list[str]]):
    comps = module.computation_map
    state: dict[str, int] = {}
    for start in graph:
        if state.get(start):
            continue
        stack = [(start, iter(graph[start]))]
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
                rep.add(caller or comp, "C120", f"{caller.opcode + ': ' if caller else ''}the called computations "
                        f"must not call each other recursively, got the cycle {' -> '.join(cycle)}",
                        at=rep.opcode_at(caller) if caller else None)
                continue
            if not state.get(nxt):
                state[nxt] = 1
                stack.append((nxt, iter(graph[nxt])))
                path.append(nxt)


def _signature_offsets(rep: _Report, comp: Computation):
    """Where the signature's parts are (looked up only for a finding: a scan of the text)."""
    return rep.src.signature_offsets(comp.loc.line, comp.loc.column) if rep.src and comp.loc.line else None


def _check_signatures(module: Module, effective, rep: _Report, warnings: bool, scan: ModuleScan):
    """A computation written with a signature `name (p: shape, ...) -> shape`: XLA's parser
    requires the result to be compatible with the root's shape; it ignores the parameter list."""
    for comp, facts in zip(module.computations, scan.facts):
        if comp.params is None and comp.result_shape is None:
            continue
        eff = effective.get(comp.name, {})
        root = comp.by_name.get(comp.root)
        root_shape = eff.get(comp.root) if root is not None else None
        if comp.result_shape is not None and root_shape is not None and comp.result_shape is not root_shape \
                and not _compatible(comp.result_shape, root_shape):
            offs = _signature_offsets(rep, comp)
            rep.add(root, "C125", f"computation '{comp.name}': the signature's result must be compatible with the "
                    f"shape of its root %{root.name}, {root_shape.to_str(False)}, got "
                    f"{comp.result_shape.to_str(False)}", at=offs[1] if offs else None)
        if not warnings or comp.params is None:
            continue
        params = facts.params
        if len(comp.params) != len(params):
            offs = _signature_offsets(rep, comp)
            rep.add(comp, "W204", f"computation '{comp.name}': the signature lists {len(comp.params)} parameters "
                    f"but the body has {len(params)} (XLA ignores the signature's parameter list)", "warning",
                    at=offs[0][0] if offs and offs[0] else None)
            continue
        for k, ((_pname, pshape), p) in enumerate(zip(comp.params, params)):
            actual = eff.get(p.name)
            if actual is not None and pshape is not actual and not _compatible(pshape, actual):
                offs = _signature_offsets(rep, comp)
                rep.add(p, "W204", f"computation '{comp.name}': the signature gives parameter "
                        f"{p.parameter_number} the shape {pshape.to_str(False)}, the parameter instruction "
                        f"{actual.to_str(False)} (XLA ignores the signature's parameter list)", "warning",
                        at=offs[0][k] if offs and k < len(offs[0]) else None)


def _check_duplicate_names(module: Module, rep: _Report):
    every: set[str] = set()
    count = 0
    for comp in module.computations:
        every.update(comp.by_name)
        count += len(comp.instructions)
    if len(every) == count:
        return          # (the usual case: each instruction's name is its own in the module)
    seen: dict[str, str] = {}
    for comp in module.computations:
        names = comp.by_name
        if len(names) == len(comp.instructions) and seen.keys().isdisjoint(names):
            seen.update(dict.fromkeys(names, comp.name))     # (the usual case: no name seen before)
            continue
        for inst in comp.instructions:
            other = seen.get(inst.name)
            if other is not None and other != comp.name:
                rep.add(inst, "W203", f"the name is also used in computation '{other}' "
                        "(XLA renames one of them when it loads the module)", "warning")
            seen.setdefault(inst.name, comp.name)


def _check_schedule(comp: Computation, rep: _Report, ordered=None):
    """is_scheduled=true: the text order of each computation is its schedule, so every operand and
    control predecessor must come before its user (`ordered`: the instructions with control
    predecessors, when known)."""
    if ordered is not None and not ordered:
        seen = set()
        add, has = seen.add, seen.issuperset
        for inst in comp.instructions:
            if not has(inst.operands):
                break
            add(inst.name)
        else:
            return              # (the usual case: every operand before its user, no control predecessor)
    seen = set()
    names = comp.by_name
    add = seen.add
    for inst in comp.instructions:
        preds = inst.attrs.get("control-predecessors")
        if seen.issuperset(inst.operands) and not preds:
            add(inst.name)
            continue            # (the usual case: every operand seen, no control predecessor)
        for what, among in (("operand", inst.operands), ("control predecessor", preds or ())):
            for o in among:
                if o not in seen and o in names:
                    rep.add(inst, "C124", f"{inst.opcode}: the module is scheduled (is_scheduled=true), so {what} "
                            f"%{o} must come before its user in computation '{comp.name}', got it after")
        add(inst.name)


def _entry_parts(module: Module, effective):
    """The entry computation, its effective shapes, its parameters and its root."""
    entry = module.entry_computation
    return entry, effective.get(entry.name, {}), entry.parameters, entry.root_instruction


def _check_entry_layout(module: Module, effective, rep: _Report, layout_sensitive: bool):
    ecl = module.attrs.get("entry_computation_layout")
    if ecl is None:
        return
    entry, eff, params, root = _entry_parts(module, effective)
    where = params[0] if params else root
    for s in list(ecl.parameters) + [ecl.result]:
        for leaf in s.leaves():
            for code, msg in _layout_problems(leaf):
                rep.add(entry, code, "entry_computation_layout: " + msg)
    if len(ecl.parameters) != len(params):
        rep.add(where, "C122", f"entry_computation_layout must list one shape per parameter of the entry "
                f"computation '{entry.name}' ({len(params)}), got {len(ecl.parameters)}")
        return
    for k, (want, p) in enumerate(zip(ecl.parameters, params)):
        actual = eff.get(p.name) or p.shape
        if actual is None:
            continue
        if not _compatible(want, actual) or (layout_sensitive and _m2m(want) != _m2m(actual)):
            rep.add(p, "C122", f"entry_computation_layout: parameter {k} must have the shape of the parameter "
                    f"instruction, {actual}, got {want}", at=rep.shape_at(p))
    actual = eff.get(root.name) or root.shape
    if actual is not None and (not _compatible(ecl.result, actual) or
                               (layout_sensitive and _m2m(ecl.result) != _m2m(actual))):
        rep.add(root, "C122", f"entry_computation_layout: the result must have the root's shape, {actual}, got "
                f"{ecl.result}", at=rep.shape_at(root))


# XLA's VerifyAsynchronousInstructionPairs: opcode -> (opcodes its one user may have, opcodes its
# one operand may have); None: not checked.  "<op>-start/-update/-done" sugar counts as async-*.
_ASYNC_PAIRS = {
    "async-start": ({"async-update", "async-done"}, None),
    "async-update": ({"async-update", "async-done"}, {"async-start", "async-update"}),
    "async-done": (None, {"async-start", "async-update"}),
    "all-reduce-start": ({"all-reduce-done"}, None),
    "all-reduce-done": (None, {"all-reduce-start"}),
    "all-gather-start": ({"all-gather-done"}, None),
    "all-gather-done": (None, {"all-gather-start"}),
    "copy-start": ({"copy-done"}, None),
    "copy-done": (None, {"copy-start"}),
    "collective-permute-start": ({"collective-permute-done"}, None),
    "collective-permute-done": (None, {"collective-permute-start"}),
    "send": ({"send-done", "tuple"}, None),
    "send-done": (None, {"send", "get-tuple-element"}),
    "recv": ({"recv-done", "tuple"}, None),
    "recv-done": (None, {"recv", "get-tuple-element"}),
}


def _pair_opcode(op: str) -> str:
    return async_generic(op) or op


def _check_async_pairs(module: Module, rep: _Report, called_elsewhere=frozenset(), opcodes=None):
    """Each start has exactly one user, its done (or an update), and each done (or update) has
    exactly one operand, its start; custom-calls to control_dep do not count as users.  A send or
    recv that is the root of an async computation needs no user (`called_elsewhere`: computations
    the asynchronous starts of the module's other part call; `opcodes`: each computation's set of
    opcodes, in module order, when known)."""
    if opcodes is None:
        opcodes = [{i.opcode for i in c.instructions} for c in module.computations]     # each computation's
    pair_of = {op: _pair_opcode(op) for op in set().union(*opcodes)}
    starting = {op for op, pair in pair_of.items() if pair.startswith("async-")}
    async_comps = {name for comp, ops in zip(module.computations, opcodes) if not starting.isdisjoint(ops)
                   for inst in comp.instructions if inst.opcode in starting for name in inst.called_computations}
    async_comps.update(called_elsewhere)
    paired = {op for op, pair in pair_of.items() if pair in _ASYNC_PAIRS}
    for comp, ops in zip(module.computations, opcodes):
        if paired.isdisjoint(ops):
            continue            # (the users of a computation without any pair opcode are not needed)
        users: dict[str, list[Instruction]] = {}
        for inst in comp.instructions:
            if inst.opcode == "custom-call" and inst.attrs.get("custom_call_target") == "control_dep":
                continue
            for o in dict.fromkeys(inst.operands):
                users.setdefault(o, []).append(inst)
        for inst in comp.instructions:
            rule = _ASYNC_PAIRS.get(_pair_opcode(inst.opcode))
            if rule is None:
                continue
            want_user, want_operand = rule
            if want_user is not None and not (inst.opcode in ("send", "recv") and inst.name == comp.root
                                              and comp.name in async_comps):
                us = users.get(inst.name, [])
                if len(us) != 1 or _pair_opcode(us[0].opcode) not in want_user:
                    got = ", ".join(f"%{u.name} ({u.opcode})" for u in us) or "none"
                    rep.add(inst, "C128", f"{inst.opcode}: the result must have exactly one user, a "
                            f"{' or '.join(sorted(want_user))}, got {got}", at=rep.opcode_at(inst))
            if want_operand is not None:
                by = comp.by_name
                ops = [by.get(o) for o in inst.operands]
                if len(ops) != 1 or ops[0] is None or _pair_opcode(ops[0].opcode) not in want_operand:
                    got = ", ".join(f"%{o.name} ({o.opcode})" for o in ops if o is not None) or "none"
                    rep.add(inst, "C128", f"{inst.opcode}: the operand must be one "
                            f"{' or '.join(sorted(want_operand))}, got {got}", at=rep.operand_at(inst, 0))


_ALL_REDUCES = frozenset(("all-reduce", "all-reduce-start"))


def _check_constrained_all_reduces(instructions, rep: _Report):
    """XLA's VerifyLayoutConstrainedAllReduce: the all-reduce and all-reduce-start instructions of
    a module (`instructions`, in module order) are all constrain_layout=true or all not."""
    reference = None
    for inst in instructions:
        if inst.opcode not in _ALL_REDUCES:
            continue
        if reference is None:
            reference = inst
        elif bool(inst.attrs.get("constrain_layout")) != bool(reference.attrs.get("constrain_layout")):
            rep.add(inst, "C129", f"{inst.opcode}: constrain_layout must be the same for every all-reduce "
                    f"of the module ({bool(reference.attrs.get('constrain_layout'))} for %{reference.name}), "
                    f"got {bool(inst.attrs.get('constrain_layout'))}", at=rep.opcode_at(inst))
            return


def _subshape(shape: Shape | None, index) -> Shape | None:
    for k in index:
        if shape is None or not shape.is_tuple or not 0 <= k < len(shape.tuple_shapes):
            return None
        shape = shape.tuple_shapes[k]
    return shape


def _check_aliasing(module: Module, effective, rep: _Report, layout_sensitive: bool):
    """input_output_alias={ {out}: (param, {index}, kind) }, as XLA verifies it
    (HloInputOutputAliasConfig::SetUpAlias and ::Verify, ShapeVerifier::VerifyEntryComputationLayout):
    the output and parameter indices exist and name arrays, no output or parameter buffer is
    aliased twice, a must-alias pair has exactly the same shape (layout included), and, when
    layouts matter, any pair the same byte size.  A may-alias pair of other shapes is allowed."""
    alias = module.attrs.get("input_output_alias")
    if alias is None:
        return
    entry, eff, params, root = _entry_parts(module, effective)
    ecl = module.attrs.get("entry_computation_layout")
    root_shape = eff.get(root.name) or root.shape
    if ecl is not None and len(ecl.parameters) == len(params):
        root_shape = ecl.result         # XLA reads the shapes of the entry computation layout
    outs: set = set()
    ins: set = set()
    for out_idx, pnum, pidx, kind in alias.entries:
        head = f"input_output_alias {index_text(out_idx)}: ({pnum}, {index_text(pidx)})"
        out = _subshape(root_shape, out_idx)
        if out is None:
            rep.add(root, "C123", f"{head}: the output index must exist in the result "
                    f"{root_shape.to_str(False) if root_shape else '?'}, got {index_text(out_idx)}")
            continue
        if not 0 <= pnum < len(params):
            rep.add(root, "C123", f"{head}: the parameter number must be below {len(params)}, got {pnum}")
            continue
        pshape = eff.get(params[pnum].name) or params[pnum].shape
        if ecl is not None and len(ecl.parameters) == len(params):
            pshape = ecl.parameters[pnum]
        inp = _subshape(pshape, pidx)
        if inp is None:
            rep.add(params[pnum], "C123", f"{head}: the parameter index must exist in parameter {pnum} "
                    f"{pshape.to_str(False) if pshape else '?'}, got {index_text(pidx)}")
            continue
        if tuple(out_idx) in outs:
            rep.add(root, "C123", f"{head}: an output must be aliased at most once, got output "
                    f"{index_text(out_idx)} twice")
        if (pnum, tuple(pidx)) in ins:
            rep.add(params[pnum], "C123", f"{head}: a parameter buffer must be aliased at most once, got "
                    f"parameter {pnum} at {index_text(pidx)} twice")
        outs.add(tuple(out_idx))
        ins.add((pnum, tuple(pidx)))
        for what, sub, target in (("output", out, root), (f"parameter {pnum} buffer", inp, params[pnum])):
            if sub.is_tuple or sub.element_type in ("token", "opaque"):
                rep.add(target, "C123", f"{head}: the aliased {what} must be an array, got {sub.to_str(False)}")
                break
        else:
            if kind == "must-alias" and inp != out:
                rep.add(root, "C123", f"{head}: a must-alias output must have exactly the shape of parameter "
                        f"{pnum} at {index_text(pidx)}, layout included, {inp.to_str(True)}, got {out.to_str(True)}")
            elif layout_sensitive and _byte_size(inp) != _byte_size(out):
                rep.add(root, "C123", f"{head}: the aliased output must have the byte size of parameter {pnum} "
                        f"at {index_text(pidx)} ({inp.to_str(True)}), got {out.to_str(True)}")


# ------------------------------------------------------------------------------------------ warnings

# W201 "the result is never used" is not said of host and peer transfers (the IO trait), of the halves
# of an asynchronous pair (-start, -done) and of these, whose value programs commonly drop: a fact of
# this warning (rng and collective-broadcast have side effects too, yet an unused one is warned of)
_UNUSED_IS_USUAL = frozenset({"parameter", "after-all", "custom-call", "rng-get-and-update-state"})


def _warns_unused(opcode: str) -> bool:
    return not (has_trait(opcode, IO) or opcode in _UNUSED_IS_USUAL or opcode.endswith(("-done", "-start")))


def _warnings(module: Module, comps, rep: _Report, scan: ModuleScan):
    narrow: dict[int, Shape] = {}     # shapes found to have no leaf of more than NUMPY_MAX_RANK dims (kept alive)
    for comp, facts in zip(module.computations, scan.facts):
        insts = comp.instructions
        used = {o for inst in insts for o in inst.operands}
        for inst in facts.preds:
            used.update(inst.attrs["control-predecessors"])
        root = comp.root
        for inst in insts:
            op = inst.opcode
            if op == "constant" and inst.literal is not None and getattr(inst.literal, "elided", False):
                rep.add(inst, "W200", "constant: this constant was elided in the dump ({...}); its values are "
                        "unknown, so the module cannot be run faithfully", "warning", at=rep.paren_at(inst))
            name = inst.name
            if name not in used and name != root and _warns_unused(op):
                rep.add(inst, "W201", f"{inst.opcode}: the result is never used", "warning")
            shape = inst.shape
            if shape is not None and id(shape) not in narrow:
                if shape.tuple_shapes is None:
                    rank = len(shape.dims)
                else:
                    rank = max((leaf.rank for leaf in shape.leaves()), default=0)    # (its deepest leaf's)
                if rank > NUMPY_MAX_RANK:
                    rep.add(inst, "W205", f"{inst.opcode}: the result has {rank} dimensions; XLA has no limit, "
                            f"but hlo run holds arrays of at most {NUMPY_MAX_RANK} (NumPy's limit)", "warning",
                            at=rep.shape_at(inst))
                else:
                    narrow[id(shape)] = shape
            if op == "while":
                cond = inst.attrs.get("condition")
                if isinstance(cond, ComputationRef):
                    _warn_endless_loop(inst, cond.name, comps, rep)


def _warn_endless_loop(inst: Instruction, cond: str, comps, rep: _Report):
    if cond in comps and _constant_true(comps[cond]):
        rep.add(inst, "W202", f"while: the condition '{cond}' is the constant true, so this loop never ends",
                "warning", at=rep.opcode_at(inst))


def _constant_true(comp: Computation) -> bool:
    """The root is a true pred constant (possibly through copy/bitcast/reshape of one)."""
    inst = comp.by_name.get(comp.root)
    for _ in range(8):
        if inst is None:
            return False
        if inst.opcode == "constant":
            lit = inst.literal
            if lit is None or getattr(lit, "elided", False):
                return False
            try:
                import numpy as np
                return bool(np.all(np.asarray(lit.value)))
            except Exception:
                return False
        if inst.opcode in ("copy", "bitcast", "reshape", "convert") and inst.operands:
            inst = comp.by_name.get(inst.operands[0])
            continue
        return False
    return False
