"""The evaluator's order of a computation: which instructions a run executes, and in what order.

One algorithm, asked by everything that needs the evaluator's order (the evaluator and its compiled
path, the memory estimate, loop-invariant hoisting, SPMD, called key functions, diff's matching):

- **What runs** (`run_order`): every parameter (bound even when nothing reads it, so a call always
  takes its full argument list), the root, and the instructions kept although nothing uses their
  value (`kept_unused`), with everything they depend on.
- **Depends on** (`dependencies`): an instruction's operands, then its control predecessors.
- **In what order** (`post_order`): depth first from each start in turn (parameters in text order,
  then the root, then the kept instructions in text order), every instruction after what it depends
  on, dependencies visited in the order listed.  Recursive DFS post-order, written with a stack.
- `program_order`: the same instructions, each as early as the text has it (what a send must keep
  relative to the recv that takes its data, on several devices).
- `Plan`: what the evaluator builds once per computation from `run_order`: the rules, operand slots,
  the slots whose last use each step is (values are freed after their last use), the expected
  result of each step.

Which instructions are kept unused: those XLA keeps, the instructions with a side effect
(`hlo_cli.ir.opcodes.has_side_effect`, XLA's HasSideEffectNoRecurse): host and peer transfers, rng
and rng-get-and-update-state, the asynchronous collectives and collective-broadcast, collectives
with constrain_layout=true, custom calls declared side-effecting.  (Before this module the evaluator
kept only the transfers, rng-get-and-update-state and such custom calls: an unused rng now draws
from the run's generator, as XLA's consumes its state, and an unused collective exchanges.)

A layer below the evaluator and the code generators: this module imports only the IR, the errors
and the interpreter's base modules (registry, values).
"""
from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from ..errors import HloEvalError
from ..errors import instruction_diagnostic as _diag
from ..ir.module import Computation, Instruction
from ..ir.opcodes import OPCODES, has_side_effect
from .registry import rule_for


def kept_unused(inst: Instruction) -> bool:
    """Whether a run executes `inst` even when nothing uses its value: XLA's side effects
    (`hlo_cli.ir.opcodes.has_side_effect`, HasSideEffectNoRecurse), which XLA's dead-code
    elimination keeps."""
    return has_side_effect(inst)


class _Probe:
    """An instruction of `opcode` with every attribute that can make one side-effecting."""
    attrs = {"custom_call_has_side_effect": True, "constrain_layout": True}

    def __init__(self, opcode: str):
        self.opcode = opcode


# the opcodes some instruction of which is kept unused (the others never are: a cheap first test)
_MAYBE_KEPT = frozenset(op for op in OPCODES if kept_unused(_Probe(op)))


def dependencies(inst: Instruction) -> list[str]:
    """The names `inst` waits for: its operands, then its control predecessors."""
    return list(inst.operands) + list(inst.attrs.get("control-predecessors", ()) or ())


def post_order(insts: Sequence[Instruction], index: Mapping[str, int], starts: Iterable[int],
               seen: set | None = None, order: list | None = None, strict: bool = True) -> list[int]:
    """Positions (in `insts`) in post-order from each of `starts` in turn: every instruction after
    its dependencies (operands, then control predecessors).  `index` maps a name to its position;
    `seen` and `order` continue an earlier walk.  A dependency `index` does not know raises
    KeyError when `strict`, else is skipped."""
    seen = set() if seen is None else seen
    order = [] if order is None else order
    position = index.__getitem__ if strict else index.get
    for start in starts:
        if start in seen:
            continue
        stack = [(start, False)]
        while stack:
            k, expanded = stack.pop()
            if expanded:
                order.append(k)
                continue
            if k in seen:
                continue
            seen.add(k)
            stack.append((k, True))
            inst = insts[k]
            # pushed in reverse, so visited as `dependencies` lists them (written out: the hot loop)
            control = inst.attrs.get("control-predecessors")
            for group in ((control, inst.operands) if control else (inst.operands,)):
                for d in reversed(group):
                    j = position(d)
                    if j is not None and j not in seen:
                        stack.append((j, False))
    return order


def run_order(comp: Computation, strict: bool = True) -> list[int]:
    """Positions of the instructions a run of `comp` executes, in the order it executes them (see
    the module docstring).  An undefined name raises KeyError when `strict`, else is skipped."""
    insts = comp.instructions
    index: dict[str, int] = {}
    params: list[int] = []
    kept: list[int] = []
    for k, inst in enumerate(insts):
        index[inst.name] = k
        op = inst.opcode
        if op == "parameter":
            params.append(k)
        elif op in _MAYBE_KEPT and kept_unused(inst):
            kept.append(k)
    if comp.root in index:
        params.append(index[comp.root])
    return post_order(insts, index, params + kept, strict=strict)


def program_order(comp: Computation, needed: Iterable[int]) -> list[int]:
    """The instructions at positions `needed`, each as early as the text has it."""
    insts = comp.instructions
    index = {i.name: k for k, i in enumerate(insts)}
    return post_order(insts, index, sorted(needed))


def text_order(comp: Computation) -> list[Instruction]:
    """Every instruction of `comp`, each after its dependencies, text order otherwise (undefined
    names skipped): the order for passes over the whole text, dead code included."""
    insts = comp.instructions
    index = {i.name: k for k, i in enumerate(insts)}
    return [insts[k] for k in post_order(insts, index, range(len(insts)), strict=False)]


def reachable(roots: Iterable[str], by_name: Mapping[str, Instruction]) -> set[str]:
    """Names reachable from `roots` through dependencies (names `by_name` does not know skipped)."""
    seen: set[str] = set()
    stack = list(roots)
    while stack:
        n = stack.pop()
        if n in seen or n not in by_name:
            continue
        seen.add(n)
        stack.extend(dependencies(by_name[n]))
    return seen


def expected(shape):
    """(NumPy dtype, dims) a static array result must have, or None (tuples, tokens, dynamic
    shapes: the full check)."""
    if shape.is_tuple or shape.is_dynamic or shape.element_type in ("token", "opaque", "buffer"):
        return None
    from .values import np_dtype
    return np_dtype(shape), tuple(shape.dims)


class Plan:
    """What a run of one computation needs, built once: `insts` in run order with their `rules`,
    `operand_idx` (the slots of each step's operands), `free_after` (the slots whose last use each
    step is: a value never used is dropped right after its step), `users`, `param_slots`
    ((parameter number, slot)), `root` (its slot) and `expect` (see `expected`)."""
    __slots__ = ("comp", "insts", "rules", "operand_idx", "free_after", "param_slots", "root", "expect",
                 "users")

    def __init__(self, comp: Computation, in_program_order: bool = False):
        self.comp = comp
        order = run_order(comp)
        if in_program_order:
            order = program_order(comp, order)
        self.insts = [comp.instructions[k] for k in order]
        pos = {comp.instructions[k].name: n for n, k in enumerate(order)}
        self.rules = [_rule(inst) for inst in self.insts]
        self.operand_idx = [tuple(pos[o] for o in inst.operands) for inst in self.insts]
        self.users: dict[int, list[int]] = {}
        for n, ops in enumerate(self.operand_idx):
            for o in ops:
                self.users.setdefault(o, []).append(n)
        self.root = pos[comp.root]
        self.free_after = free_after(self.operand_idx, self.root)
        self.param_slots = [(inst.parameter_number, n) for n, inst in enumerate(self.insts)
                            if inst.opcode == "parameter"]
        self.expect = [expected(inst.shape) for inst in self.insts]

    def bind(self, args) -> list:
        """The value slots of one run of the computation: its parameters bound to `args`."""
        if len(args) != len(self.param_slots):
            raise HloEvalError(f"computation '{self.comp.name}' takes {len(self.param_slots)} arguments, "
                               f"got {len(args)}")
        vals: list = [None] * len(self.insts)
        for pnum, slot in self.param_slots:
            vals[slot] = args[pnum]
        return vals


def free_after(operand_idx: Sequence[Sequence[int]], root: int) -> list[tuple[int, ...]]:
    """For each step, the slots whose last use it is (the root's slot never; a value no step uses
    is dropped right after its own step)."""
    last_use: dict[int, int] = {}
    for n, ops in enumerate(operand_idx):
        for o in ops:
            last_use[o] = n
    free: list[list[int]] = [[] for _ in operand_idx]
    for o, n in last_use.items():
        if o != root:
            free[n].append(o)
    for n in range(len(operand_idx)):
        if n not in last_use and n != root:
            free[n].append(n)
    return [tuple(f) for f in free]


def _rule(inst: Instruction):
    fn = rule_for(inst.opcode)
    if fn is None:
        raise HloEvalError(f"{inst.opcode} cannot be evaluated yet",
                           [_diag(inst, f"{inst.name}: {inst.opcode} cannot be evaluated", "R001")])
    return fn
