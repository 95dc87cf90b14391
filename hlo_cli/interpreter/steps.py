"""A prepared computation's unit of work: the step.

compiler.py prepares each computation into a list of `Step`s; its step loop runs them (tier 1, with
profiling as a mode of that loop), and the one code generator (codegen.py) turns them into Python
code: a computation's function (tier 2), a fused region's block loop, a whole while loop.
"""
from __future__ import annotations

from typing import Any, NamedTuple

from ..ir.module import Instruction
from .kernels import REGION

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
