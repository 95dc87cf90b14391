"""Matching the instructions of two modules the way a compiler engineer would.

Instructions are nodes `(computation name, instruction name)`.  Before matching, each module's
instructions are reduced to the values they stand for (`canonical`):

- a parameter of a computation that has one caller (a fusion's or call's computation, a branch of a
  conditional) is the caller's operand; a `fusion` or `call` is the root of its computation;
- a `get-tuple-element` of a `tuple` is that element;
- instructions that keep the elements and their row-major order (`copy`, `reshape`, a `broadcast`
  that adds only size-1 dimensions, a `bitcast` between default layouts) are their operand: a value
  matched to one of another shape with the same element count is compared after a reshape.

So fused computations are matched through their fusion instructions, and a before-optimization text
(calls, degenerate reshapes) lines up with its after-optimization text (fusions, copies, bitcasts).

Then every executed instruction of B that stands for its own value is matched to one of A, first
rule that applies:

1. the same name (XLA keeps most names through its passes), with the same opcode and a shape of the
   same element type and element count, whose matched operands do not contradict it; or with
   another opcode when the shape is the same and every operand is matched to the same operand (an
   edited instruction);
2. the same `op_name` and source location in the metadata (stack frames resolved), the same opcode,
   the same element type and count; one candidate, or the one whose operands match;
3. structure: the same opcode, attributes and result shape over operands already matched (commutative
   operands in any order; constants by value), propagating from the entry parameters (matched by
   number) and constants; as a last resort the one instruction of that opcode over those operands
   with the same element count.

4. (hlo_cli.diff.core, after a first run of both modules) value: an instruction left out whose value
   is the same bits as the value of exactly one instruction of A left out (the same scope, as many
   executions; not a constant array), then structure again from there (`extend_matching`).

A while loop matched to a while loop matches its body's and condition's parameters.  Computations
called from several places (before CallInliner) are matched only by name, within a computation of
the same name: which call an execution belongs to is not known.  One instruction of A may be matched
by several of B (XLA duplicates cheap instructions into several fusions).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..interpreter.schedule import run_order, text_order
from ..ir.module import Instruction, Module
from ..ir.opcodes import ASYNC, COLLECTIVE, CONTROL_FLOW, DEVICE_ID, IO, OPCODES, READS_RNG, with_trait

Node = tuple  # (computation name, instruction name)

# the instructions whose computations the matching follows (with every asynchronous start: see
# `follows`): control flow and fusions
CONTROL = with_trait(CONTROL_FLOW) | {"fusion"}


def follows(opcode: str) -> bool:
    """Whether the matching follows the computations of an `opcode` instruction: control flow,
    fusions, asynchronous starts (async-start and its `<op>-start` spelling, all-reduce-start)."""
    return opcode in CONTROL or opcode.endswith("-start")


COMMUTATIVE = frozenset({"add", "multiply", "maximum", "minimum", "and", "or", "xor"})
_IGNORED_ATTRS = frozenset({"metadata", "backend_config", "sharding", "frontend_attributes", "statistics",
                            "control_predecessors", "control-predecessors", "kind", "calls", "schedule",
                            "origin", "output_to_operand_aliasing"})


# not value-numbered: values that are not a function of the operands alone (random state, transfers,
# collectives, device ids, asynchronous halves), what runs other code, and what only names another
# value (parameters, get-tuple-element); nor the async spellings `<op>-start/-update/-done`, which
# are not in the opcode table
_NOT_NUMBERED = with_trait(READS_RNG, IO, COLLECTIVE, DEVICE_ID, ASYNC, CONTROL_FLOW) \
    | {"parameter", "rng-bit-generator", "custom-call", "fusion", "after-all", "get-tuple-element"}


def _is_default_layout(shape) -> bool:
    lay = shape.layout
    return lay is None or tuple(lay.minor_to_major) == tuple(range(len(shape.dims) - 1, -1, -1))


def _leaf_signature(shape):
    """(element type, element count) of each array leaf: values of the same signature can be compared."""
    if shape.is_tuple:
        return tuple(_leaf_signature(s) for s in shape.tuple_shapes)
    n = 1
    for d in shape.dims:
        n *= int(d)
    return (shape.element_type, n)


def _squeezed_signature(shape):
    """(element type, dimensions other than 1) of each leaf: the same elements in the same row-major
    order, whatever size-1 dimensions come and go."""
    if shape.is_tuple:
        return tuple(_squeezed_signature(s) for s in shape.tuple_shapes)
    return (shape.element_type, tuple(d for d in shape.dims if d != 1))


def _exact_signature(shape):
    if shape.is_tuple:
        return tuple(_exact_signature(s) for s in shape.tuple_shapes)
    return (shape.element_type, tuple(shape.dims))


class ModuleIndex:
    """One module's instructions as nodes, their callers, canonical values and execution order."""

    def __init__(self, module: Module):
        self.module = module
        self.comps = module.computation_map
        self.entry = module.entry
        self.inst: dict[Node, Instruction] = {}
        for c in module.computations:
            for i in c.instructions:
                self.inst[(c.name, i.name)] = i
        # caller sites through control flow (the computations the evaluator runs with hooks)
        self.callers: dict[str, list[tuple[str, Instruction]]] = {}
        for c in module.computations:
            for i in c.instructions:
                if follows(i.opcode):
                    for callee in i.called_computations:
                        self.callers.setdefault(callee, []).append((c.name, i))
        self.executed_comps = self._reachable()
        self.loop_depth, self.scope = self._loop_depths()
        self.scope_map: dict[str, str] = {}     # (B only) B's scopes -> A's, from matched loops and conditionals
        self._canon: dict[Node, Node] = {}
        self._numbering()
        self.by_name: dict[str, list[Node]] = {}
        for node in self.inst:
            if node[0] in self.executed_comps:
                self.by_name.setdefault(node[1], []).append(node)

    def _reachable(self) -> set[str]:
        seen, todo = set(), [self.entry]
        while todo:
            c = todo.pop()
            if c in seen or c not in self.comps:
                continue
            seen.add(c)
            for i in self.comps[c].instructions:
                if follows(i.opcode):
                    todo.extend(i.called_computations)
        return seen

    def _loop_depths(self):
        """Each computation's nesting in loops and conditionals, and its scope: the loop body,
        condition or branch it runs in ("" outside them), whose executions its values follow."""
        depth, scope = {self.entry: 0}, {self.entry: ""}
        todo = [self.entry]
        while todo:
            c = todo.pop()
            for i in self.comps[c].instructions:
                if follows(i.opcode):
                    scoped = i.opcode in ("while", "conditional")
                    for callee in i.called_computations:
                        if callee in self.comps and callee not in depth:
                            depth[callee] = depth[c] + (1 if scoped else 0)
                            scope[callee] = callee if scoped else scope[c]
                            todo.append(callee)
        return depth, scope

    def scope_of(self, node) -> str:
        s = self.scope.get(node[0], "")
        return self.scope_map.get(s, s)

    def _numbering(self):
        """Value numbering (as XLA's CSE): instructions computing the same pure operation on the same
        values are one value, its first instruction in execution order.  Inside loops only within
        one computation (an execution of a loop body is not one of another loop's)."""
        table: dict = {}
        live = self.live = self._live()
        for node in self.execution_order():
            c = self._resolve(node, 0)
            if c != node:
                self._canon[node] = self._canon.get(c, c)
                continue
            inst = self.inst[node]
            key = None
            if node in live and inst.opcode in OPCODES and inst.opcode not in _NOT_NUMBERED \
                    and not self.multi_called(node[0]):
                key = _strict_key(self, node, self.canonical)
            if key is not None:
                self._canon[node] = table.setdefault(key, node)
            else:
                self._canon[node] = node

    def _live(self) -> set:
        """The nodes the evaluator runs (schedule.run_order: dead code is skipped, so it cannot stand
        for a value)."""
        live = set()
        for cname in self.executed_comps:
            comp = self.comps[cname]
            insts = comp.instructions
            live.update((cname, insts[k].name) for k in run_order(comp, strict=False))
        return live

    def single_caller(self, comp: str):
        """(caller computation, caller instruction) when COMP is called from exactly one place."""
        sites = self.callers.get(comp, [])
        return sites[0] if len(sites) == 1 else None

    def multi_called(self, comp: str) -> bool:
        return len(self.callers.get(comp, [])) > 1

    # -- canonical values ------------------------------------------------------------------------
    def canonical(self, node: Node) -> Node:
        got = self._canon.get(node)
        if got is None:
            r = self._resolve(node, 0)
            got = self._canon[node] = self._canon.get(r, r)
        return got

    def _resolve(self, node: Node, depth: int) -> Node:
        if depth > 200:
            return node
        inst = self.inst.get(node)
        if inst is None:
            return node
        comp, op = node[0], inst.opcode
        if op == "parameter":
            site = self.single_caller(comp) if comp != self.entry else None
            if site is not None:
                ccomp, cinst = site
                k = inst.parameter_number
                if cinst.opcode in ("call", "fusion") and k is not None and k < len(cinst.operands):
                    return self._resolve((ccomp, cinst.operands[k]), depth + 1)
                if cinst.opcode == "conditional":
                    names = self._branch_names(cinst)
                    if comp in names and names.count(comp) == 1 and k == 0:
                        j = 1 + names.index(comp)
                        if j < len(cinst.operands):
                            return self._resolve((ccomp, cinst.operands[j]), depth + 1)
            return node
        if op in ("fusion", "call"):
            callee = inst.called_computations[0] if inst.called_computations else None
            if callee in self.comps and self.single_caller(callee) is not None:
                return self._resolve((callee, self.comps[callee].root), depth + 1)
            return node
        if op == "get-tuple-element" and inst.operands:
            t = self._resolve((comp, inst.operands[0]), depth + 1)
            ti = self.inst.get(t)
            idx = inst.attrs.get("index")
            if ti is not None and ti.opcode == "tuple" and idx is not None and int(idx) < len(ti.operands):
                return self._resolve((t[0], ti.operands[int(idx)]), depth + 1)
            return node
        if self.transparent(node):
            return self._resolve((comp, inst.operands[0]), depth + 1)
        return node

    @staticmethod
    def _branch_names(cinst) -> list[str]:
        a = cinst.attrs
        if "branch_computations" in a:
            return [c.name for c in a["branch_computations"]]
        names = []
        for k in ("true_computation", "false_computation"):
            if k in a:
                names.append(a[k].name)
        return names

    def transparent(self, node: Node) -> bool:
        """The instruction keeps its operand's elements in row-major order (only the shape or the
        layout changes)."""
        inst = self.inst[node]
        op = inst.opcode
        if op not in ("copy", "reshape", "broadcast", "bitcast") or len(inst.operands) != 1 or inst.shape.is_tuple:
            return False
        src = self.inst.get((node[0], inst.operands[0]))
        if src is None or src.shape.is_tuple or src.shape.element_type != inst.shape.element_type:
            return False
        if _leaf_signature(src.shape) != _leaf_signature(inst.shape):
            return False
        if op in ("copy", "reshape"):
            return True
        if op == "broadcast":
            dims = tuple(inst.attrs.get("dimensions") or ())
            return list(dims) == sorted(dims)
        return _is_default_layout(src.shape) and _is_default_layout(inst.shape)

    def is_alias(self, node: Node) -> bool:
        """NODE only names a value another node holds (see `canonical`)."""
        return self.canonical(node) != node

    # -- order -----------------------------------------------------------------------------------
    def execution_order(self) -> list[Node]:
        """Every node of the executed computations, operands first, a called computation's nodes
        before the fusion or call that uses its root, a loop's body after the while."""
        got = getattr(self, "_order", None)
        if got is None:
            got = self._order = self._execution_order()
        return got

    def _execution_order(self) -> list[Node]:
        out: list[Node] = []
        visited: set[str] = set()

        def visit(cname: str):
            if cname in visited or cname not in self.comps:
                return
            visited.add(cname)
            comp = self.comps[cname]
            for inst in text_order(comp):
                if inst.opcode in ("while", "conditional"):
                    out.append((cname, inst.name))
                    for callee in inst.called_computations:
                        visit(callee)
                    continue
                if follows(inst.opcode):
                    for callee in inst.called_computations:
                        visit(callee)
                out.append((cname, inst.name))
        visit(self.entry)
        return out

    # -- keys ------------------------------------------------------------------------------------
    def metadata_key(self, node: Node):
        from ..pipeline.dumps import source_of
        md = source_of(self.module, self.inst[node])
        if not md.get("op_name") and not md.get("source"):
            return None
        return (md.get("op_name"), md.get("source"))

    def attr_signature(self, inst: Instruction):
        from ..ir.attributes import ComputationRef
        parts = []
        for k in sorted(inst.attrs):
            if k in _IGNORED_ATTRS:
                continue
            v = inst.attrs[k]
            if isinstance(v, ComputationRef):
                parts.append((k, self._callee_signature(v.name)))
            elif isinstance(v, tuple) and v and isinstance(v[0], ComputationRef):
                parts.append((k, tuple(self._callee_signature(c.name) for c in v)))
            else:
                r = repr(v)
                if " at 0x" not in r:
                    parts.append((k, r))
        return tuple(parts)

    def _callee_signature(self, name: str):
        c = self.comps.get(name)
        if c is None:
            return name
        root = c.root_instruction
        return (root.opcode, len(c.instructions))

    def literal_key(self, inst: Instruction):
        lit = inst.literal
        if lit is None or getattr(lit, "elided", False) or lit.shape.is_tuple:
            return None
        v = lit.value
        try:
            return (str(v.dtype), tuple(v.shape), v.tobytes())
        except AttributeError:
            return None


@dataclass
class Match:
    """What B's node is matched to in A, and by which rule."""
    a: Node
    how: str          # name | metadata | structure | parameter | loop | alias


@dataclass
class Matching:
    """The matching of module B's nodes to module A's.  `pairs`: every B node to compare (aliases
    included, matched to A's canonical node of their value); `canon`: B's canonical values to A's."""
    a: ModuleIndex
    b: ModuleIndex
    pairs: dict = field(default_factory=dict)      # B node -> Match
    canon: dict = field(default_factory=dict)      # B canonical node -> A canonical node
    loop_sources: dict = field(default_factory=dict)   # B loop parameter -> the B nodes its value comes from
    _indexes: tuple = ()

    def counts(self) -> dict:
        out: dict[str, int] = {}
        for m in self.pairs.values():
            out[m.how] = out.get(m.how, 0) + 1
        return out


def match_modules(module_a: Module, module_b: Module) -> Matching:
    """Match B's instructions to A's (see the module's docstring)."""
    A, B = ModuleIndex(module_a), ModuleIndex(module_b)
    M = Matching(A, B)
    M._indexes = _a_indexes(A)
    _propagate(M)
    return M


def extend_matching(M: Matching, anchors: dict) -> set:
    """Add ANCHORS (B node -> A node: values found equal bit for bit in a run) to the matching and
    propagate from them (structure over the newly matched operands).  Returns the B nodes newly
    paired."""
    before = set(M.pairs)
    for b, a in anchors.items():
        if b not in M.pairs:
            M.pairs[b] = Match(a, "value")
            M.canon.setdefault(M.b.canonical(b), M.a.canonical(a))
    _propagate(M)
    return set(M.pairs) - before


def _a_indexes(A: ModuleIndex):
    """A's indexes, over live canonical nodes: metadata, strict and loose structure, operands."""
    md_index: dict = {}
    strict: dict = {}
    loose: dict = {}
    by_operands: dict = {}
    for node in A.execution_order():
        if A.is_alias(node) or node not in A.live:
            continue
        inst = A.inst[node]
        if inst.opcode == "parameter":
            continue
        if not _crossable(A, node):
            continue
        key = A.metadata_key(node)
        if key is not None:
            md_index.setdefault(key, []).append(node)
        sk = _strict_key(A, node, A.canonical)
        if sk is not None:
            strict.setdefault(sk, []).append(node)
        lk = _loose_key(A, node, A.canonical)
        if lk is not None:
            loose.setdefault(lk, []).append(node)
            by_operands.setdefault(_operands_key(A, node, A.canonical), []).append(node)
    return md_index, strict, loose, by_operands


def _propagate(M: Matching):
    """Match every B node not matched yet, in execution order (operands first)."""
    A, B = M.a, M.b
    md_index, strict, loose, by_operands = M._indexes

    def record(bnode: Node, anode: Node, how: str):
        M.pairs[bnode] = Match(anode, how)
        cb = B.canonical(bnode)
        if cb not in M.canon:
            M.canon[cb] = A.canonical(anode)

    def b_operand(n: Node):
        return M.canon.get(B.canonical(n))

    a_entry = {p.parameter_number: (A.entry, p.name) for p in A.comps[A.entry].parameters}
    for node in B.execution_order():
        if node in M.pairs:
            continue
        inst = B.inst[node]
        if B.is_alias(node):
            if inst.opcode not in ("parameter", "fusion", "call", "get-tuple-element", "tuple"):
                got = _by_name(A, B, M, node, b_operand)
                if got is not None:
                    M.pairs[node] = Match(*got)
            continue
        if inst.opcode == "parameter":
            if node[0] == B.entry and inst.parameter_number in a_entry:
                record(node, a_entry[inst.parameter_number], "parameter")
            continue
        got = _by_name(A, B, M, node, b_operand)
        if got is None:
            got = _by_metadata(A, B, node, md_index, b_operand)
        if got is None and _crossable(B, node):
            got = _by_structure(A, B, node, strict, loose, b_operand)
        if got is None and _crossable(B, node):
            got = _by_operands(A, B, node, by_operands, b_operand)
        if got is None:
            continue
        anode, how = got
        record(node, anode, how)
        if inst.opcode == "while" and A.inst[anode].opcode == "while":
            _match_loop(A, B, M, node, anode)
        if inst.opcode in ("while", "conditional") and A.inst[anode].opcode == inst.opcode:
            for cb, ca in zip(inst.called_computations, A.inst[anode].called_computations):
                B.scope_map.setdefault(cb, ca)

    _edited_constants(A, B, M)

    # aliases of B: compared against A's value of the same canonical node
    for node in B.inst:
        if node[0] not in B.executed_comps or node in M.pairs or not B.is_alias(node):
            continue
        inst = B.inst[node]
        if inst.opcode in ("parameter", "fusion", "call", "get-tuple-element", "tuple") or inst.shape.is_tuple:
            continue                    # the same value as the node it names: compared there
        target = M.canon.get(B.canonical(node))
        if target is not None and _leaf_signature(A.inst[target].shape) == _leaf_signature(inst.shape):
            M.pairs[node] = Match(target, "alias")


def _edited_constants(A, B, M):
    """A constant of B with the name of one of A of the same shape but another value is that
    constant edited when one of its users is matched to a user of A's."""
    users_a: dict = {}
    for node, inst in A.inst.items():
        for o in inst.operands:
            users_a.setdefault((node[0], o), set()).add(node)
    for node, inst in B.inst.items():
        if inst.opcode != "constant" or node in M.pairs or node[0] not in B.executed_comps:
            continue
        for anode in A.by_name.get(node[1], ()):
            ai = A.inst[anode]
            if ai.opcode != "constant" or _exact_signature(ai.shape) != _exact_signature(inst.shape):
                continue
            ua = users_a.get(anode, set())
            ub = [u for u, i in B.inst.items() if u[0] == node[0] and node[1] in i.operands]
            if any(u in M.pairs and M.pairs[u].a in ua for u in ub):
                M.pairs[node] = Match(anode, "name")
                M.canon.setdefault(B.canonical(node), A.canonical(anode))
                break


def _crossable(ix: ModuleIndex, node: Node) -> bool:
    """Instructions of a computation called from several places are matched by name only."""
    return not ix.multi_called(node[0])


def _operands_consistent(A, B, anode, bnode, b_operand, need_all: bool) -> bool:
    """B's operands agree with A's: every matched one is matched to A's operand (in any order for a
    commutative opcode), and the match is anchored: some operand is matched, or the operands have
    the same names (a name alone, over operands nothing confirms, is a coincidence of numbering).
    NEED_ALL: an operand not matched must at least have the same name."""
    ai, bi = A.inst[anode], B.inst[bnode]
    if not ai.operands and not bi.operands:
        return True
    if len(ai.operands) != len(bi.operands):
        return False
    got = [b_operand((bnode[0], o)) for o in bi.operands]
    want = [A.canonical((anode[0], o)) for o in ai.operands]
    same_names = [o1 == o2 for o1, o2 in zip(bi.operands, ai.operands)]
    if need_all and not all(g is not None or n for g, n in zip(got, same_names)):
        return False
    if bi.opcode in COMMUTATIVE and ai.opcode in COMMUTATIVE:
        left = list(want)
        for g in got:
            if g is None:
                continue
            if g not in left:
                return False
            left.remove(g)
    elif not all(g is None or g == w for g, w in zip(got, want)):
        return False
    return any(g is not None for g in got) or all(same_names)


def _by_name(A, B, M, bnode, b_operand):
    name = bnode[1]
    cands = A.by_name.get(name)
    if not cands:
        return None
    same_comp = [c for c in cands if c[0] == bnode[0]]
    cands = same_comp or ([] if B.multi_called(bnode[0]) else cands)
    bi = B.inst[bnode]
    for anode in sorted(cands, key=lambda n: n not in A.live):
        if A.is_alias(anode) and A.inst[anode].opcode in ("parameter", "fusion", "call", "get-tuple-element"):
            continue
        ai = A.inst[anode]
        if A.multi_called(anode[0]) and anode[0] != bnode[0]:
            continue
        if A.scope_of(anode) != B.scope_of(bnode):
            continue
        if ai.opcode == bi.opcode == "constant" and A.literal_key(ai) != B.literal_key(bi):
            continue                    # (an edited constant: matched after the users, see _edited_constants)
        if ai.opcode == bi.opcode:
            if _leaf_signature(ai.shape) == _leaf_signature(bi.shape) and \
                    _operands_consistent(A, B, anode, bnode, b_operand, need_all=False):
                return anode, "name"
        elif _exact_signature(ai.shape) == _exact_signature(bi.shape) and \
                _operands_consistent(A, B, anode, bnode, b_operand, need_all=True):
            return anode, "name (opcode differs)"
    return None


def _by_metadata(A, B, bnode, md_index, b_operand):
    bi = B.inst[bnode]
    if bi.opcode == "constant":            # (XLA folds constants: one op_name, other values)
        return None
    key = B.metadata_key(bnode)
    if key is None or not key[1]:          # an op_name alone is too loose ("reduce_sum" of every reducer)
        return None
    cands = [a for a in md_index.get(key, ()) if A.inst[a].opcode == bi.opcode
             and _squeezed_signature(A.inst[a].shape) == _squeezed_signature(bi.shape)
             and A.scope_of(a) == B.scope_of(bnode)]
    if not cands:
        return None
    full = [a for a in cands if len(A.inst[a].operands) == len(bi.operands) and all(
        b_operand((bnode[0], o)) is not None for o in bi.operands) and
        _operands_consistent(A, B, a, bnode, b_operand, need_all=False)]
    if len(full) >= 1 and bi.operands:
        return full[0], "metadata"
    if len(cands) == 1 and _operands_consistent(A, B, cands[0], bnode, b_operand, need_all=False):
        return cands[0], "metadata"
    return None


def _strict_key(ix: ModuleIndex, node: Node, operand):
    inst = ix.inst[node]
    if inst.opcode in ("parameter", "rng", "rng-bit-generator", "rng-get-and-update-state", "infeed", "recv",
                       "custom-call"):
        return None
    if inst.opcode == "constant":
        lk = ix.literal_key(inst)
        return None if lk is None else ("constant", lk)
    ops = tuple(operand((node[0], o)) for o in inst.operands)
    if any(o is None for o in ops):
        return None
    if inst.opcode in COMMUTATIVE:
        ops = tuple(sorted(ops, key=repr))
    return (inst.opcode, ops, ix.attr_signature(inst), _exact_signature(inst.shape), ix.scope_of(node))


def _loose_key(ix: ModuleIndex, node: Node, operand):
    inst = ix.inst[node]
    if inst.opcode in ("parameter", "constant", "tuple", "rng", "custom-call") or not inst.operands:
        return None
    ops = tuple(operand((node[0], o)) for o in inst.operands)
    if any(o is None for o in ops):
        return None
    if inst.opcode in COMMUTATIVE:
        ops = tuple(sorted(ops, key=repr))
    return (inst.opcode, ops, _squeezed_signature(inst.shape), ix.scope_of(node))


def _by_structure(A, B, bnode, strict, loose, b_operand):
    sk = _strict_key(B, bnode, b_operand)
    if sk is not None:
        c = strict.get(sk)
        if c:
            return c[0], "structure"
    lk = _loose_key(B, bnode, b_operand)
    if lk is not None:
        c = loose.get(lk)
        if c and len(c) == 1:
            return c[0], "structure"
    return None


def _operands_key(ix: ModuleIndex, node: Node, operand):
    inst = ix.inst[node]
    ops = tuple(sorted((operand((node[0], o)) for o in inst.operands), key=repr))
    if not ops or any(o is None for o in ops):
        return None
    return (ops, _exact_signature(inst.shape), ix.scope_of(node))


def _stem(name: str) -> str:
    head, dot, tail = name.rpartition(".")
    return head if dot and tail.isdigit() else name


def _by_operands(A, B, bnode, by_operands, b_operand):
    """Another opcode over the same operands, with the same shape: the one candidate, or the one of
    the same name stem (XLA's clones keep the stem: mul.1 -> mul.0)."""
    key = _operands_key(B, bnode, b_operand)
    if key is None:
        return None
    stem = _stem(bnode[1])
    cands = [c for c in by_operands.get(key) or () if _stem(c[1]) == stem]
    if len(cands) == 1:
        how = "structure" if A.inst[cands[0]].opcode == B.inst[bnode].opcode else "structure (opcode differs)"
        return cands[0], how
    return None


def _match_loop(A, B, M, bnode, anode):
    """A while matched to a while: its body's and condition's parameters correspond."""
    ai, bi = A.inst[anode], B.inst[bnode]
    for attr in ("body", "condition"):
        ca, cb = ai.attrs.get(attr), bi.attrs.get(attr)
        if ca is None or cb is None or ca.name not in A.comps or cb.name not in B.comps:
            continue
        pa = {p.parameter_number: p for p in A.comps[ca.name].parameters}
        for p in B.comps[cb.name].parameters:
            q = pa.get(p.parameter_number)
            if q is not None and _leaf_signature(q.shape) == _leaf_signature(p.shape):
                bn, an = (cb.name, p.name), (ca.name, q.name)
                if bn not in M.pairs:
                    M.pairs[bn] = Match(an, "loop")
                    M.canon.setdefault(B.canonical(bn), A.canonical(an))
                    body = bi.attrs.get("body")
                    srcs = [B.canonical((bnode[0], o)) for o in bi.operands]
                    if body is not None and body.name in B.comps:
                        srcs.append(B.canonical((body.name, B.comps[body.name].root)))
                    M.loop_sources[bn] = srcs
