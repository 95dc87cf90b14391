"""The graph of an HLO module that every drawing shares (DOT, SVG, HTML, Model Explorer JSON).

`build_graph(module, ...)` turns the IR into a `Graph`: plain dataclasses, no drawing in them.

* **Groups** are computations drawn as nested boxes: the entry (or the computation asked for), and
  inside it the computations its instructions call as sub-graphs: while bodies and conditions,
  conditional branches, `call`s, async computations, and fusion computations when fusions are
  expanded.  A group sits in the group of its first caller; `Group.callers` lists every caller.
  Computations applied element by element or as reducers (`to_apply` of reduce, reduce-window,
  scatter, sort, map, all-reduce..., a select-and-scatter's select/scatter, a custom-call's
  called computations) are not drawn: the calling node carries a one-line summary of them
  (`Node.applies`, e.g. ``to_apply: region_0.2 = add``).
* **Nodes** are instructions, with an id unique in the module (`node_id`: the instruction's name,
  or ``computation/name`` where two computations use the same name), opcode, shape, key
  attributes as text, `op_name` and the source ``file:line`` from the metadata (through the
  StackFrames section when there is one) and the HLO text's own ``file:line``.  A collapsed
  fusion (the default) is one node with its kind and its fused computation's size and opcodes.
  Scalar constants are folded into the nodes that use them (`Node.inline_operands`) instead of
  being drawn with an edge to each user (`fold_constants=False` draws them).
* **Edges** carry the shape of the value: operand edges (`kind="data"`, a get-tuple-element's
  edge names the tuple index and carries the element's shape), control edges (`"control"`, drawn
  dashed), and the links between a caller and the computation it calls: the caller's operand to
  the callee's parameter (`"param"`) and the callee's root back to the caller (`"result"`).

Readability of large modules: `computation=NAME` draws one computation (and what it calls),
`around=NAME, depth=K` keeps the neighbourhood of one instruction (K edges in both directions, not
walking on through hubs of more than HUB_DEGREE edges, such as a weight every layer reads; nodes
with neighbours left out count them in `hidden_inputs` / `hidden_outputs`), and
`Graph.warnings` says how to narrow a graph of more than `WARN_NODES` nodes.

Overlays (overlays.py) key their values by `node_id`; `Graph.represented_by` maps an instruction that
is not drawn (inside a collapsed fusion) to the node standing for it.
"""
from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field

from ..errors import HloInputError
from ..ir.opcodes import CONTROL_FLOW, OPCODES, computation_attributes, with_trait

WARN_NODES = 1500          # above this, Graph.warnings suggests narrowing the graph
HUB_DEGREE = 16            # around/depth does not walk on through a node with more edges than this
_ATTR_TEXT_MAX = 200       # an attribute's text in Node.attributes is cut here

# attributes that are shown elsewhere (or not at all) instead of in Node.attributes: metadata, control
# predecessors (edges) and every attribute that names called computations (groups or calls)
_SKIP_ATTRS = {"metadata", "control-predecessors"} | {a for op in OPCODES for a in computation_attributes(op)}
# the computations an opcode calls as a sub-graph (drawn as a nested group), by attribute: those of
# control flow, fusion and async-start, named by the opcode table's computation-valued attributes
_NESTED_CALLS = {op: computation_attributes(op)
                 for op in sorted(with_trait(CONTROL_FLOW) | {"fusion", "async-start"})}
# attributes worth a place in a node's short label, in order of preference
_LABEL_ATTRS = ("kind", "custom_call_target", "direction", "index", "dimensions", "slice",
                "lhs_contracting_dims", "window", "dim_labels", "fft_type", "comparison_direction",
                "distribution", "replica_groups")


class GraphError(HloInputError):
    """A graph option names something the module does not have (exit 2)."""


@dataclass
class Node:
    """One instruction (or a collapsed fusion) of the drawing."""
    id: str                          # unique in the module: see node_id()
    name: str                        # the instruction's name
    computation: str                 # the computation holding it
    group: str                       # id of the Group drawn around it
    opcode: str
    shape: str                       # HLO notation without layouts: f32[2,3], (f32[], s32[])
    attributes: dict[str, str] = field(default_factory=dict)   # attribute name -> its text (cut)
    label_attributes: list[str] = field(default_factory=list)  # a few "name=value" for the label
    op_name: str | None = None       # metadata op_name (the framework's name for it)
    source: str | None = None        # the framework source file:line (metadata / stack frames)
    stack: list[str] = field(default_factory=list)             # the call stack, innermost first
    location: str = ""               # where the instruction is written in the HLO text: file:line
    is_root: bool = False
    parameter_number: int | None = None
    applies: list[str] = field(default_factory=list)   # computations applied compactly: "to_apply: r = add"
    calls: list[str] = field(default_factory=list)     # computations it calls (any kind)
    inline_operands: dict[int, str] = field(default_factory=dict)  # operand index -> folded constant text
    fusion_kind: str | None = None   # a fusion: kLoop, kInput, kOutput, kCustom...
    fused_computation: str | None = None
    fused_size: int = 0              # instructions in the fused computation (nested fusions included)
    fused_opcodes: dict[str, int] = field(default_factory=dict)   # their opcodes, most frequent first
    collapsed: bool = False          # a fusion drawn as one node (its computation not drawn)
    hidden_inputs: int = 0           # around/depth: operands left out of the drawing
    hidden_outputs: int = 0          # around/depth: users left out of the drawing

    @property
    def title(self) -> str:
        """The opcode line of a label: `fusion kLoop`, `compare LT`, `get-tuple-element 1`."""
        return self.opcode + ("" if self.fusion_kind is None else f" {self.fusion_kind}")


@dataclass
class Edge:
    """A value going from one node to another."""
    source: str                      # node id
    target: str                      # node id
    shape: str                       # the shape of the value carried ("" for control edges)
    kind: str = "data"               # data | control | param | result
    operand_index: int | None = None   # data: which operand of the target; param: the parameter number
    tuple_index: int | None = None   # data into a get-tuple-element: the element taken
    via: str | None = None           # param / result: the node id of the calling instruction

    @property
    def label(self) -> str:
        """What a drawing writes on the edge."""
        if self.kind == "control":
            return ""
        if self.tuple_index is not None:
            return f"#{self.tuple_index} {self.shape}"
        return self.shape


@dataclass
class Group:
    """A computation drawn as a box, inside the box of the computation that calls it."""
    id: str                          # the computation's name (unique in the module)
    computation: str
    kind: str                        # entry | computation | while_body | while_condition | branch | call | fusion | async
    label: str                       # e.g. "while.5 body: region_0.2"
    parent: str | None = None        # the enclosing group's id (None: the outermost)
    callers: list[str] = field(default_factory=list)   # node ids of the instructions calling it
    nodes: list[str] = field(default_factory=list)     # node ids directly in it, in the text's order
    children: list[str] = field(default_factory=list)  # group ids nested in it
    size: int = 0                    # instructions of the computation (drawn or not)


@dataclass
class Graph:
    """A module's drawing: nodes, edges, nested groups (see the module's docstring)."""
    module: str
    root_group: str                  # the outermost group's id
    nodes: dict[str, Node] = field(default_factory=dict)       # id -> node, in drawing order
    edges: list[Edge] = field(default_factory=list)
    groups: dict[str, Group] = field(default_factory=dict)     # id -> group, parents before children
    represented_by: dict[str, str] = field(default_factory=dict)   # undrawn node id -> drawn node id
    warnings: list[str] = field(default_factory=list)
    options: dict = field(default_factory=dict)                # how it was built (for captions)
    ids: dict[tuple[str, str], str] = field(default_factory=dict)  # (computation, instruction) -> id
    omitted_nodes: int = 0           # instructions of the drawn computations left out (around/depth)

    def node_of(self, computation: str, instruction: str) -> str | None:
        """The drawn node standing for an instruction: its own node, the collapsed fusion holding
        it, or None when the drawing leaves it out."""
        nid = self.ids.get((computation, instruction))
        if nid is None:
            return None
        if nid in self.nodes:
            return nid
        return self.represented_by.get(nid)

    def group_path(self, group_id: str) -> list[str]:
        """The ids of the groups from the outermost down to `group_id`."""
        out = []
        g = self.groups.get(group_id)
        while g is not None:
            out.append(g.id)
            g = self.groups.get(g.parent) if g.parent else None
        return out[::-1]

    def inputs(self, node_id: str) -> list[Edge]:
        return [e for e in self.edges if e.target == node_id]

    def outputs(self, node_id: str) -> list[Edge]:
        return [e for e in self.edges if e.source == node_id]


# ----------------------------------------------------------------------------- ids

def node_ids(module) -> dict[tuple[str, str], str]:
    """(computation, instruction) -> node id for every instruction of the module: the name itself
    where it is unique in the module (as XLA keeps them), else `computation/name`."""
    seen = Counter(i.name for _, i in module.instructions())
    return {(c.name, i.name): (i.name if seen[i.name] == 1 else f"{c.name}/{i.name}")
            for c, i in module.instructions()}


def node_id(module, computation: str, instruction: str) -> str:
    """The id of one instruction's node (see node_ids)."""
    return node_ids(module)[(computation, instruction)]


# ----------------------------------------------------------------------------- helpers

def _shape_text(shape) -> str:
    if shape is None:
        return ""
    from ..ir.printer import format_shape
    return format_shape(shape, False)


def _computation_refs(value) -> list[str]:
    from ..ir.attributes import ComputationRef, InlineComputation
    if isinstance(value, (ComputationRef, InlineComputation)):
        return [value.name]
    if isinstance(value, tuple) and value and isinstance(value[0], (ComputationRef, InlineComputation)):
        return [c.name for c in value]
    return []


def _structural_calls(inst) -> list[tuple[str, str, int]]:
    """(computation, group kind, index) of the computations INST calls as drawn sub-graphs."""
    out = []
    attrs = _NESTED_CALLS.get(inst.opcode, ())
    for a in attrs:
        names = _computation_refs(inst.attrs.get(a))
        for k, n in enumerate(names):
            if inst.opcode == "while":
                kind = "while_body" if a == "body" else "while_condition"
                index = 0
            elif inst.opcode == "conditional":
                kind = "branch"
                index = {"true_computation": 0, "false_computation": 1}.get(a, k)
            elif inst.opcode == "fusion":
                kind, index = "fusion", 0
            elif inst.opcode == "async-start":
                kind, index = "async", 0
            else:
                kind, index = "call", 0
            out.append((n, kind, index))
    return out


def _compact_calls(inst) -> list[tuple[str, str]]:
    """(attribute, computation) of the computations INST applies without drawing them."""
    structural = set(_NESTED_CALLS.get(inst.opcode, ()))
    out = []
    for a, v in inst.attrs.items():
        if a in structural:
            continue
        for n in _computation_refs(v):
            out.append((a, n))
    return out


def _summary_of(comp) -> str:
    """A reducer or applied computation in a few words: `add`, `max`, `compare GT`, or its size."""
    if comp is None:
        return "?"
    work = [i for i in comp.instructions if i.opcode not in ("parameter", "tuple", "get-tuple-element",
                                                             "constant")]
    if not work:
        return comp.root_instruction.opcode
    if len(work) <= 3:
        parts = []
        for i in work:
            t = i.opcode
            d = i.attrs.get("direction")
            if d is not None:
                t += f" {d}"
            parts.append(t)
        return ", ".join(parts)
    return f"{len(comp.instructions)} instructions"


def _attr_text(name, value) -> str:
    from ..ir.printer import format_attribute_value
    try:
        t = format_attribute_value(name, value)
    except Exception:          # noqa: BLE001 -- a drawing never fails on an odd attribute
        t = str(value)
    if len(t) > _ATTR_TEXT_MAX:
        t = t[:_ATTR_TEXT_MAX - 3] + "..."
    return t


def _source(module, inst, cache: dict) -> dict:
    md = inst.attrs.get("metadata")
    if md is None:
        return {}
    out = cache.get(md.text)
    if out is None:
        from ..pipeline.dumps import source_of
        out = cache[md.text] = source_of(module, inst)
    return out


def _constant_text(inst) -> str:
    from ..ir.literal import format_literal
    try:
        t = format_literal(inst.literal, 4)
    except Exception:          # noqa: BLE001
        t = "constant"
    return t if len(t) <= 40 else t[:37] + "..."


def _foldable(inst, comp) -> bool:
    """A scalar constant that is not a computation's root: drawn inside its users."""
    s = inst.shape
    return (inst.opcode == "constant" and s is not None and not s.is_tuple and s.rank == 0
            and inst.name != comp.root and inst.literal is not None)


# ----------------------------------------------------------------------------- building

def module_index(module) -> tuple[dict, dict]:
    """What build_graph reads from the whole module: the node ids (node_ids) and, for each fusion
    computation, the fusion instructions calling it.  A caller drawing many graphs of one module
    (one per applied computation) computes it once and passes it as `index`."""
    fused_by: dict[str, list] = {}    # fusion computation -> fusion instructions calling it
    for c, i in module.instructions():
        if i.opcode == "fusion":
            for n in _computation_refs(i.attrs.get("calls")):
                fused_by.setdefault(n, []).append((c.name, i.name))
    return node_ids(module), fused_by


def build_graph(module, *, computation: str | None = None, around: str | None = None, depth: int = 3,
                expand_fusions: bool = False, fold_constants: bool = True, index=None) -> Graph:
    """The graph of MODULE (see the module's docstring).  Raises GraphError (exit 2) for a
    computation or instruction the module does not have.  `index`: module_index(module), when the
    caller has it."""
    comps = module.computation_map
    ids, fused_by = index if index is not None else module_index(module)
    if depth < 0:
        raise GraphError(f"--depth must be 0 or more, got {depth}")
    top = module.entry if computation is None else computation
    if top not in comps:
        raise GraphError(f"the module has no computation named {computation!r}" + _close(computation, comps))
    expand: set[str] = set()          # fusion computations drawn although fusions are collapsed
    target = None
    if around is not None:
        target = _find_target(module, around, computation)
        top, expand = _place_target(module, target, top, expand_fusions)
    g = Graph(module=module.name, root_group=top, ids=ids,
              options={"computation": computation, "around": around, "depth": depth if around else None,
                       "expand_fusions": expand_fusions, "fold_constants": fold_constants})
    src_cache: dict = {}
    comp_top = comps[top]
    kind0 = "entry" if top == module.entry else ("fusion" if top in fused_by else "computation")
    g.groups[top] = Group(top, top, kind0, ("ENTRY " if kind0 == "entry" else "") + top,
                          size=len(comp_top.instructions))
    # breadth-first over the drawn computations, so a group's parent is its first caller's group
    queue = deque([top])
    pending_links = []                # (caller node id, caller inst, callee computation, kind, index, caller comp)
    while queue:
        cname = queue.popleft()
        comp = comps[cname]
        group = g.groups[cname]
        folded = {i.name: _constant_text(i) for i in comp.instructions
                  if fold_constants and _foldable(i, comp) and (cname, i.name) != target}
        for inst in comp.instructions:
            nid = ids[(cname, inst.name)]
            if inst.name in folded:
                continue
            node = _node(module, comp, inst, nid, cname, src_cache, comps)
            for k, op in enumerate(inst.operands):
                if op in folded:
                    node.inline_operands[k] = folded[op]
            g.nodes[nid] = node
            group.nodes.append(nid)
            for callee, kind, index in _structural_calls(inst):
                if callee not in comps:
                    continue
                if kind == "fusion" and not (expand_fusions or callee in expand):
                    _collapse(node, comps[callee], comps)
                    continue
                pending_links.append((nid, inst, callee, kind, index, cname))
                if callee not in g.groups:
                    label = {"while_body": f"{inst.name} body: {callee}",
                             "while_condition": f"{inst.name} condition: {callee}",
                             "branch": f"{inst.name} branch {index}: {callee}",
                             "fusion": f"{inst.name} fusion: {callee}",
                             "async": f"{inst.name} async: {callee}"}.get(kind, f"{inst.name} calls {callee}")
                    g.groups[callee] = Group(callee, callee, kind, label, parent=cname,
                                             size=len(comps[callee].instructions))
                    group.children.append(callee)
                    queue.append(callee)
                g.groups[callee].callers.append(nid)
            # operand edges
            for k, op in enumerate(inst.operands):
                if op in folded:
                    continue
                src = comp.by_name.get(op)
                if src is None:
                    continue
                tindex = inst.attrs.get("index") if inst.opcode == "get-tuple-element" else None
                g.edges.append(Edge(ids[(cname, op)], nid, _shape_text(inst.shape if tindex is not None
                                                                       else src.shape),
                                    "data", k, tindex))
            for pred in inst.attrs.get("control-predecessors") or ():
                if pred in comp.by_name:
                    g.edges.append(Edge(ids[(cname, pred)], nid, "", "control"))
        # undrawn folded constants: stand for nothing (their users show them)
    # collapsed fusions stand for what they fuse
    for nid, node in g.nodes.items():
        if node.collapsed and node.fused_computation:
            _represent(g, ids, comps, node.fused_computation, nid, set())
    # caller <-> callee links
    for nid, inst, callee, kind, index, cname in pending_links:
        ccomp = comps[callee]
        caller_comp = comps[cname]
        if kind in ("while_body", "while_condition"):
            operands = list(inst.operands[:1])
        elif kind == "branch":
            operands = list(inst.operands[1 + index:2 + index])
        else:
            operands = list(inst.operands)
        for p in ccomp.parameters:
            pn = p.parameter_number
            if pn is None or pn >= len(operands):
                continue
            pid = ids[(callee, p.name)]
            op = operands[pn]
            if pid in g.nodes and op in caller_comp.by_name and ids[(cname, op)] in g.nodes:
                g.edges.append(Edge(ids[(cname, op)], pid, _shape_text(p.shape), "param", pn, via=nid))
        rid = ids[(callee, ccomp.root)]
        if rid in g.nodes:
            g.edges.append(Edge(rid, nid, _shape_text(ccomp.root_instruction.shape), "result", via=nid))
    if target is not None:
        _keep_around(g, ids[target], depth)
    if len(g.nodes) > WARN_NODES:
        big = sorted(g.groups.values(), key=lambda gr: -len(gr.nodes))[:3]
        g.warnings.append(
            f"the graph has {len(g.nodes):,} nodes: a layout of that many takes long and is hard to read; "
            f"narrow it with --computation NAME (the largest drawn: "
            + ", ".join(f"{gr.id} with {len(gr.nodes):,}" for gr in big)
            + ") or --around INSTRUCTION --depth K"
            + ("" if not expand_fusions else ", or leave fusions collapsed (without --expand-fusions)"))
    return g


def _node(module, comp, inst, nid, cname, src_cache, comps) -> Node:
    node = Node(nid, inst.name, cname, cname, inst.opcode, _shape_text(inst.shape),
                is_root=(inst.name == comp.root), parameter_number=inst.parameter_number,
                location=f"{inst.loc.file}:{inst.loc.line}" if inst.loc.line else "")
    for a, v in inst.attrs.items():
        if a in _SKIP_ATTRS:
            continue
        node.attributes[a] = _attr_text(a, v)
    if inst.opcode == "constant" and inst.literal is not None:
        node.attributes.setdefault("value", _constant_text(inst))
    if inst.opcode == "parameter" and inst.parameter_number is not None:
        node.label_attributes.append(f"parameter {inst.parameter_number}")
    for a in _LABEL_ATTRS:
        if a in node.attributes and a != "kind" and node.attributes[a] not in ("{}", ""):
            t = node.attributes[a]
            node.label_attributes.append(f"{a}={t}" if len(t) <= 40 else f"{a}={t[:37]}...")
            if len(node.label_attributes) >= 2:
                break
    if inst.opcode == "fusion":
        node.fusion_kind = node.attributes.get("kind")
        refs = _computation_refs(inst.attrs.get("calls"))
        node.fused_computation = refs[0] if refs else None
    for a, n in _compact_calls(inst):
        node.applies.append(f"{a}: {n} = {_summary_of(comps.get(n))}")
    node.calls = [n for a, v in inst.attrs.items() for n in _computation_refs(v)]
    src = _source(module, inst, src_cache)
    node.op_name = src.get("op_name")
    node.source = src.get("source")
    node.stack = list(src.get("stack", ()))
    return node


def _collapse(node: Node, fused, comps):
    """A fusion drawn as one node: the size and opcodes of what it fuses (nested fusions counted in)."""
    node.collapsed = True
    ops: Counter = Counter()
    stack, seen = [fused], set()
    while stack:
        c = stack.pop()
        if c.name in seen:
            continue
        seen.add(c.name)
        for i in c.instructions:
            if i.opcode in ("parameter",):
                continue
            if i.opcode == "fusion":
                stack.extend(comps[n] for n in _computation_refs(i.attrs.get("calls")) if n in comps)
                continue
            ops[i.opcode] += 1
    node.fused_size = sum(ops.values())
    node.fused_opcodes = dict(ops.most_common())


def _represent(g: Graph, ids, comps, cname: str, nid: str, seen: set):
    if cname in seen or cname not in comps:
        return
    seen.add(cname)
    for i in comps[cname].instructions:
        g.represented_by.setdefault(ids[(cname, i.name)], nid)
        for n in _computation_refs(i.attrs.get("calls")) if i.opcode == "fusion" else ():
            _represent(g, ids, comps, n, nid, seen)


def _close(name, names) -> str:
    import difflib
    near = difflib.get_close_matches(str(name), list(names), n=3, cutoff=0.6)
    return f" (did you mean {', '.join(near)}?)" if near else ""


def _find_target(module, name: str, computation: str | None) -> tuple[str, str]:
    """The (computation, instruction) --around names: NAME, or COMPUTATION/NAME."""
    name = name.lstrip("%")
    hits = [(c.name, i.name) for c, i in module.instructions() if i.name == name]
    if not hits and "/" in name:
        cn, _, inn = name.rpartition("/")
        hits = [(c.name, i.name) for c, i in module.instructions() if c.name == cn and i.name == inn]
    if computation is not None and len(hits) > 1:
        hits = [h for h in hits if h[0] == computation] or hits
    if not hits:
        raise GraphError(f"--around {name}: the module has no instruction of that name"
                         + _close(name, {i.name for _, i in module.instructions()}))
    if len(hits) > 1:
        raise GraphError(f"--around {name}: {len(hits)} computations have an instruction of that name ("
                         + ", ".join(c for c, _ in hits[:5]) + "); name one as COMPUTATION/NAME")
    return hits[0]


def _place_target(module, target, top: str, expand_fusions: bool) -> tuple[str, set]:
    """The computation to draw from so that TARGET is drawn, and the fusions to open on the way."""
    comps = module.computation_map
    callers: dict[str, list] = {}
    for c, i in module.instructions():
        for n, kind, _ in _structural_calls(i):
            callers.setdefault(n, []).append((c.name, kind))
    expand: set[str] = set()
    # walk up from the target's computation until TOP (or a computation nobody draws it from)
    path, cur, seen = [], target[0], set()
    while cur != top and cur not in seen:
        seen.add(cur)
        up = callers.get(cur)
        if not up:
            break
        path.append((cur, up[0][1]))
        cur = up[0][0]
    if cur != top:
        # TOP does not reach the target (a reducer, or another computation): draw from its outermost caller
        top = cur if cur in comps else target[0]
    for c, kind in path:
        if kind == "fusion" and not expand_fusions:
            expand.add(c)
    return top, expand


def _keep_around(g: Graph, start: str, depth: int):
    """Keep the nodes within DEPTH edges of START (both directions), the groups holding them."""
    nbrs: dict[str, list] = {}
    for e in g.edges:
        nbrs.setdefault(e.source, []).append(e.target)
        nbrs.setdefault(e.target, []).append(e.source)
    if start not in g.nodes:
        start = g.represented_by.get(start, start)
    dist = {start: 0}
    q = deque([start])
    while q:
        n = q.popleft()
        if dist[n] >= depth:
            continue
        if n != start and len(nbrs.get(n, ())) > HUB_DEGREE:
            continue                  # a hub (a weight used everywhere): drawn, not walked through
        for m in nbrs.get(n, ()):
            if m not in dist:
                dist[m] = dist[n] + 1
                q.append(m)
    keep = set(dist)
    g.omitted_nodes = len(g.nodes) - len(keep)
    for e in g.edges:
        if e.source in keep and e.target not in keep and e.kind != "control":
            g.nodes[e.source].hidden_outputs += 1
        elif e.target in keep and e.source not in keep and e.kind != "control":
            g.nodes[e.target].hidden_inputs += 1
    g.edges = [e for e in g.edges if e.source in keep and e.target in keep]
    g.nodes = {k: v for k, v in g.nodes.items() if k in keep}
    g.represented_by = {k: v for k, v in g.represented_by.items() if v in keep}
    used = set()
    for n in g.nodes.values():
        used.update(g.group_path(n.group))
    for gid, grp in list(g.groups.items()):
        grp.nodes = [n for n in grp.nodes if n in keep]
        grp.children = [c for c in grp.children if c in used]
    g.groups = {k: v for k, v in g.groups.items() if k in used}
    if g.root_group not in g.groups and g.groups:
        g.root_group = next(iter(g.groups))
    g.options["focus"] = start
