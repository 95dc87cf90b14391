"""Values of a multi-device run.

A value every device holds identically is kept once (`Uniform`): constants, iotas, values computed
only from such values, the global values of a module before partitioning.  A value that differs
between devices is `Stacked`: its array leaves carry a leading axis over the devices of the run (or
of the subset of them running this computation), in the order of `devices`.  Tuples keep their
structure; a token stays a token.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np


def map_leaves(fn: Callable[[np.ndarray], Any], v):
    """`fn` applied to every array leaf of a value (tuples kept, tokens and None left alone)."""
    if isinstance(v, tuple):
        return tuple(map_leaves(fn, e) for e in v)
    if isinstance(v, np.ndarray):
        return fn(v)
    return v


def leaves(v) -> list:
    """The array leaves of a value, depth first."""
    if isinstance(v, tuple):
        out: list = []
        for e in v:
            out.extend(leaves(e))
        return out
    return [v] if isinstance(v, np.ndarray) else []


@dataclass(frozen=True)
class Uniform:
    """The same value on every device (held once)."""
    value: Any

    def at(self, i: int):
        return self.value

    def stacked(self, n: int):
        """The value repeated for `n` devices (read-only broadcast views, no copies)."""
        return map_leaves(lambda a: np.broadcast_to(a, (n,) + a.shape), self.value)


@dataclass(frozen=True)
class Stacked:
    """One value per device: array leaves have a leading axis over the devices, in order."""
    value: Any

    def at(self, i: int):
        return map_leaves(lambda a: a[i, ...], self.value)

    def stacked(self, n: int):
        return self.value


DeviceValue = Uniform | Stacked


def stack(per_device: Sequence) -> Stacked:
    """Per-device values (same structure) as one Stacked value."""
    first = per_device[0]
    if isinstance(first, tuple):
        return Stacked(tuple(stack([v[k] for v in per_device]).value for k in range(len(first))))
    if isinstance(first, np.ndarray):
        return Stacked(np.stack(per_device))
    return Stacked(first)                      # tokens


def take(v: DeviceValue, positions: Sequence[int]) -> DeviceValue:
    """The value restricted to some devices (positions in the stack)."""
    if isinstance(v, Uniform):
        return v
    idx = np.asarray(positions, dtype=np.intp)
    return Stacked(map_leaves(lambda a: a[idx], v.value))
