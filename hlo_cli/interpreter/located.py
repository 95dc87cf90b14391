"""Errors located at the instruction that raised them: what every runner of instructions (the
generic loop, the compiled steps, generated code, whole generated loops, the multi-device walk)
turns an exception into, so that a message names the instruction the same way whichever ran it."""
from __future__ import annotations

from ..errors import HloEvalError
from ..errors import instruction_diagnostic as _diag
from ..ir.module import Instruction
from .memory import resource_error
from .values import conforms, describe

# what NumPy and Python raise when an evaluation goes wrong (located at the instruction; anything
# else, such as KeyboardInterrupt, goes through as it is)
EVAL_ERRORS = (ValueError, TypeError, IndexError, KeyError, FloatingPointError, OverflowError,
               ZeroDivisionError, MemoryError, AttributeError)


def located_error(inst: Instruction, e: Exception):
    """The error to raise when evaluating `inst` raised the NumPy/Python error `e`: out of memory
    is an HloResourceError (exit code 4) saying how much was asked for, anything else an
    HloEvalError located at the instruction."""
    if isinstance(e, MemoryError):
        return resource_error(inst, e)
    return HloEvalError(f"{inst.name}: {inst.opcode} failed: {e}",
                        [_diag(inst, f"{inst.name}: {inst.opcode} failed: {type(e).__name__}: {e}", "R011")])


def reraise_at(e, inst):
    """Raise `e` located at instruction `inst`: an HloEvalError without a location gets one, a
    NumPy/Python error becomes a located HloEvalError (`inst` None: `e` as it is)."""
    if isinstance(e, HloEvalError):
        if not e.diagnostics and inst is not None:
            e.diagnostics = [_diag(inst, f"{inst.name}: {e}", "R010")]
        raise e
    if inst is None:
        raise e
    raise located_error(inst, e) from e


def run_located(inst: Instruction, fn, *args):
    """fn(*args), the evaluation of `inst`: an error it raises is located at the instruction (an
    HloEvalError without a location gets one; NumPy's errors become HloEvalErrors, memory
    exhaustion an HloResourceError)."""
    try:
        return fn(*args)
    except (HloEvalError,) + EVAL_ERRORS as e:
        reraise_at(e, inst)


def bad_result(inst: Instruction, value):
    """Raise the error of `inst` having produced `value`, which does not match its shape."""
    why = conforms(value, inst.shape) or "unexpected value"
    raise HloEvalError(
        f"{inst.name}: {inst.opcode} produced a value that does not match its shape "
        f"{inst.shape.to_str(False)}: {why}",
        [_diag(inst, f"{inst.name}: {inst.opcode} produced {describe(value)}, which does not "
                     f"match its shape {inst.shape.to_str(False)}: {why}", "R012")])


def limit_error(limit: int, name: str) -> HloEvalError:
    """A while loop (condition `name`) ran past the --max-iterations limit."""
    return HloEvalError(f"the while loop ran {limit} iterations without its condition "
                        f"'{name}' becoming false (the --max-iterations limit)")
