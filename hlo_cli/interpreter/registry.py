"""The evaluation-rule registry: one rule per opcode, registered by decorator.

A rule is called as ``rule(inst, args, ec)``:

- ``inst``: the Instruction (its ``shape`` is the declared result shape, ``attrs`` its decoded
  attributes, ``literal`` for constants);
- ``args``: the operand values, in order (ndarrays, tuples, TOKEN);
- ``ec``: the EvalContext (hlo_cli/interpreter/evaluator.py): ``ec.call(name, args)`` runs a called
  computation, ``ec.apply(name, arrays)`` runs a scalar computation (a reducer, comparator, map or
  scatter combiner) vectorized over whole arrays, ``ec.replica_id`` / ``ec.partition_id``,
  ``ec.rng`` (a numpy Generator seeded by --seed), ``ec.options``.

It returns the result value, exactly of the declared dtype and dims; the evaluator checks that in
one place.  Rules are pure NumPy and vectorized: no Python loop over elements.
"""
from __future__ import annotations

from typing import Callable

EVAL_RULES: dict[str, Callable] = {}


def evaluator(*opcodes: str):
    def deco(fn):
        for op in opcodes:
            if op in EVAL_RULES:
                raise RuntimeError(f"two evaluation rules for {op}")
            EVAL_RULES[op] = fn
        return fn
    return deco


def rule_for(opcode: str):
    fn = EVAL_RULES.get(opcode)
    if fn is None:
        from ..ir.opcodes import OPCODES
        for suffix, generic in (("-start", "async-start"), ("-update", "async-update"), ("-done", "async-done")):
            if opcode.endswith(suffix) and opcode[: -len(suffix)] in OPCODES:
                return EVAL_RULES.get(generic)
    return fn
