"""A prepared computation's unit of work, the step, and the Python code one step becomes.

compiler.py prepares each computation into a list of `Step`s; its step loop runs them (tier 1, with
profiling as a mode of that loop), its code generator turns them into a function (tier 2), and
loopgen.py turns the steps of a while loop's condition and body into one function.  What a step's
computation and result check look like as generated code is written here once (`call_text`,
`check_text`), for both generators.
"""
from __future__ import annotations

from typing import Any, NamedTuple

from ..ir.module import Instruction
from .kernels import PURE, REGION, RULE, WITH_EC, capabilities

# the step loop's kind for a run of f32/f64 arithmetic steps under one flag setting (Compiled.lean)
GROUP = 100

class Step(NamedTuple):
    """One instruction (or fused group of instructions) of a prepared computation.

    The step loop reads a step by unpacking it in this order (``kind, payload, operands, slot,
    inst, expect, frees = step``); everything else reads the fields by name."""
    kind: int               # FOLDED, PURE, WITH_EC, RULE, ELEMENT, TUPLE, SAME, REGION (kernels.py) or GROUP
    payload: Any            # FOLDED: the value; PURE: fn(*operands); WITH_EC: fn(ec, *operands);
    #                         RULE: the evaluation rule; ELEMENT: the tuple index; REGION: a Region
    operands: tuple         # the value slots read
    slot: Any               # the value slot written (REGION: the slots of the values it produces)
    inst: Instruction       # the instruction (REGION: its last member)
    expect: Any             # the result check: None, (dtype, dims) of an array, or a Shape (conforms)
    frees: tuple            # the slots whose last use this step is

    @property
    def produced(self) -> tuple:
        """The slots this step writes."""
        return self.slot if self.kind == REGION else (self.slot,)


def call_text(kind: int, payload, inst, args: str, ns: dict, tag: str) -> str | None:
    """Python source computing a step of `kind` from the operand expressions `args` (joined by
    commas), in a function with `ec` in scope; the objects it names go into `ns` under names ending
    in `tag`.  None for the kinds that are not calls (the generators write those themselves)."""
    if kind == PURE:
        ns[f"F{tag}"] = payload
        return f"F{tag}({args})"
    if kind == WITH_EC:
        ns[f"F{tag}"] = payload
        return f"F{tag}(ec, {args})"
    if kind == RULE:
        ns[f"R{tag}"], ns[f"I{tag}"] = payload, inst
        return f"R{tag}(I{tag}, [{args}], ec)"
    return None


def bare_ufunc_text(payload, inst, args: str, ns: dict, tag: str) -> str | None:
    """Python source computing a PURE step of f32/f64 arithmetic with its bare ufunc (`hw_ufunc`:
    no flushing, no NaN-sign fix-up; the caller has set the processor's flags and checks for NaN),
    an array even for a scalar result; None when the step has no bare ufunc."""
    u = capabilities(payload).hw_ufunc
    if u is None:
        return None
    ns[f"U{tag}"] = u
    text = f"U{tag}({args})"
    return f"_asarray({text})" if inst.shape.rank == 0 else text


def check_text(var: str, expect, inst, ns: dict, tag: str) -> str:
    """The line checking value `var` against `expect` (a Step's) and raising the instruction's error
    (``_bad`` in the namespace) when it does not match; the objects it names go into `ns`."""
    ns[f"I{tag}"] = inst
    if expect.__class__ is tuple:
        ns[f"D{tag}"], ns[f"S{tag}"] = expect
        cond = f"{var}.__class__ is not ndarray or {var}.dtype != D{tag} or {var}.shape != S{tag}"
    else:
        ns[f"H{tag}"] = expect
        cond = f"_conforms({var}, H{tag}) is not None"
    return f"if {cond}: _bad(I{tag}, {var})"
