"""Shardings: which piece of a global array each device holds, and back.

An `HloSharding` (`sharding={devices=[2,1,4]<=[8] last_tile_dim_replicate}`) or a Shardy sharding
(`#sdy.sharding<@mesh, [{"x"}, {}]>` with meshes from the module's `xla.sdy.meshes` frontend
attribute, or XLA's named form `{mesh['x'=2], [{'x'}]}`) says how an array is cut into tiles and
which device holds which tile.  Shardy and named shardings are turned into the classic form (a
`Sharding` of the IR with an explicit tile assignment), so everything below works on one form.

XLA's facts used here (xla/hlo/ir/hlo_sharding.cc TileOffsetForDevice / TileLimitForDevice): a
dimension of size n cut into t tiles has tiles of ceil(n / t) elements; tile i covers
[min(i * ceil, n), min((i + 1) * ceil, n)), so trailing tiles may be short or empty.  A device's
buffer always has the full tile size: the part past the end of the array is padding, zeros here
(XLA pads with zeros at `SPMDFullToShardShape`; elsewhere the padding's content is unspecified).

Device ids: a sharding names partitions; in a run of R replicas x P partitions device d is
partition d % P of replica d // P (XLA's flattened ids).  Stacked values have a leading axis over
the devices of the run, in the order of a `devices` tuple (all devices by default).

Manual regions: `SPMDFullToShardShape` / `xla.sdy.GlobalToLocalShape` cut each device's value
(`split`) by a sharding, `SPMDShardToFullShape` / `xla.sdy.LocalToGlobalShape` reassemble it
(`merge`); `manual_split` / `manual_merge` give the sharding to use for such an instruction.  A
merge gathers the tiles among the devices that share the device's coordinates along every
non-tiled part of the sharding (its replicated and manual subgroups, and its replica), so nested
manual regions keep apart the values of devices that differ along axes already manual.
"""
from __future__ import annotations

import math
import re
from operator import attrgetter
from dataclasses import dataclass
from typing import Sequence

from ..errors import HloEvalError, instruction_diagnostic
from ..ir.attributes import FrontendAttributes, IotaReplicaGroups, Sharding, TileAssignment
from ..lazy import LazyModule

np = LazyModule("numpy")         # (imported when a sharding is first laid out: checking a module needs no NumPy)

__all__ = [
    "ShardingError", "Mesh", "AxisRef", "Layout",
    "parameter_sharding", "instruction_sharding", "sdy_sharding", "sdy_meshes", "named_sharding",
    "manual_axes", "module_devices", "local_dims", "leaf_shardings", "layout",
    "shard", "unshard", "split", "merge", "manual_split", "manual_merge",
]


class ShardingError(HloEvalError):
    """A sharding that cannot be read or applied (bad text, unknown mesh or axis, device count)."""


def _err(message: str, inst=None) -> ShardingError:
    if inst is not None:
        return ShardingError(f"{inst.name}: {message}", [instruction_diagnostic(inst, message, "R023")])
    return ShardingError(message)


# ---------------------------------------------------------------------------------------------
# Shardy / named-sharding text
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Mesh:
    """A Shardy mesh: named axes (major to minor) and the device at each mesh position."""
    axes: tuple[tuple[str, int], ...]
    device_ids: tuple[int, ...] | None = None       # None: iota over the mesh

    @property
    def size(self) -> int:
        return math.prod(s for _, s in self.axes)

    @property
    def maximal(self) -> int | None:
        """The device of a maximal-sharding mesh (`<[], device_ids=[3]>`), else None."""
        if not self.axes and self.device_ids is not None and len(self.device_ids) == 1:
            return self.device_ids[0]
        return None

    def devices(self) -> tuple[int, ...]:
        return self.device_ids if self.device_ids is not None else tuple(range(self.size))


@dataclass(frozen=True)
class AxisRef:
    """A mesh axis, or a sub-axis `"x":(pre)size` (the axis reshaped major to minor into
    [pre, size, rest])."""
    name: str
    pre: int = 1
    size: int | None = None             # None: the full axis


_TOKEN = re.compile(r"""\s*(?:
    (?P<str>"[^"\\]*+(?:\\.[^"\\]*+)*+"|'[^'\\]*+(?:\\.[^'\\]*+)*+')
  | (?P<int>-?\d+)
  | (?P<word>[#A-Za-z_][\w.$#-]*)
  | (?P<punct>[<>\[\]{}(),=:?@])
  | (?P<other>\S)
)""", re.X)


class _Text:
    """A tiny tokenizer + recursive-descent reader for Shardy attributes and named shardings."""

    def __init__(self, text: str):
        self.text = text
        text = text.replace("\\22", '"')             # MLIR's escape of a quote in attribute text
        self.toks: list[tuple[str, str, int]] = []
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            m = _TOKEN.match(text, pos)
            kind = m.lastgroup
            val = m.group(kind)
            if kind == "str":
                val = re.sub(r"\\(.)", r"\1", val[1:-1])
            self.toks.append((kind, val, m.start(kind)))
            pos = m.end()
        self.i = 0

    def peek(self, k: int = 0):
        j = self.i + k
        return self.toks[j] if j < len(self.toks) else ("end", "", len(self.text))

    def at(self, val: str, k: int = 0) -> bool:
        kind, v, _ = self.peek(k)
        return kind in ("punct", "word") and v == val

    def fail(self, what: str):
        kind, v, pos = self.peek()
        got = "the end" if kind == "end" else f"'{v}'"
        raise ShardingError(f"cannot read sharding text '{self.text}': expected {what} at offset "
                            f"{pos}, got {got}")

    def take(self, val: str):
        if not self.at(val):
            self.fail(f"'{val}'")
        self.i += 1

    def accept(self, val: str) -> bool:
        if self.at(val):
            self.i += 1
            return True
        return False

    def skip_group(self):
        """A bracketed group and everything in it (`{...}`, `{{...}, {...}}`)."""
        depth = 0
        while True:
            kind, v, _ = self.peek()
            if kind == "end":
                self.fail("a closing bracket")
            self.i += 1
            if kind == "punct" and v in "{[(<":
                depth += 1
            elif kind == "punct" and v in "}])>":
                depth -= 1
                if depth <= 0:
                    return

    def extras(self, close: str, allowed: tuple[str, ...]) -> dict[str, list[AxisRef]]:
        """`, replicated={"y"}, unreduced=max{"z"}, ...` up to and including `close`."""
        out: dict[str, list[AxisRef]] = {}
        while self.accept(","):
            kind, word, _ = self.peek()
            if word not in allowed:
                self.fail(" or ".join(f"{a}=" for a in allowed))
            self.i += 1
            self.take("=")
            if word == "metadata":
                self.skip_group()
                continue
            if self.peek()[0] == "word":           # unreduced=max{...}
                self.i += 1
            out[word] = self.axis_list()
        self.take(close)
        return out

    def int(self) -> int:
        kind, v, _ = self.peek()
        if kind != "int":
            self.fail("an integer")
        self.i += 1
        return int(v)

    def name(self) -> str:
        kind, v, _ = self.peek()
        if kind not in ("str", "word"):
            self.fail("a name")
        self.i += 1
        return v

    def end(self):
        if self.peek()[0] != "end":
            self.fail("the end")

    # -- pieces ----------------------------------------------------------------------------
    def seq(self, close: str, read) -> list:
        """Comma-separated items up to and including `close` (the opening bracket already read)."""
        out = []
        while not self.at(close):
            out.append(read())
            if not self.accept(","):
                break
        self.take(close)
        return out

    def int_list(self, close: str) -> list[int]:
        return self.seq(close, self.int)

    def mesh_axes(self) -> tuple[tuple[str, int], ...]:
        """`["x"=2, "y"=4]` (or with single quotes)."""
        def axis():
            n = self.name()
            self.take("=")
            return n, self.int()
        self.take("[")
        return tuple(self.seq("]", axis))

    def dim_shardings(self) -> list[list[AxisRef]]:
        """`[{"x"}, {}, {"y", ?}]`."""
        self.take("[")
        return self.seq("]", self.dim_sharding)

    def axis_ref(self) -> AxisRef:
        kind, v, _ = self.peek()
        if kind != "str":
            self.fail("an axis name in quotes")
        self.i += 1
        if self.accept(":"):
            self.take("(")
            pre = self.int()
            self.take(")")
            return AxisRef(v, pre, self.int())
        return AxisRef(v)

    def axis_list(self) -> list[AxisRef]:
        """`{"x", "y":(1)2}` (the opening brace already read is not assumed)."""
        self.take("{")
        return self.seq("}", self.axis_ref)

    def dim_sharding(self) -> list[AxisRef]:
        """`{"x", "y", ?}p2` -> the axes (open `?` and priorities do not change the tiling)."""
        self.take("{")
        out = []
        while not self.at("}"):
            if self.accept("?"):
                continue
            out.append(self.axis_ref())
            if not self.accept(","):
                break
        self.take("}")
        kind, v, _ = self.peek()
        if kind == "word" and re.fullmatch(r"p\d+", v):
            self.i += 1
        return out

    def mesh_body(self) -> Mesh:
        """`<["x"=2, "y"=4], device_ids=[...]>` after the word `mesh`."""
        self.take("<")
        axes = self.mesh_axes()
        ids = None
        if self.accept(","):
            self.take("device_ids")
            self.take("=")
            self.take("[")
            ids = tuple(self.int_list("]"))
        self.take(">")
        return Mesh(tuple(axes), ids)


def _check_mesh(m: Mesh, text: str):
    names = [n for n, _ in m.axes]
    if len(set(names)) != len(names):
        raise ShardingError(f"mesh '{text}' names an axis twice")
    if any(s < 1 for _, s in m.axes):
        raise ShardingError(f"mesh '{text}' has an axis of size < 1")
    if m.device_ids is not None and m.axes:
        if sorted(m.device_ids) != list(range(m.size)):
            raise ShardingError(f"mesh '{text}': device_ids must be a permutation of 0..{m.size - 1}, "
                                f"got {list(m.device_ids)}")


def sdy_meshes(module) -> dict[str, Mesh]:
    """The meshes of the module's `xla.sdy.meshes` frontend attribute (`{mesh = #sdy.mesh<...>}`)."""
    out: dict[str, Mesh] = {}
    fa = module.attrs.get("frontend_attributes") if module is not None else None
    text = _fa(fa, "xla.sdy.meshes")
    if text:
        t = _Text(text)
        t.take("{")
        while not t.at("}"):
            name = t.name()
            t.take("=")
            if not (t.accept("#sdy.mesh") or t.accept("mesh")):
                t.fail("#sdy.mesh<...>")
            start = t.i
            m = t.mesh_body()
            _check_mesh(m, " ".join(v for _, v, _ in t.toks[start:t.i]))
            out[name] = m
            if not t.accept(","):
                break
        t.take("}")
    return out


def _fa(fa, key: str) -> str | None:
    if isinstance(fa, FrontendAttributes):
        for k, v in fa.items:
            if k == key:
                return v
    return None


def _read_mesh_ref(t: _Text, meshes: dict[str, Mesh]) -> Mesh:
    if t.accept("@"):
        name = t.name()
        if name not in meshes:
            known = ", ".join(sorted(meshes)) or "none: the module has no xla.sdy.meshes frontend attribute"
            raise ShardingError(f"sharding '{t.text}' names mesh @{name}, which the module does not "
                                f"define (meshes: {known})")
        return meshes[name]
    if t.accept("mesh") or t.accept("#sdy.mesh"):
        start = t.i
        m = t.mesh_body()
        _check_mesh(m, " ".join(v for _, v, _ in t.toks[start:t.i]))
        return m
    t.fail("a mesh (@name or mesh<[...]>)")


def _read_tensor_sharding(t: _Text, meshes: dict[str, Mesh], only: set | None = None) -> Sharding:
    """`<@mesh, [{"x"}, {}], replicated={"y"}, unreduced={"z"}>` (the leading `<` included)."""
    t.take("<")
    mesh = _read_mesh_ref(t, meshes)
    t.take(",")
    dims = t.dim_shardings()
    more = t.extras(">", ("replicated", "unreduced"))      # replicated axes: whole tiles, no cut
    return _tiled(mesh, dims, t.text, only, unreduced=more.get("unreduced", ()))


def sdy_sharding(text: str, module, *, only_axes: Sequence[str] | None = None) -> Sharding:
    """A Shardy sharding as a classic Sharding: `#sdy.sharding<@mesh, [{"x"}, {"y", "z"}, {}]>`,
    or the list `#sdy.sharding_per_value<[<@mesh, [...]>, ...]>` (a tuple Sharding when it holds
    several, the one sharding when it holds one).  `only_axes`: cut only along these axes (a manual
    region's manual axes); the others stay whole."""
    meshes = sdy_meshes(module)
    only = set(only_axes) if only_axes is not None else None
    t = _Text(text)
    if t.accept("#sdy.sharding_per_value"):
        t.take("<")
        t.take("[")
        elems = t.seq("]", lambda: _read_tensor_sharding(t, meshes, only))
        t.take(">")
        t.end()
        return elems[0] if len(elems) == 1 else Sharding("tuple", elements=tuple(elems))   # [] -> ()
    if not t.accept("#sdy.sharding"):
        t.fail("#sdy.sharding<...> or #sdy.sharding_per_value<[...]>")
    s = _read_tensor_sharding(t, meshes, only)
    t.end()
    return s


def manual_axes(text: str) -> tuple[str, ...]:
    """`#sdy<manual_axes{"x", "y"}>` -> ("x", "y")."""
    t = _Text(text)
    t.take("#sdy")
    t.take("<")
    t.take("manual_axes")
    axes = t.axis_list()
    t.take(">")
    t.end()
    return tuple(a.name for a in axes)


def named_sharding(text: str) -> Sharding:
    """XLA's named form `{mesh['a'=2,'b'=4], [{'a'}, {'b':(2)2}], replicated={'b'}}`,
    `{mesh['x'=2,'y'=2], device_ids=(0,2,1,3), [{'x'}]}`, `{mesh[...], replicated}` (or manual,
    unreduced), `{maximal_mesh[device_id=5]}` as a classic Sharding."""
    t = _Text(text)
    t.take("{")
    if t.accept("maximal_mesh"):
        t.take("[")
        t.take("device_id")
        t.take("=")
        d = t.int()
        t.take("]")
        t.extras("}", ("metadata",))
        t.end()
        return Sharding("maximal", device=d)
    t.take("mesh")
    axes = t.mesh_axes()
    ids = None
    t.accept(",")                                   # (XLA's parser takes these commas as optional)
    if t.accept("device_ids"):
        t.take("=")
        t.take("(")
        if t.accept("["):
            reshape = t.int_list("]")
            perm: list[int] = []
            if t.accept("T"):
                t.take("(")
                perm = t.int_list(")")
            a = np.arange(math.prod(reshape)).reshape(reshape)
            if perm:
                a = a.transpose(perm)
            ids = tuple(int(x) for x in a.ravel())
            t.take(")")
        else:
            ids = tuple(t.int_list(")"))
        t.accept(",")
    mesh = Mesh(tuple(axes), ids)
    _check_mesh(mesh, text)
    kind, v, _ = t.peek()
    if kind == "word" and v in ("replicated", "manual", "unreduced"):
        t.i += 1
        t.extras("}", ("metadata",))
        t.end()
        return Sharding(v)
    dims = t.dim_shardings()
    more = t.extras("}", ("replicated", "unreduced", "manual", "metadata"))
    t.end()
    return _tiled(mesh, dims, text, None, manual=more.get("manual", ()),
                  unreduced=more.get("unreduced", ()))


def _tiled(mesh: Mesh, dims: list[list[AxisRef]], text: str, only: set | None = None,
           manual: Sequence[AxisRef] = (), unreduced: Sequence[AxisRef] = ()) -> Sharding:
    """The classic form of a mesh sharding, as XLA builds it (hlo_sharding.cc V3ToV2Sharding): the
    mesh's devices reshaped to its axes, each split into the sub-axes the sharding uses (major to
    minor), transposed to [the axes of data dimension 0, of dimension 1, ..., manual axes,
    unreduced axes, the other axes in mesh order] and reshaped to [tiles..., manual, unreduced,
    replicated].  `only`: cut the data only along these axes (the others join the replicated)."""
    if mesh.maximal is not None:
        return Sharding("maximal", device=mesh.maximal)
    if not mesh.axes:
        return Sharding("replicated")
    sizes = dict(mesh.axes)
    names = [a for a, _ in mesh.axes]

    def ref(r: AxisRef) -> tuple[str, int, int]:
        name = r.name
        if name not in sizes and name.isdigit() and int(name) < len(names):
            name = names[int(name)]                  # XLA's named form may give an axis's index
        if name not in sizes:
            raise ShardingError(f"sharding '{text}' names axis \"{r.name}\", which its mesh "
                                f"{_mesh_str(mesh)} does not have")
        full = sizes[name]
        k = full if r.size is None else r.size
        if r.pre < 1 or k < 1 or full % (r.pre * k):
            raise ShardingError(f"sharding '{text}': sub-axis \"{r.name}\":({r.pre}){k} does not fit "
                                f"axis \"{r.name}\" of size {full}")
        return name, r.pre, k

    data = [[ref(r) for r in refs] for refs in dims]
    if only is not None:
        data = [[x for x in d if x[0] in only] for d in data]
    subgroups = [("manual", [ref(r) for r in manual]), ("unreduced", [ref(r) for r in unreduced])]
    used = [x for d in data for x in d] + [x for _, g in subgroups for x in g]
    bounds: dict[str, set] = {a: {1, n} for a, n in mesh.axes}
    for name, pre, k in used:
        bounds[name] |= {pre, pre * k}
    pieces: list[tuple[str, int, int]] = []         # (axis, pre-size, size), major to minor
    for name, _ in mesh.axes:
        b = sorted(bounds[name])
        for lo, hi in zip(b, b[1:]):
            if hi % lo:
                raise ShardingError(f"sharding '{text}': the sub-axes of \"{name}\" it uses do not "
                                    f"fit together")
            pieces.append((name, lo, hi // lo))

    def piece_ids(name, pre, k):
        return [j for j, (a, q, _) in enumerate(pieces) if a == name and pre <= q < pre * k]

    perm: list[int] = []
    tile_dims: list[int] = []
    for d in data:
        ids = [j for x in d for j in piece_ids(*x)]
        perm += ids
        tile_dims.append(math.prod(pieces[j][2] for j in ids))
    types: list[str] = []
    for kind, g in subgroups:
        if g:
            ids = [j for x in g for j in piece_ids(*x)]
            perm += ids
            tile_dims.append(math.prod(pieces[j][2] for j in ids))
            types.append(kind)
    if len(set(perm)) != len(perm):
        twice = sorted({pieces[j][0] for j in perm if perm.count(j) > 1})
        raise ShardingError(f"sharding '{text}' uses axis \"{twice[0]}\" twice")
    rest = [j for j in range(len(pieces)) if j not in perm]
    rep = math.prod(pieces[j][2] for j in rest)
    if rep > 1:
        tile_dims.append(rep)
        types.append("replicated")
    if all(t == 1 for t in tile_dims[:len(data)]) and types in ([], ["replicated"]):
        return Sharding("replicated")
    a = (np.asarray(mesh.devices(), dtype=np.int64).reshape([p[2] for p in pieces])
         .transpose(perm + rest).reshape(tile_dims))
    ta = TileAssignment(tuple(int(x) for x in a.shape), devices=tuple(int(d) for d in a.ravel()))
    if types == ["replicated"]:
        return Sharding("tiled", tile_assignment=ta, last_tile_dim_replicate=True)
    return Sharding("tiled", tile_assignment=ta, last_tile_dims=tuple(types))


def _mesh_str(mesh: Mesh) -> str:
    return "[" + ", ".join(f'"{a}"={s}' for a, s in mesh.axes) + "]"


# ---------------------------------------------------------------------------------------------
# Shardings of instructions and modules
# ---------------------------------------------------------------------------------------------

def _is_named(s: Sharding) -> bool:
    return s.kind == "raw" or (len(s.extra) >= 2 and s.extra[0] == "mesh")


def instruction_sharding(inst, module) -> Sharding | None:
    """The instruction's sharding: `sharding=` (classic, or XLA's named form), else its Shardy
    `xla.sdy.sharding` frontend attribute, else None."""
    s = inst.attr("sharding")
    if isinstance(s, Sharding):
        try:
            return _classic(s)
        except ShardingError as e:
            sdy = _fa(inst.attr("frontend_attributes"), "xla.sdy.sharding")
            if sdy is None:
                raise _err(str(e), inst) from None
    sdy = _fa(inst.attr("frontend_attributes"), "xla.sdy.sharding")
    if sdy is None:
        return None
    try:
        return sdy_sharding(sdy, module)
    except ShardingError as e:
        raise _err(str(e), inst) from None


def parameter_sharding(inst, module) -> Sharding | None:
    """The sharding of an entry parameter (`sharding=` or Shardy's `xla.sdy.sharding`), or None."""
    return instruction_sharding(inst, module)


def _classic(s: Sharding) -> Sharding:
    """A parsed sharding with any named (mesh) parts turned into the classic form."""
    if s.kind == "tuple":
        return Sharding("tuple", elements=tuple(_classic(e) for e in s.elements))
    if s.kind == "raw":
        return named_sharding(s.extra[0])
    if _is_named(s):
        return named_sharding(str(s))
    return s


def module_devices(module) -> tuple[int, int]:
    """(replicas, partitions): the header's replica_count / num_partitions; else the largest
    Shardy mesh, or one more than the largest device any sharding names; else (1, 1)."""
    attrs = module.attrs
    replicas = int(attrs.get("replica_count", 1) or 1)
    if "num_partitions" in attrs:
        return replicas, int(attrs["num_partitions"] or 1)
    best = 1
    for m in sdy_meshes(module).values():
        best = max(best, m.size if m.axes else (max(m.device_ids) + 1 if m.device_ids else 1))
    for comp in module.computations:      # (a plain loop: it asks every instruction of a large module)
        for attrs in map(_ATTRS, comp.instructions):
            if "sharding" in attrs:
                s = attrs["sharding"]
                if isinstance(s, Sharding):
                    best = max(best, _largest_device(s) + 1)
    return replicas, best


_ATTRS = attrgetter("attrs")


def _largest_device(s: Sharding) -> int:
    if s.kind == "tuple":
        return max((_largest_device(e) for e in s.elements), default=0)
    if s.kind == "maximal" and s.device is not None:
        return s.device
    if s.tile_assignment is not None:
        return math.prod(s.tile_assignment.dims) - 1
    if _is_named(s):
        try:
            return _largest_device(_classic(s))
        except ShardingError:
            return 0
    return 0


def leaf_shardings(sharding: Sharding | None, shape) -> list[Sharding | None]:
    """One sharding per array leaf of `shape` (depth first): a tuple sharding lists them in order,
    any other sharding applies to every leaf."""
    n = _count_leaves(shape)
    if sharding is not None and sharding.kind == "tuple":
        if len(sharding.elements) != n:
            raise ShardingError(f"tuple sharding has {len(sharding.elements)} elements for a shape "
                                f"with {n} leaves")
        return list(sharding.elements)
    return [sharding] * n


def _count_leaves(shape) -> int:
    ts = getattr(shape, "tuple_shapes", None)
    if ts is None:
        return 1
    return sum(_count_leaves(t) for t in ts)


# ---------------------------------------------------------------------------------------------
# Tiles
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Layout:
    """Where each partition's tile lies.  `tiles[i]`: tiles along data dimension i; `coord[p]`:
    partition p's tile index; `group[p]`: partition p's position along the non-data (replicated /
    manual) tile dimensions -- the devices of one group hold the whole array between them.
    `maximal`: the one partition holding a maximal-sharded value.  `manual`: fully manual (every
    device holds its own value)."""
    tiles: tuple[int, ...]
    coord: np.ndarray
    group: np.ndarray
    maximal: int | None = None
    manual: bool = False

    @property
    def partitions(self) -> int:
        return len(self.group)


def _tile_devices(ta: TileAssignment) -> np.ndarray:
    if ta.iota is not None:
        iota: IotaReplicaGroups = ta.iota
        a = np.arange(math.prod(iota.reshape_dims)).reshape(iota.reshape_dims)
        if iota.transpose_perm:
            a = a.transpose(iota.transpose_perm)
        return a.reshape(ta.dims)
    return np.asarray(ta.devices, dtype=np.int64).reshape(ta.dims)


def layout(sharding: Sharding | None, rank: int) -> Layout:
    """The tiles of a non-tuple sharding over an array of `rank` dimensions."""
    s = sharding
    if s is not None and _is_named(s):
        s = _classic(s)
    if s is None or s.kind in ("replicated", "unknown", "unreduced"):
        return Layout((1,) * rank, np.zeros((1, rank), np.int64), np.zeros(1, np.int64))
    if s.kind == "manual":
        return Layout((1,) * rank, np.zeros((1, rank), np.int64), np.zeros(1, np.int64), manual=True)
    if s.kind == "maximal":
        d = int(s.device or 0)
        return Layout((1,) * rank, np.zeros((d + 1, rank), np.int64), np.zeros(d + 1, np.int64),
                      maximal=d)
    if s.kind == "tuple":
        raise ShardingError(f"a tuple sharding {s} applies to a tuple, not to one array")
    if s.tile_assignment is None:
        raise ShardingError(f"sharding {s} has no tile assignment")
    a = _tile_devices(s.tile_assignment)
    sub = (1 if s.last_tile_dim_replicate else 0) + len(s.last_tile_dims)
    data_rank = a.ndim - sub
    if data_rank != rank:
        raise ShardingError(f"sharding {s} cuts {data_rank} dimension{'s' * (data_rank != 1)} but the "
                            f"array has {rank}")
    n = a.size
    flat = a.ravel()
    if sorted(flat.tolist()) != list(range(n)):
        raise ShardingError(f"sharding {s}: the tile assignment must name each of the devices "
                            f"0..{n - 1} once, got {sorted(flat.tolist())}")
    pos = np.empty(n, np.int64)
    pos[flat] = np.arange(n)
    idx = np.stack(np.unravel_index(pos, a.shape), axis=1) if a.ndim else np.zeros((n, 0), np.int64)
    tiles = tuple(int(x) for x in a.shape[:data_rank])
    sub_shape = a.shape[data_rank:]
    group = (np.ravel_multi_index(tuple(idx[:, data_rank:].T), sub_shape) if sub
             else np.zeros(n, np.int64))
    return Layout(tiles, idx[:, :data_rank].astype(np.int64), np.asarray(group, np.int64))


def local_dims(global_dims: Sequence[int], sharding: Sharding | None) -> tuple[int, ...]:
    """A device's buffer shape: ceil(dim / tiles) along each cut dimension."""
    lay = layout(sharding, len(global_dims))
    return tuple(-(-int(d) // t) for d, t in zip(global_dims, lay.tiles))


def _bounds(global_dims, lay: Layout, p: int):
    """Partition p's tile: per dimension (start, stop) within the array."""
    out = []
    for i, d in enumerate(global_dims):
        size = -(-int(d) // lay.tiles[i])
        c = int(lay.coord[p, i])
        out.append((min(c * size, d), min((c + 1) * size, d)))
    return out


def _partition_of(devices: Sequence[int], lay: Layout, partitions: int | None) -> np.ndarray:
    parts = lay.partitions if partitions is None else partitions
    if lay.maximal is None and not lay.manual and parts != lay.partitions and lay.partitions > 1:
        raise ShardingError(f"the sharding names {lay.partitions} devices but the run has "
                            f"{parts} partitions")
    d = np.asarray(devices, np.int64)
    if lay.maximal is None and lay.partitions == 1:
        return np.zeros_like(d)                 # one tile (replicated, manual): every device holds it
    return d % parts if parts else d


def _devices(count: int | None, devices, stacked_len: int | None = None) -> tuple[int, ...]:
    if devices is not None:
        return tuple(int(d) for d in devices)
    if count is None:
        count = stacked_len
    return tuple(range(int(count)))


def _cut(src: np.ndarray, bounds, ldims, dtype) -> np.ndarray:
    piece = src[tuple(slice(a, b) for a, b in bounds)]
    if piece.shape == tuple(ldims):
        return piece
    out = np.zeros(ldims, dtype=dtype)
    out[tuple(slice(0, b - a) for a, b in bounds)] = piece
    return out


def shard(global_array, sharding: Sharding | None, local_dims_: Sequence[int] | None = None,
          count: int | None = None, *, devices: Sequence[int] | None = None,
          partitions: int | None = None) -> np.ndarray:
    """[count, *local_dims]: each device's tile of `global_array` (zero padded past the end).
    Replicated, maximal and manual shardings give every device the whole array.  `devices`: the
    device ids of the stack (default 0..count-1, count defaulting to the devices the sharding
    names); `partitions`: of the run (default: the devices the sharding names), a device's
    partition being its id modulo it."""
    g = np.asarray(global_array)
    lay = layout(sharding, g.ndim)
    devs = _devices(count if count is not None else lay.partitions, devices)
    ldims = tuple(local_dims_) if local_dims_ is not None else local_dims(g.shape, sharding)
    expect = tuple(-(-int(d) // t) for d, t in zip(g.shape, lay.tiles))
    if ldims != expect:
        raise ShardingError(f"sharding {sharding} of an array of shape {list(g.shape)} gives "
                            f"per-device shape {list(expect)}, not {list(ldims)}")
    parts = _partition_of(devs, lay, partitions)
    out = np.empty((len(devs),) + ldims, dtype=g.dtype)
    for k, p in enumerate(parts):
        if lay.maximal is not None or lay.manual:
            out[k] = g
        else:
            out[k] = _cut(g, _bounds(g.shape, lay, int(p)), ldims, g.dtype)
    return out


def split(stacked, sharding: Sharding | None, local_dims_: Sequence[int] | None = None, *,
          devices: Sequence[int] | None = None, partitions: int | None = None) -> np.ndarray:
    """Each device cuts ITS OWN value (stacked[k] is device devices[k]'s global value) to its
    tile: what `SPMDFullToShardShape` / `xla.sdy.GlobalToLocalShape` do."""
    st = np.asarray(stacked)
    gdims = st.shape[1:]
    devs = _devices(None, devices, st.shape[0])
    lay = layout(sharding, len(gdims))
    ldims = tuple(local_dims_) if local_dims_ is not None else local_dims(gdims, sharding)
    parts = _partition_of(devs, lay, partitions)
    out = np.empty((len(devs),) + ldims, dtype=st.dtype)
    for k, p in enumerate(parts):
        if lay.maximal is not None or lay.manual:
            out[k] = st[k]
        else:
            out[k] = _cut(st[k], _bounds(gdims, lay, int(p)), ldims, st.dtype)
    return out


def unshard(stacked, sharding: Sharding | None, global_dims: Sequence[int], *,
            devices: Sequence[int] | None = None, partitions: int | None = None) -> np.ndarray:
    """The global array from per-device tiles: each tile from the first device (in stack order)
    holding it; a maximal sharding's value from its device."""
    st = np.asarray(stacked)
    gdims = tuple(int(d) for d in global_dims)
    devs = _devices(None, devices, st.shape[0])
    lay = layout(sharding, len(gdims))
    parts = _partition_of(devs, lay, partitions)
    if lay.maximal is not None:
        where = [k for k, p in enumerate(parts) if p == lay.maximal]
        if not where:
            raise ShardingError(f"device {lay.maximal} of the maximal sharding is not among the "
                                f"devices {list(devs)}")
        return np.array(st[where[0]], copy=True)
    if lay.manual:
        return np.array(st[0], copy=True)
    out = np.zeros(gdims, dtype=st.dtype)
    done: set = set()
    for k, p in enumerate(parts):
        key = tuple(int(c) for c in lay.coord[int(p)])
        if key in done:
            continue
        done.add(key)
        b = _bounds(gdims, lay, int(p))
        out[tuple(slice(a, z) for a, z in b)] = st[k][tuple(slice(0, z - a) for a, z in b)]
    if len(done) != math.prod(lay.tiles):
        raise ShardingError(f"devices {list(devs)} do not hold every tile of sharding {sharding}")
    return out


def merge(stacked, sharding: Sharding | None, global_dims: Sequence[int], *,
          devices: Sequence[int] | None = None, partitions: int | None = None) -> np.ndarray:
    """[count, *global_dims]: for each device the array reassembled from the tiles held by the
    devices of its group (same replica, same position along the sharding's replicated / manual
    subgroup dimensions): what `SPMDShardToFullShape` / `xla.sdy.LocalToGlobalShape` do.  A fully
    manual or replicated sharding leaves each device its own value; a maximal one gives every
    device the value of its device."""
    st = np.asarray(stacked)
    gdims = tuple(int(d) for d in global_dims)
    devs = _devices(None, devices, st.shape[0])
    lay = layout(sharding, len(gdims))
    nparts = lay.partitions if partitions is None else partitions
    parts = _partition_of(devs, lay, partitions)
    if lay.maximal is not None and partitions is None:
        nparts = 0                              # the run's partitions unknown: device id = partition
    where = {d: k for k, d in enumerate(devs)}
    out = np.empty((len(devs),) + gdims, dtype=st.dtype)
    if lay.maximal is not None:
        for k, d in enumerate(devs):
            src = (d // nparts) * nparts + lay.maximal if nparts else lay.maximal
            if src not in where:
                raise ShardingError(f"device {d} needs the value of device {src} (maximal sharding), "
                                    f"which is not running with it (running: {list(devs)})")
            out[k] = st[where[src]][tuple(slice(0, g) for g in gdims)]
        return out
    if lay.manual or math.prod(lay.tiles) == 1:
        for k in range(len(devs)):
            out[k] = st[k][tuple(slice(0, g) for g in gdims)]
        return out
    # the partitions of each group, by tile
    members: dict[int, dict[tuple, int]] = {}
    for p in range(lay.partitions):
        members.setdefault(int(lay.group[p]), {})[tuple(int(c) for c in lay.coord[p])] = p
    built: dict[tuple[int, int], np.ndarray] = {}
    for k, d in enumerate(devs):
        p = int(parts[k])
        base = (d // nparts) * nparts if nparts else 0
        key = (base, int(lay.group[p]))
        if key not in built:
            full = np.zeros(gdims, dtype=st.dtype)
            missing = []
            for tile, q in members[key[1]].items():
                src = base + q
                if src not in where:
                    missing.append(src)
                    continue
                b = _bounds(gdims, lay, q)
                full[tuple(slice(a, z) for a, z in b)] = st[where[src]][tuple(slice(0, z - a) for a, z in b)]
            if missing:
                raise ShardingError(f"device {d} needs tiles from devices {sorted(missing)}, which are "
                                    f"not running with it (running: {list(devs)})")
            built[key] = full
        out[k] = built[key]
    return out


# ---------------------------------------------------------------------------------------------
# Manual regions
# ---------------------------------------------------------------------------------------------

_SPLIT_TARGETS = ("SPMDFullToShardShape", "xla.sdy.GlobalToLocalShape")
_MERGE_TARGETS = ("SPMDShardToFullShape", "xla.sdy.LocalToGlobalShape")


def _target(inst) -> str:
    return str(inst.attr("custom_call_target", "") or "")


def _find_operand(inst, module, k: int = 0):
    name = inst.operands[k]
    for comp in module.computations:
        if any(i is inst for i in comp.instructions):
            for i in comp.instructions:
                if i.name == name:
                    return i
    for _, i in module.instructions():
        if i.name == name:
            return i
    raise _err(f"operand {name} not found", inst)


def _sdy_manual(inst, module, key: str) -> Sharding:
    fa = inst.attr("frontend_attributes")
    text = _fa(fa, key)
    axes_text = _fa(fa, "xla.sdy.manual_axes")
    if text is None or axes_text is None:
        raise _err(f"custom-call {_target(inst)} needs frontend attributes {key} and "
                   f"xla.sdy.manual_axes", inst)
    try:
        axes = manual_axes(axes_text)
        return sdy_sharding(text, module, only_axes=axes)
    except ShardingError as e:
        raise _err(str(e), inst) from None


def manual_split(inst, module) -> Sharding:
    """The sharding a manual region's entry cuts each device's value by:
    `SPMDFullToShardShape` -> its operand's sharding (usually a `Sharding` custom-call's);
    `xla.sdy.GlobalToLocalShape` -> `xla.sdy.in_shardings` restricted to `xla.sdy.manual_axes`
    (a tuple Sharding when the call has several operands).  Use with `split`."""
    t = _target(inst)
    if t == "SPMDFullToShardShape":
        op = _find_operand(inst, module)
        s = instruction_sharding(op, module)
        if s is None:
            raise _err(f"SPMDFullToShardShape: its operand {op.name} has no sharding to cut by", inst)
        return s
    if t == "xla.sdy.GlobalToLocalShape":
        return _sdy_manual(inst, module, "xla.sdy.in_shardings")
    raise _err(f"manual_split: expected a custom-call to one of {', '.join(_SPLIT_TARGETS)}, "
               f"got {t or inst.opcode}", inst)


def manual_merge(inst, module) -> Sharding:
    """The sharding a manual region's exit reassembles by: `SPMDShardToFullShape` -> its own
    `sharding=`; `xla.sdy.LocalToGlobalShape` -> `xla.sdy.out_shardings` restricted to
    `xla.sdy.manual_axes`.  Use with `merge`."""
    t = _target(inst)
    if t == "SPMDShardToFullShape":
        s = instruction_sharding(inst, module)
        if s is None:
            raise _err("SPMDShardToFullShape needs a sharding= saying how to reassemble", inst)
        return s
    if t == "xla.sdy.LocalToGlobalShape":
        return _sdy_manual(inst, module, "xla.sdy.out_shardings")
    raise _err(f"manual_merge: expected a custom-call to one of {', '.join(_MERGE_TARGETS)}, "
               f"got {t or inst.opcode}", inst)
