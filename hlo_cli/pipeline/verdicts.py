"""What `hlo run` decides about a module before running it, from its text alone, kept in the on-disk
cache beside the module: the checker's errors, whether the module calls any custom call, whether a
constant was elided, the numerics report and the memory estimate.

A repeat of a run of the same text (same file name, same device options, same hlo sources: the
derived-results key of sources/cache.py) reads them back instead of walking the module again.  Each
answer is one field of one entry, computed on first need and stored when the run's preparation ends
(also when it ends in an error: a check that failed is a verdict too), so an option that only some
runs give (--no-check, --numerics, the devices' count) adds its own field instead of recomputing the
others.  `use_cache=False` (--no-cache) and HLO_CACHE_DIR=off neither read nor write; a corrupt entry
is a miss (sources/cache.py deletes it).  Only what a module's text decides is kept: whether hlo can
run its custom calls depends on the handlers registered in this process, so only "no custom call at
all" is remembered, and the memory limit is compared afresh on every run.
"""
from __future__ import annotations

import json

_FORMAT = 1                    # of the fields below; part of the entry's key


class RunVerdicts:
    """The cached answers of one module's text for runs with one set of device options."""

    def __init__(self, text: str, name: str, replicas, partitions, use_cache: bool = True):
        self.text, self.name = text, name
        self.what = json.dumps(["run-verdicts", _FORMAT, replicas, partitions])
        self.use_cache = use_cache
        self.fields: dict = {}
        self.dirty = False
        if use_cache:
            from ..sources.cache import load_derived
            hit = load_derived(text, name, self.what)
            if isinstance(hit, dict):
                self.fields = hit

    def get(self, field: str, compute, valid=lambda v: True):
        """FIELD's cached value when it is there and VALID; else compute(), remembered."""
        if field in self.fields:
            value = self.fields[field]
            if valid(value):
                return value
        value = compute()
        self.fields[field] = value
        self.dirty = True
        return value

    def save(self) -> None:
        """Store what was computed (never raises; nothing when the cache is off)."""
        if self.use_cache and self.dirty:
            from ..sources.cache import store_derived
            store_derived(self.text, self.name, self.what, self.fields)
            self.dirty = False


def is_bool(value) -> bool:
    return isinstance(value, bool)


def is_dict(value) -> bool:
    return isinstance(value, dict)


def is_counts(value, length: int, least: int = 0) -> bool:
    """VALUE is a list of LENGTH ints, each at least LEAST."""
    return isinstance(value, list) and len(value) == length and all(type(n) is int and n >= least for n in value)


__all__ = ["RunVerdicts", "is_bool", "is_counts", "is_dict"]
