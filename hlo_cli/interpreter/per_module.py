"""What the interpreter keeps per module: compiled computations, recognized reducers, the numerics
chosen, hoisted copies...; each entry lives as long as its module (a weak reference ends it)."""
from __future__ import annotations

import weakref

from ..ir.module import Module

# id(module) -> {key: value}; entries leave with their module
_CACHE: dict[int, dict] = {}


def module_cache(module: Module) -> dict:
    """A dictionary that lives as long as `module`: compiled computations, recognized reducers."""
    per = _CACHE.get(id(module))
    if per is None:
        per = _CACHE[id(module)] = {}
        weakref.finalize(module, _CACHE.pop, id(module), None)
    return per


def cached(module: Module, key: str, make):
    """module_cache(module)[key], made by `make()` the first time."""
    per = module_cache(module)
    got = per.get(key)
    if got is None:
        got = per[key] = make()
    return got
