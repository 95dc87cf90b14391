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

A rule may have a *prepare* stage, registered next to it in its ops/ module with ``@prepares(op)``:
``prepare(inst, ops, st)`` is called once per instruction when a computation is compiled
(compiler.py), with the instruction, the indices of its operand steps and ``st``, what compile time
knows (kernels.Static: folded values, clean values, the instructions, the module); it returns a
kernel (kernels.Fast: a specialised callable computing exactly what the rule computes, the cases
the rule must decide handed back to it) or None, and then the rule runs.  A kernel that needs the
run (``kind=WITH_EC``) receives the EvalContext as its first argument.

This module is the one index: ``rule_for(op)`` and ``prepare(inst, ops, st)``.

The rules live in hlo_cli/interpreter/ops/, which is imported (the package's __init__ hands the
import over with ``defer_rules``) on the first lookup (``rule_for``,
``prepare``, or any read of ``EVAL_RULES`` / ``PREPARERS``), not when the package is imported: a
command that never evaluates (a dry run, ``hlo info``) does not load them.  Every rule is present at
the first lookup.
"""
from __future__ import annotations

from typing import Callable

from ..ir.opcodes import async_generic, registrar

_loaded = False
_loader: Callable[[], object] | None = None


def defer_rules(load: Callable[[], object]) -> None:
    """Name what registers the rules (the package's import of ops/, which this bottom layer may not
    import itself): `load()` is called once, on the first lookup."""
    global _loader
    _loader = load


def _load_rules() -> None:
    """Register every rule and prepare stage (the deferred import of ops/) once, on the first lookup."""
    global _loaded
    if not _loaded and _loader is not None:
        _loaded = True
        try:
            _loader()
        except BaseException:
            _loaded = False
            raise


class _Rules(dict):
    """A table of rules that loads them (ops/) before it is first read; writes (the decorators) do
    not load.  Its reading methods are dict's, each after `_load_rules()`."""
    __slots__ = ()
    __hash__ = None

    def __reduce__(self):
        _load_rules()
        return dict, (dict(self),)


def _loading(read):
    def method(self, *args):
        _load_rules()
        return read(self, *args)
    method.__name__ = read.__name__
    return method


for _name in ("__getitem__", "get", "__contains__", "__iter__", "__len__", "__bool__", "__eq__", "__ne__",
              "__repr__", "keys", "values", "items", "copy", "__or__", "__reversed__"):
    setattr(_Rules, _name, _loading(getattr(dict, _name, None) or (lambda self: dict.__len__(self) > 0)))


EVAL_RULES: dict[str, Callable] = _Rules()
PREPARERS: dict[str, Callable] = _Rules()


_register_rule = registrar(EVAL_RULES, "evaluation rules")
_register_prepare = registrar(PREPARERS, "prepare stages")


def evaluator(*opcodes: str):
    """Register the decorated function as the evaluation rule of `opcodes`."""
    return _register_rule(*opcodes)


def prepares(*opcodes: str):
    """Register the decorated function as the prepare stage of `opcodes` (see the module's docstring)."""
    return _register_prepare(*opcodes)


def rule_for(opcode: str):
    """The evaluation rule of `opcode` (the async wrappers' for `<op>-start/-update/-done` sugar)."""
    if not _loaded:
        _load_rules()
    fn = dict.get(EVAL_RULES, opcode)
    if fn is None:
        generic = async_generic(opcode)
        if generic is not None:
            return dict.get(EVAL_RULES, generic)
    return fn


def prepare(inst, ops, st):
    """The kernel of `inst`'s prepare stage (operand steps `ops`, compile-time facts `st`), or None
    when its opcode has none, or it declines, or the instruction has unusual attributes (the rule
    then runs, and reports them at run time)."""
    if not _loaded:
        _load_rules()
    p = dict.get(PREPARERS, inst.opcode)
    if p is None:
        return None
    try:
        return p(inst, ops, st)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError):
        return None
