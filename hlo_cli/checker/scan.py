"""What several of the checker's walks need of each computation, gathered in one pass over the
module's instructions (a large module has tens of thousands, most of them holding no attribute but
their metadata): the instructions whose attributes are more than metadata, the opcodes, the called
computations and the parameters.

    scan = ModuleScan(module)
    scan.facts            # one Facts per computation, in module order: .rich, .preds, .marked, .opcodes, .params
    scan.rich(comp)       # the instructions of `comp` whose attributes are more than metadata, in order
    scan.preds(comp)      # the instructions of `comp` with control predecessors, in order
    scan.marked(comp)     # ... with a `sharding` or `frontend_attributes`, in order
    scan.calling          # the identities of the instructions that call computations
    scan.called           # the names of the computations any instruction calls
    scan.entry            # module.entry_computation (None when there is none: that raises KeyError)
    scan.opcodes(comp)    # the set of its opcodes
    scan.params(comp)     # comp.parameters
    scan.graph            # computation name -> the names of the computations it calls, in order, once each

An instruction whose attributes are none, or only `metadata={...}` (a Metadata: a text, holding no
shape, sharding or called computation), is left out of `rich`: every walk that looks at attributes
finds nothing in it (tests/test_checkwalks_scan.py compares the walks with and without this).
"""
from __future__ import annotations

from ..ir.attributes import BackendConfig, Enum, Metadata
from ..ir.module import Computation, Instruction, Module


def beyond_metadata(attrs) -> bool:
    """Whether an instruction's attributes are more than none or a `metadata={...}` alone."""
    return bool(attrs) and (len(attrs) != 1 or type(attrs.get("metadata")) is not Metadata)


# Types of attribute values that are neither a ComputationRef nor a tuple (nor of a subclass of
# either): a value of one of them names no called computation (Instruction.called_computations)
_PLAIN = frozenset((Metadata, BackendConfig, Enum, str, int, bool, float, type(None)))


class Facts:
    """What the walks need of one computation (ModuleScan.facts holds one per computation, in
    module order)."""

    __slots__ = ("rich", "preds", "marked", "opcodes", "params")

    def __init__(self, rich, preds, marked, opcodes, params):
        self.rich, self.preds, self.marked, self.opcodes, self.params = rich, preds, marked, opcodes, params


class ModuleScan:
    """The per-computation facts: `facts`, one Facts per computation of module.computations, in
    order; the accessors find a computation's by its identity (computations may share a name)."""

    __slots__ = ("facts", "_of", "graph", "calling", "called", "entry")

    def __init__(self, module: Module):
        self.facts: list[Facts] = []
        self._of: dict[int, Facts] = {}
        self.calling: set[int] = set()
        self.called: set[str] = set()
        self.entry: Computation | None = None
        graph: dict[str, list[str]] = {}
        meta, plain = Metadata, _PLAIN
        for comp in module.computations:
            if self.entry is None and comp.name == module.entry:
                self.entry = comp
            insts = comp.instructions
            rich = []
            for inst in insts:
                a = inst.attrs
                if a and (len(a) != 1 or type(a.get("metadata")) is not meta):
                    rich.append(inst)
            ops = {inst.opcode for inst in insts}
            callees: dict[str, None] = {}
            preds, marked = [], []
            for inst in rich:
                a = inst.attrs
                if "control-predecessors" in a and a["control-predecessors"]:
                    preds.append(inst)
                if "sharding" in a or "frontend_attributes" in a:
                    marked.append(inst)
                for v in a.values():
                    t = type(v)
                    if t in plain or (t is tuple and (not v or type(v[0]) in plain)):
                        continue    # (not a called computation, nor a tuple of them)
                    called = inst.called_computations
                    if called:
                        self.calling.add(id(inst))
                        for name in called:
                            callees.setdefault(name, None)
                    break
            facts = Facts(rich, preds, marked, ops, comp.parameters if "parameter" in ops else [])
            self.facts.append(facts)
            self._of[id(comp)] = facts
            graph[comp.name] = list(callees)
            self.called.update(callees)
        self.graph = graph

    def rich(self, comp: Computation) -> list[Instruction]:
        return self._of[id(comp)].rich

    def preds(self, comp: Computation) -> list[Instruction]:
        return self._of[id(comp)].preds

    def marked(self, comp: Computation) -> list[Instruction]:
        return self._of[id(comp)].marked

    def opcodes(self, comp: Computation) -> set[str]:
        return self._of[id(comp)].opcodes

    def params(self, comp: Computation) -> list[Instruction]:
        return self._of[id(comp)].params
