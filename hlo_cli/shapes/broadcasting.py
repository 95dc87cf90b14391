"""XLA's client-level broadcasting rules (the broadcasting-semantics document in shared/spec).

HLO itself has no implicit broadcasting: every elementwise operand must have the result's dims.
XlaBuilder's binary ops do broadcast, in two ways that compose:

1. Rank promotion ("InDim" broadcasting): the lower-rank operand's dimension k is matched with
   dimension ``broadcast_dimensions[k]`` of the higher-rank one; the tuple must be strictly increasing
   and each matched size must agree (or be 1, see 2).  A scalar broadcasts without a tuple.
2. Degenerate dimensions: two arrays of equal rank are compatible when every dimension is equal or
   one of the two sizes is 1; the result takes the larger size.

`broadcast_shape` applies them; `explain_broadcast` says what explicit HLO (`reshape` to drop size-1
dimensions, then `broadcast` with `dimensions={...}`) would make two operands agree.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


class BroadcastError(ValueError):
    pass


def _dims(s) -> tuple[int, ...]:
    return tuple(getattr(s, "dims", s))


def promote(low: Sequence[int], high_rank: int, broadcast_dimensions: Sequence[int] | None) -> tuple[int, ...]:
    """The lower-rank dims placed in a rank `high_rank` shape with size 1 in the unmatched dimensions."""
    low = _dims(low)
    if len(low) == high_rank:
        if broadcast_dimensions not in (None, ()) and tuple(broadcast_dimensions) != tuple(range(high_rank)):
            raise BroadcastError("broadcast_dimensions only applies to operands of different ranks")
        return low
    if len(low) > high_rank:
        raise BroadcastError("the operand to promote has the higher rank")
    if not broadcast_dimensions:
        if len(low) == 0:
            return (1,) * high_rank
        raise BroadcastError(f"operands of rank {len(low)} and {high_rank} need broadcast_dimensions")
    bd = tuple(broadcast_dimensions)
    if len(bd) != len(low):
        raise BroadcastError(f"broadcast_dimensions {list(bd)} must name one dimension for each of the "
                             f"{len(low)} dimensions of the lower-rank operand")
    if any(b < 0 or b >= high_rank for b in bd):
        raise BroadcastError(f"broadcast_dimensions {list(bd)} must be dimensions of a rank-{high_rank} shape")
    if any(a >= b for a, b in zip(bd, bd[1:])):
        raise BroadcastError(f"broadcast_dimensions {list(bd)} must be strictly increasing")
    out = [1] * high_rank
    for k, b in enumerate(bd):
        out[b] = low[k]
    return tuple(out)


def broadcast_shape(lhs, rhs, broadcast_dimensions: Sequence[int] | None = None) -> tuple[int, ...]:
    """The result dims of an elementwise binary op under XLA's client broadcasting rules."""
    a, b = _dims(lhs), _dims(rhs)
    if len(a) < len(b):
        a = promote(a, len(b), broadcast_dimensions)
    elif len(b) < len(a):
        b = promote(b, len(a), broadcast_dimensions)
    elif broadcast_dimensions not in (None, ()) and tuple(broadcast_dimensions) != tuple(range(len(a))):
        raise BroadcastError("broadcast_dimensions only applies to operands of different ranks")
    out = []
    for k, (x, y) in enumerate(zip(a, b)):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            raise BroadcastError(f"dimension {k} has sizes {x} and {y}, which are neither equal nor 1")
    return tuple(out)


@dataclass(frozen=True)
class ExplicitBroadcast:
    """How to turn an operand of `dims` into `result` in HLO: drop size-1 dims with a reshape
    (to `reshaped`, if needed), then broadcast with `dimensions`."""
    dims: tuple[int, ...]
    result: tuple[int, ...]
    reshaped: tuple[int, ...] | None
    dimensions: tuple[int, ...]

    def hlo(self, element_type: str, name: str = "x") -> str:
        res = f"{element_type}[{','.join(map(str, self.result))}]"
        src = name
        text = ""
        if self.reshaped is not None:
            text = f"{element_type}[{','.join(map(str, self.reshaped))}] reshape({name}); then "
            src = "<reshaped>"
        return text + f"{res} broadcast({src}), dimensions={{{','.join(map(str, self.dimensions))}}}"


def explicit_broadcast(dims, result, broadcast_dimensions: Sequence[int] | None = None) -> ExplicitBroadcast:
    """The reshape+broadcast that makes an operand of `dims` into `result` (rank promotion through
    `broadcast_dimensions` when the ranks differ, degenerate size-1 dims otherwise)."""
    dims, result = _dims(dims), _dims(result)
    if len(dims) > len(result):
        raise BroadcastError(f"an operand of rank {len(dims)} cannot become rank {len(result)}")
    placed = promote(dims, len(result), broadcast_dimensions) if len(dims) < len(result) else dims
    # where each operand dim lands in the result
    if len(dims) < len(result):
        positions = list(broadcast_dimensions or ())
    else:
        positions = list(range(len(dims)))
    keep = [k for k, d in enumerate(dims) if not (d == 1 and result[positions[k]] != 1)]
    for k in keep:
        if dims[k] != result[positions[k]]:
            raise BroadcastError(f"dimension {k} of size {dims[k]} cannot become {result[positions[k]]}")
    del placed
    reshaped = tuple(dims[k] for k in keep) if len(keep) != len(dims) else None
    return ExplicitBroadcast(dims, result, reshaped, tuple(positions[k] for k in keep))


def suggest(operand_dims: Sequence[Sequence[int]], result=None) -> list[ExplicitBroadcast | None] | None:
    """For elementwise operands whose dims differ: the explicit broadcasts that would make them agree
    (None for an operand already of the result's dims), or None if they do not broadcast."""
    ds = [_dims(d) for d in operand_dims]
    try:
        target = ds[0]
        for d in ds[1:]:
            if len(d) == len(target):
                target = broadcast_shape(target, d)
            elif len(d) < len(target):
                target = broadcast_shape(target, d, _trailing(len(d), len(target)))
            else:
                target = broadcast_shape(d, target, _trailing(len(target), len(d)))
        if result is not None and tuple(target) != _dims(result):
            # the declared result decides; check that each operand broadcasts to it
            target = _dims(result)
        plans = []
        for d in ds:
            if d == tuple(target):
                plans.append(None)
            else:
                bd = _trailing(len(d), len(target)) if len(d) < len(target) else None
                plans.append(explicit_broadcast(d, target, bd))
        return plans
    except BroadcastError:
        return None


def _trailing(low: int, high: int) -> tuple[int, ...]:
    """NumPy's convention (align trailing dimensions), used when no broadcast_dimensions are known."""
    return tuple(range(high - low, high))
