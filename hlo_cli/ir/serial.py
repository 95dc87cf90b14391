"""The IR's compact pickle form: `serialize_module(m)` / `deserialize_module(data)`.

Used by the on-disk cache (sources/cache.py) and by the parser's two-process parse (parser/parallel.py)
to hand a module from one process to another.  Loading accepts only the IR's own classes, so a planted
payload cannot run code.
"""
from __future__ import annotations

import copyreg
import io
import itertools
import operator
import pickle
import sys
import threading
from functools import cached_property
from types import FunctionType as _FunctionType

from .gcpause import NoGC

__all__ = ["serialize_module", "deserialize_module", "dump", "load", "Unsupported", "LazyComputation"]

_PICKLE_PROTOCOL = 5

#
# Pickling the IR as is works but is slow to load: slotted frozen dataclasses
# unpickle through dataclasses' __setstate__, which calls fields() for every
# object (most of the load time of a large module).  Instead a computation's
# instructions are stored as rows, one plain tuple of an Instruction's fields
# (its Loc's inline) each, made in one list comprehension and pickled by the
# C pickler without a Python call per instruction, and rebuilt on load by
# module.make_instruction over the rows (`_instructions_of_rows`); the other dataclasses are
# rebuilt by their constructor with positional arguments (a class with
# init=False fields or a __post_init__ field by field instead, so that nothing
# is recomputed), and ndarrays from raw bytes.  Cached properties are not
# stored.  The pickle memo keeps the sharing the IR already has: the parser
# gives an operand the very string of the name it refers to, an opcode the
# table's string, equal attribute values of one text one object, so a string
# that repeats is stored and loaded once (an Instruction met anywhere else is
# reduced on its own by _mk_instr, its strings interned).
# Everything the pickler meets must be a builtin container or a registered IR
# type; anything else makes the module uncacheable (it is then not stored),
# and the unpickler accepts exactly the globals the pickler can produce.
#
# The cache's form (`dump`, not `serialize_module`) is lazy per computation: the instructions of
# consecutive computations, CHUNK_INSTRUCTIONS or so at a time, are a pickle of their own (a bytes
# object inside the module's pickle, in a one-item list every computation of the chunk shares) decoded
# on the first read of `instructions` of any of them, so a command that reads a few computations (a
# refused run, a repeat whose verdicts are cached) does not build most other instructions.  (A
# pickle per computation costs a pickler, its globals and its first references to shapes for each of
# the thousands of small fused computations of an optimized dump.)  Shapes are shared across the
# computations through one table in the module's pickle (the parts refer to it by index).

CHUNK_INSTRUCTIONS = 2048

class Unsupported(pickle.PicklingError):
    """The module holds something the compact form cannot store (it is then not cached)."""
    pass


class _Codec:
    def __init__(self):
        import dataclasses

        import numpy as np

        from . import attributes, dtypes, literal, module, shape
        self.Module = module.Module
        self.LazyComputation = _lazy_class()
        Instruction, Loc = module.Instruction, module.Loc
        self.np = np
        red: dict[type, object] = {}
        allowed_classes: set[type] = set()
        raw_slots: set[type] = set()
        self.raw_slots = raw_slots
        for mod in (module, shape, attributes, literal):
            for obj in vars(mod).values():
                if not (isinstance(obj, type) and obj.__module__ == mod.__name__) or \
                        obj is literal.DeferredLiteral:
                    continue
                if dataclasses.is_dataclass(obj):
                    allowed_classes.add(obj)
                    red[obj] = self._dataclass_reducer(obj, dataclasses, raw_slots)
                elif issubclass(obj, (str, tuple)) and not issubclass(obj, BaseException):
                    allowed_classes.add(obj)      # Word, Quoted, Sep, IntList: default reduction
        allowed_classes.add(complex)
        fast_instruction = self._fast_instruction_ok(Instruction, Loc, dataclasses)
        # frozen value classes with one field (Metadata, Enum, ComputationRef, ...): equal attribute
        # values of this kind are stored once (the parser already shares many of them)
        text_values = {}
        for cls in allowed_classes:
            if dataclasses.is_dataclass(cls):
                params = cls.__dataclass_params__
                flds = dataclasses.fields(cls)
                if params.frozen and params.eq and len(flds) == 1 and flds[0].compare:
                    text_values[cls] = flds[0].name
        self.text_values = text_values
        red[np.ndarray] = self._reduce_array
        # a constant whose value was not read yet: stored as its text, read back the same
        allowed_classes.add(literal.DeferredLiteral)
        red[literal.DeferredLiteral] = lambda o, cls=literal.DeferredLiteral: (cls, (o.shape, o._text))
        red[self.LazyComputation] = red[module.Computation]       # decoded, stored as a plain one
        # numpy dtypes the arrays may have: HLO element types first, then plain numpy ones
        self.dtype_names = {}
        for et in dtypes.ELEMENT_TYPES.values():
            if et.numpy is not None and et.numpy not in self.dtype_names:
                self.dtype_names[et.numpy] = et.name
        self.dtypes = {name: dt for dt, name in self.dtype_names.items()}
        self.reducers = red
        self.allowed_classes = frozenset(allowed_classes)
        self.builtin_ok = frozenset({tuple, list, dict, set, frozenset, bytearray, complex})
        self.functions = frozenset((_mk_instr, _mk_array, _restore_slots, _mk_lazy_computation, _shape_at,
                                    _mk_computation))
        self.Computation = module.Computation
        self.Shape = shape.Shape
        comp_fields = dataclasses.fields(module.Computation)
        if not all(f.init for f in comp_fields) or hasattr(module.Computation, "__post_init__"):
            raise TypeError("Computation must be built from its fields alone")   # pragma: no cover
        self.computation_fields = tuple(f.name for f in comp_fields)
        self.lazy_fields = tuple(n for n in self.computation_fields if n != "instructions")
        globs: dict[tuple[str, str], object] = {}
        for cls in self.allowed_classes:
            globs[(cls.__module__, cls.__qualname__)] = cls
        for f in self.functions:
            globs[(__name__, f.__name__)] = f
        self.globals = globs
        codec = self

        class Pickler(pickle.Pickler):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                self.canon = {}
                self.lazy_reduce = None
                self.index = None           # (a part's pickler: shapes by index into the module's table)

            def reducer_override(self, obj, _red=red, _ok=codec.builtin_ok | codec.allowed_classes,
                                 _classes=codec.allowed_classes, _functions=codec.functions,
                                 _Instruction=Instruction if fast_instruction else None,
                                 _computations=(module.Computation, self.LazyComputation), _Shape=self.Shape):
                t = type(obj)
                if t is tuple or t is dict:
                    return NotImplemented                   # (the most common: an instruction's operands, attributes)
                if t is _Shape and self.index is not None:
                    i = self.index.get(id(obj))
                    if i is None:
                        i = self.index[id(obj)] = len(self.table)
                        self.table.append(obj)
                    return _shape_at, (i,)
                if t is _Instruction:
                    return _reduce_instruction(obj, self.canon, text_values)
                if t in _computations:
                    if self.lazy_reduce is not None:
                        return self.lazy_reduce(obj)
                    if _Instruction is not None:
                        return codec.reduce_computation(obj)
                f = _red.get(t)
                if f is not None:
                    return f(obj)
                if t in _ok:
                    return NotImplemented                   # the default reduction
                if t is type:
                    if obj in _classes:
                        return NotImplemented               # saved as a global
                elif t is _FunctionType and obj in _functions:
                    return NotImplemented
                raise Unsupported(f"cannot cache a {t.__module__}.{t.__qualname__}")

        class Unpickler(pickle.Unpickler):
            def find_class(self, module_name, name, _globs=globs):
                obj = _globs.get((module_name, name))
                if obj is None:
                    raise pickle.UnpicklingError(f"{module_name}.{name} is not allowed in a cache entry")
                return obj

        class PartPickler(Pickler):
            """One computation's instructions; a shape is a reference to the module's table (by
            index: `_shape_at(i)`, once per part, the pickle memo does the rest)."""

            def __init__(self, *args, table, index, **kwargs):
                super().__init__(*args, **kwargs)
                self.table, self.index = table, index

        class PartUnpickler(Unpickler):
            def __init__(self, *args, table, **kwargs):
                super().__init__(*args, **kwargs)
                self.table = table

            def find_class(self, module_name, name, _find=Unpickler.find_class):
                if (module_name, name) == (__name__, "_shape_at"):
                    return self.table.__getitem__
                return _find(self, module_name, name)

        self.fast_rows = fast_instruction
        self.Pickler = Pickler
        self.Unpickler = Unpickler
        self.PartPickler = PartPickler
        self.PartUnpickler = PartUnpickler

    @staticmethod
    def _fast_instruction_ok(Instruction, Loc, dataclasses) -> bool:
        fi, fl = dataclasses.fields(Instruction), dataclasses.fields(Loc)
        return (tuple(f.name for f in fi) == _INSTR_FIELDS and tuple(f.name for f in fl) == _LOC_FIELDS
                and all(f.init for f in fi + fl)
                and not hasattr(Instruction, "__post_init__") and not hasattr(Loc, "__post_init__"))

    @staticmethod
    def _dataclass_reducer(cls, dataclasses, raw_slots):
        fields = dataclasses.fields(cls)
        names = tuple(sys.intern(f.name) for f in fields)
        simple = all(f.init for f in fields) and not hasattr(cls, "__post_init__")
        if simple and len(names) == 1:
            def reduce_one(o, cls=cls, get=operator.attrgetter(names[0])):
                return cls, (get(o),)
            return reduce_one
        if simple:
            # the constructor, positionally: the fastest way back, and for a class without slots it
            # keeps the attributes in the object's inline values (no __dict__ object to create)
            def reduce_init(o, cls=cls, names=names):
                return cls, tuple([getattr(o, n) for n in names])
            return reduce_init
        if cls.__dictoffset__ == 0 or any("__slots__" in c.__dict__ for c in cls.__mro__[:-1]):
            raw_slots.add(cls)

            def reduce_slots(o, cls=cls, names=names):
                return _restore_slots, (cls, names, tuple([getattr(o, n) for n in names]))
            return reduce_slots
        cached = frozenset(n for c in cls.__mro__ for n, v in vars(c).items() if isinstance(v, cached_property))

        def reduce_dict(o, cls=cls, cached=cached):
            # values of cached properties are derived: they are recomputed on demand, not stored
            d = o.__dict__
            if cached and not cached.isdisjoint(d):
                d = {k: v for k, v in d.items() if k not in cached}
            return copyreg.__newobj__, (cls,), d or None
        return reduce_dict

    def _reduce_array(self, a):
        dt = a.dtype
        spec = self.dtype_names.get(dt)
        if spec is None:
            raise Unsupported(f"cannot cache an array of {dt}")
        return _mk_array, (spec, tuple(a.shape), bytearray(a.tobytes()))

    def dumps(self, module, lazy: bool = False) -> io.BytesIO:
        buf = io.BytesIO()
        p = self.Pickler(buf, _PICKLE_PROTOCOL)
        if lazy:
            # every computation's instructions first (they fill the shape table), then the module
            # with the table and the parts
            table: list = []
            index: dict = {}
            b = io.BytesIO()
            rows = self.rows if self.fast_rows else tuple
            spans: list[tuple[int, int]] = []
            place: dict[int, tuple[int, int]] = {}      # id(computation) -> (its chunk, its place in it)
            chunk: list = []
            size = 0
            for c in module.computations:
                instrs = c.instructions
                place[id(c)] = (len(spans), len(chunk))
                chunk.append(rows(instrs))
                size += len(instrs)
                if size >= CHUNK_INSTRUCTIONS or c is module.computations[-1]:
                    # every chunk a pickle of its own, one after the other in one buffer
                    start = b.tell()
                    pp = self.PartPickler(b, _PICKLE_PROTOCOL, table=table, index=index)
                    pp.canon = p.canon
                    pp.dump(chunk)
                    spans.append((start, b.tell()))
                    chunk, size = [], 0
            whole = b.getbuffer()
            holders = [[bytes(whole[start:end])] for start, end in spans]
            names = self.lazy_fields

            def reduce_computation(c):
                k, j = place[id(c)]
                return _mk_lazy_computation, (table, holders[k], j, *[getattr(c, n) for n in names])
            p.lazy_reduce = reduce_computation
        p.dump(module)
        return buf

    def rows(self, instructions) -> list:
        """An Instruction's fields as one plain tuple each (its Loc's inline): the stored form of a
        computation's instructions (see `_instructions_of_rows`)."""
        I = _Instruction
        for i in instructions:
            if type(i) is not I or type(i.loc) is not _Loc:
                raise Unsupported(f"cannot cache a {type(i).__qualname__} as an instruction")
        return [(i.name, i.opcode, i.shape, i.operands, i.attrs, i.literal, i.parameter_number,
                 (loc := i.loc).file, loc.line, loc.column, i.operand_shapes) for i in instructions]

    def reduce_computation(self, c):
        """A Computation of the eager form: its instructions as rows, its other fields as they are."""
        return _mk_computation, (self.rows(c.instructions), *[getattr(c, n) for n in self.lazy_fields])

    def loads_part(self, blob: bytes, table: list) -> list:
        """The instructions of each computation of a chunk (a tuple each)."""
        v = self.PartUnpickler(io.BytesIO(blob), table=table).load()
        if type(v) is not list:
            raise pickle.UnpicklingError(f"a chunk of instructions is a {type(v).__name__}")
        return [_instructions_of_rows(x) if type(x) is list else x for x in v]

    def loads(self, data: bytes, offset: int):
        f = io.BytesIO(data)
        f.seek(offset)
        return self.Unpickler(f).load()


_INSTR_FIELDS = ("name", "opcode", "shape", "operands", "attrs", "literal", "parameter_number", "loc",
                 "operand_shapes")
_LOC_FIELDS = ("file", "line", "column")
_intern = sys.intern


def _reduce_instruction(i, canon, text_values):
    """_mk_instr(...) with the Loc's fields inline; names, opcodes and attribute keys interned, and
    equal attribute values of the simple immutable kinds (see text_values, tuples of ints) shared."""
    loc = i.loc
    name = i.name
    opcode = i.opcode
    operands = i.operands
    attrs = i.attrs
    if type(name) is str:
        name = _intern(name)
    if type(opcode) is str:
        opcode = _intern(opcode)
    if type(operands) is tuple:
        operands = tuple([_intern(x) if type(x) is str else x for x in operands])
    if type(attrs) is dict and attrs:
        new = {}
        for k, v in attrs.items():
            if type(k) is str:
                k = _intern(k)
            t = type(v)
            field = text_values.get(t)
            if field is not None:
                text = getattr(v, field)
                if type(text) is str:
                    v = canon.setdefault((t, text), v)
            elif t is tuple and all(type(x) is int for x in v):
                v = canon.setdefault((tuple, v), v)
            new[k] = v
        attrs = new
    file = loc.file
    if type(file) is str:
        file = _intern(file)
    return _mk_instr, (name, opcode, i.shape, operands, attrs, i.literal, i.parameter_number,
                       file, loc.line, loc.column, i.operand_shapes)


_Instruction = None
_Loc = None


def _mk_instr(name, opcode, shape, operands, attrs, literal, parameter_number, file, line, column,
              operand_shapes):
    return _Instruction(name, opcode, shape, operands, attrs, literal, parameter_number,
                        _Loc(file, line, column), operand_shapes)


def _instructions_of_rows(rows) -> tuple:
    """The Instructions of the rows `_Codec.rows` made (a row of another length is an error of
    decoding: the entry is a miss)."""
    from .module import make_instruction
    try:
        return tuple(itertools.starmap(make_instruction, rows))
    except TypeError:
        raise pickle.UnpicklingError("malformed instruction rows") from None


def _mk_computation(rows, *values):
    codec = _codec()
    if type(rows) is not list or len(values) != len(codec.lazy_fields):
        raise pickle.UnpicklingError("malformed computation")
    fields = dict(zip(codec.lazy_fields, values))
    return codec.Computation(instructions=_instructions_of_rows(rows), **fields)


def _restore_slots(cls, names, values):
    if cls not in _codec().raw_slots:
        raise pickle.UnpicklingError(f"{cls.__qualname__} is not restored field by field")
    obj = object.__new__(cls)
    for n, v in zip(names, values):
        object.__setattr__(obj, n, v)
    return obj


def _mk_array(spec, shape, buf):
    codec = _codec()
    dt = codec.dtypes[spec]          # KeyError on a foreign spec: the entry is a miss
    a = codec.np.frombuffer(buf, dtype=dt) if buf else codec.np.zeros(0, dt)
    return a.reshape(shape)          # the size must match the bytes


def _make_lazy_class():
    from .module import Computation

    class LazyComputation(Computation):
        """A Computation read from the cache's lazy form: its instructions are decoded on the first
        read (under a lock: every reader gets the same objects).  Otherwise a Computation: same
        fields, same equality; copied or pickled (outside the cache) as a plain Computation."""

        @property
        def instructions(self):
            v = self.__dict__.get("_instructions")
            return v if v is not None else _decode_instructions(self)

        @instructions.setter
        def instructions(self, value):          # the dataclass __init__ (dataclasses.replace)
            self.__dict__["_instructions"] = value

        def __reduce__(self):
            return Computation, tuple([getattr(self, n) for n in _codec().computation_fields])

        def __copy__(self):
            cls, args = self.__reduce__()
            return cls(*args)

    LazyComputation.__module__ = __name__
    return LazyComputation


_LazyComputation: type | None = None


def _lazy_class() -> type:
    """LazyComputation, made on first use (this module is imported by commands that need no IR)."""
    global _LazyComputation
    if _LazyComputation is None:
        _LazyComputation = _make_lazy_class()
    return _LazyComputation


def __getattr__(name: str):
    if name == "LazyComputation":
        return _lazy_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_decode_lock = threading.Lock()


def _decode_instructions(c) -> tuple:
    with _decode_lock:
        d = c.__dict__
        v = d.get("_instructions")
        if v is None:
            holder = d["_chunk"]
            if type(holder[0]) is bytes:         # the first read of a computation of this chunk
                with NoGC(promote=True):
                    holder[0] = _codec().loads_part(holder[0], d["_table"])
            decoded, k = holder[0], d["_place"]
            v = decoded[k] if type(decoded) is list and 0 <= k < len(decoded) else None
            if type(v) is not tuple:
                raise pickle.UnpicklingError(f"the instructions of {d.get('name')} are a {type(v).__name__}")
            d["_instructions"] = v
            del d["_chunk"]
        return v


def _shape_at(i):
    """A shape of the module's table: only a computation's part refers to it (its unpickler reads the
    table); anywhere else the entry is malformed."""
    raise pickle.UnpicklingError("a shape reference outside a computation's part")


def _mk_lazy_computation(table, chunk, place, *values):
    """A LazyComputation whose instructions are the `place`-th of the chunk `chunk` (a one-item list,
    shared by the computations of the chunk, that holds its pickle until the first read)."""
    codec = _codec()
    if type(table) is not list or type(chunk) is not list or len(chunk) != 1 or type(place) is not int \
            or len(values) != len(codec.lazy_fields):
        raise pickle.UnpicklingError("malformed computation")
    c = object.__new__(codec.LazyComputation)
    d = c.__dict__
    d.update(zip(codec.lazy_fields, values))
    d["_table"] = table
    d["_chunk"] = chunk
    d["_place"] = place
    return c


_the_codec: _Codec | None = None


def _codec() -> _Codec:
    global _the_codec, _Instruction, _Loc
    if _the_codec is None:
        from .module import Instruction, Loc
        _Instruction, _Loc = Instruction, Loc
        _the_codec = _Codec()
    return _the_codec


def serialize_module(module) -> bytes:
    """The module in the cache's compact form (no header): fast to load with deserialize_module."""
    with NoGC():
        return _codec().dumps(module).getvalue()


def deserialize_module(data: bytes):
    """The inverse of serialize_module."""
    with NoGC(promote=True):
        return _codec().loads(data, 0)


def dump(module) -> io.BytesIO:
    """The cache's form (lazy per computation) in a buffer (its getbuffer() is written without a
    copy)."""
    return _codec().dumps(module, lazy=True)


def load(data, offset: int = 0):
    """The Module stored at OFFSET of DATA.  Raises pickle.UnpicklingError (or another exception of
    decoding) for anything else, and TypeError when it holds something that is not a Module."""
    codec = _codec()
    obj = codec.loads(data, offset)
    if type(obj) is not codec.Module:
        raise TypeError(f"holds a {type(obj).__name__}, not a Module")
    return obj
