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


@dataclass(frozen=True)
class Grouped:
    """One value per device, held once per distinct value: device i's value is row `classes[i]` of
    `rows` (array leaves with a leading axis over the distinct values).  What a value replicated
    along some mesh axes is: an all-reduce's result is the same on every device of a group, a
    parameter split over "model" is the same on every "data" row."""
    rows: Any
    classes: tuple[int, ...]

    @property
    def value(self):
        """The full stack, one row per device (copied out of the distinct rows)."""
        idx = np.asarray(self.classes, dtype=np.intp)
        return map_leaves(lambda a: a[idx], self.rows)

    def at(self, i: int):
        c = self.classes[i]
        return map_leaves(lambda a: a[c, ...], self.rows)

    def stacked(self, n: int):
        return self.value


DeviceValue = Uniform | Stacked | Grouped


def _row_keys(v, n: int) -> list:
    """For each of the n rows of a stacked value, a key equal for rows holding the same bits."""
    ls = leaves(v)
    keys: list = [[] for _ in range(n)]
    for a in ls:
        a = np.ascontiguousarray(a)
        flat = a.reshape(n, -1).view(np.uint8) if a.dtype.itemsize else a.reshape(n, -1)
        for i in range(n):
            keys[i].append(flat[i].tobytes())
    return [tuple(k) for k in keys]


def first_seen(keys) -> tuple[list[int], list[int]]:
    """(classes, representatives): equal keys share a class, numbered in order of first
    appearance; representatives[c] is the position where class c first appears."""
    seen: dict = {}
    classes, reps = [], []
    for i, k in enumerate(keys):
        c = seen.get(k)
        if c is None:
            c = seen[k] = len(reps)
            reps.append(i)
        classes.append(c)
    return classes, reps


def grouped(v: Stacked, n: int):
    """`v` held once per distinct value: Uniform when every device holds the same bits, Grouped
    when some do, `v` itself when all differ (or when it holds no arrays)."""
    if n < 2 or not leaves(v.value):
        return v
    classes, reps = first_seen(_row_keys(v.value, n))
    if len(reps) == n:
        return v
    if len(reps) == 1:
        return Uniform(v.at(0))
    idx = np.asarray(reps, dtype=np.intp)
    return Grouped(map_leaves(lambda a: a[idx], v.value), tuple(classes))


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
    if isinstance(v, Grouped):
        return Grouped(v.rows, tuple(v.classes[i] for i in positions))
    idx = np.asarray(positions, dtype=np.intp)
    return Stacked(map_leaves(lambda a: a[idx], v.value))


def devices_text(devs) -> str:
    """Device ids compactly: 0-7, 0,2,4, 1-3,6."""
    devs = sorted(int(d) for d in devs)
    parts, k = [], 0
    while k < len(devs):
        j = k
        while j + 1 < len(devs) and devs[j + 1] == devs[j] + 1:
            j += 1
        parts.append(str(devs[k]) if j == k else f"{devs[k]}-{devs[j]}" if j > k + 1 else
                     f"{devs[k]},{devs[j]}")
        k = j + 1
    return ",".join(parts)


def who(devs) -> str:
    """'device 3' / 'devices 0-2,5'."""
    return ("device " if len(set(devs)) == 1 else "devices ") + devices_text(devs)
