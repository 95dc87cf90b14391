"""The IR: frozen dataclasses for modules, computations and instructions.

No parser objects live here: every attribute value is already decoded into a
typed value (see attributes.py), every instruction carries its source location.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Mapping

from .attributes import ComputationRef as _ComputationRef
from .shape import Shape


@dataclass(frozen=True, slots=True)
class Loc:
    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


NO_LOC = Loc("<unknown>", 0, 0)


def _slot_setters(cls, names: tuple[str, ...]) -> tuple:
    """The slot descriptors' setters of the frozen slotted dataclass `cls`, whose fields must be
    `names` in order.  Its __init__ below stores the fields through them: the generated one calls
    object.__setattr__ per field, which costs most of the making of an IR object (a large module
    makes hundreds of thousands).  tests/ir/test_fast_init.py checks the defaults are the fields'."""
    from dataclasses import fields
    assert tuple(f.name for f in fields(cls)) == names, (cls, names)
    return tuple(getattr(cls, n).__set__ for n in names)


def _loc_init(self, file, line, column, _set=_slot_setters(Loc, ("file", "line", "column"))):
    _set[0](self, file)
    _set[1](self, line)
    _set[2](self, column)


Loc.__init__ = _loc_init


def frozen_map(d: Mapping | None = None) -> dict:
    """Attribute maps are plain dicts (picklable, fast); treat them as read-only."""
    return dict(d or {})


@dataclass(frozen=True, slots=True)
class Instruction:
    name: str
    opcode: str
    shape: Shape
    operands: tuple[str, ...] = ()
    attrs: Mapping[str, Any] = field(default_factory=frozen_map)
    # `constant(...)` holds a Literal, `parameter(N)` its number; None otherwise.
    literal: Any = None
    parameter_number: int | None = None
    loc: Loc = field(default=NO_LOC, compare=False)
    # Per-operand inline shapes as written (`add(f32[4] %x, ...)`), kept for faithful printing.
    operand_shapes: tuple[Shape | None, ...] | None = field(default=None, compare=False)

    def __eq__(self, other):  # MappingProxyType does not compare by value
        if not isinstance(other, Instruction):
            return NotImplemented
        return (self.name, self.opcode, self.shape, self.operands, dict(self.attrs),
                self.literal, self.parameter_number) == (
            other.name, other.opcode, other.shape, other.operands, dict(other.attrs),
            other.literal, other.parameter_number)

    __hash__ = None  # type: ignore[assignment]

    def attr(self, name: str, default=None):
        return self.attrs.get(name, default)

    @property
    def called_computations(self) -> tuple[str, ...]:
        """Names of the computations this instruction calls, in attribute order."""
        out: tuple[str, ...] = ()
        for v in self.attrs.values():
            if isinstance(v, _ComputationRef):
                out += (v.name,)
            elif isinstance(v, tuple) and v and isinstance(v[0], _ComputationRef):
                out += tuple(c.name for c in v)
        return out


_NO_ATTRS = object()


def _instruction_init(self, name, opcode, shape, operands=(), attrs=_NO_ATTRS, literal=None, parameter_number=None,
                      loc=NO_LOC, operand_shapes=None,
                      _set=_slot_setters(Instruction, ("name", "opcode", "shape", "operands", "attrs", "literal",
                                                       "parameter_number", "loc", "operand_shapes"))):
    _set[0](self, name)
    _set[1](self, opcode)
    _set[2](self, shape)
    _set[3](self, operands)
    _set[4](self, frozen_map() if attrs is _NO_ATTRS else attrs)
    _set[5](self, literal)
    _set[6](self, parameter_number)
    _set[7](self, loc)
    _set[8](self, operand_shapes)


Instruction.__init__ = _instruction_init


def _fill_class(cls) -> type:
    """A plain class with the slots of the frozen slotted dataclass `cls`, in the same order: the same
    layout, so that an object of it, its slots filled, may be given `cls` as its class."""
    return type(f"_{cls.__name__}Fill", (), {"__slots__": cls.__slots__})


_LocFill, _InstructionFill = _fill_class(Loc), _fill_class(Instruction)


def make_instruction(name, opcode, shape, operands, attrs, literal, parameter_number, file, line, column,
                     operand_shapes, _new=object.__new__, _IF=_InstructionFill, _LF=_LocFill, _I=Instruction,
                     _L=Loc) -> Instruction:
    """Instruction(name, opcode, shape, operands, attrs, literal, parameter_number, Loc(file, line,
    column), operand_shapes), made in half the time: the parser and the cache make one per
    instruction of a module, and an __init__ storing frozen slots calls a setter per field; here the
    slots are stored plainly in an object of the same layout (`_fill_class`) which then becomes an
    Instruction (tests/ir/test_make_instruction.py compares the two field by field)."""
    loc = _new(_LF)
    loc.file = file
    loc.line = line
    loc.column = column
    loc.__class__ = _L
    inst = _new(_IF)
    inst.name = name
    inst.opcode = opcode
    inst.shape = shape
    inst.operands = operands
    inst.attrs = attrs
    inst.literal = literal
    inst.parameter_number = parameter_number
    inst.loc = loc
    inst.operand_shapes = operand_shapes
    inst.__class__ = _I
    return inst


@dataclass(frozen=True)
class Computation:
    name: str
    instructions: tuple[Instruction, ...]
    root: str                          # name of the root instruction
    is_entry: bool = False
    params: tuple[tuple[str, Shape], ...] | None = None   # the signature as written, if any
    result_shape: Shape | None = None
    execution_thread: str | None = None
    root_explicit: bool = True         # ROOT was written (else: the last instruction)
    loc: Loc = field(default=NO_LOC, compare=False)

    def __eq__(self, other):
        if not isinstance(other, Computation):
            return NotImplemented
        return (self.name, self.instructions, self.root, self.is_entry, self.execution_thread) == (
            other.name, other.instructions, other.root, other.is_entry, other.execution_thread)

    __hash__ = None  # type: ignore[assignment]

    @property
    def root_instruction(self) -> Instruction:
        return self.by_name[self.root]

    @cached_property
    def by_name(self) -> dict[str, Instruction]:
        return {i.name: i for i in self.instructions}

    @property
    def parameters(self) -> list[Instruction]:
        ps = [i for i in self.instructions if i.opcode == "parameter"]
        return sorted(ps, key=lambda i: i.parameter_number)

    @property
    def program_shape(self) -> tuple[list[Shape], Shape]:
        return [p.shape for p in self.parameters], self.root_instruction.shape


@dataclass(frozen=True, slots=True)
class FileLocation:
    file_name_id: int
    function_name_id: int
    line: int
    end_line: int = 0
    column: int = 0
    end_column: int = 0


@dataclass(frozen=True, slots=True)
class StackFrame:
    file_location_id: int
    parent_frame_id: int


@dataclass(frozen=True, slots=True)
class StackFrames:
    """The FileNames / FunctionNames / FileLocations / StackFrames sections of a dump."""
    file_names: Mapping[int, str] = field(default_factory=frozen_map)
    function_names: Mapping[int, str] = field(default_factory=frozen_map)
    file_locations: Mapping[int, FileLocation] = field(default_factory=frozen_map)
    frames: Mapping[int, StackFrame] = field(default_factory=frozen_map)

    def __eq__(self, other):
        if not isinstance(other, StackFrames):
            return NotImplemented
        return all(dict(getattr(self, f)) == dict(getattr(other, f))
                   for f in ("file_names", "function_names", "file_locations", "frames"))

    __hash__ = None  # type: ignore[assignment]

    def __bool__(self) -> bool:
        return bool(self.file_names or self.function_names or self.file_locations or self.frames)

    def resolve(self, frame_id: int) -> list[tuple[str, str, int, int]]:
        """The call stack of a frame, innermost first: (file, function, line, column)."""
        out, seen = [], set()
        while frame_id in self.frames and frame_id not in seen:
            seen.add(frame_id)
            fr = self.frames[frame_id]
            loc = self.file_locations.get(fr.file_location_id)
            if loc is not None:
                out.append((self.file_names.get(loc.file_name_id, "?"),
                            self.function_names.get(loc.function_name_id, "?"),
                            loc.line, loc.column))
            if fr.parent_frame_id == frame_id or fr.parent_frame_id == 0:
                break
            frame_id = fr.parent_frame_id
        return out


@dataclass(frozen=True)
class Module:
    name: str
    computations: tuple[Computation, ...]
    entry: str                                     # name of the entry computation
    attrs: Mapping[str, Any] = field(default_factory=frozen_map)   # header attributes
    stack_frames: StackFrames = field(default_factory=StackFrames)
    has_header: bool = True
    source: str = field(default="<string>", compare=False)

    def __eq__(self, other):
        if not isinstance(other, Module):
            return NotImplemented
        return (self.name, self.computations, self.entry, dict(self.attrs), self.stack_frames) == (
            other.name, other.computations, other.entry, dict(other.attrs), other.stack_frames)

    __hash__ = None  # type: ignore[assignment]

    @cached_property
    def computation_map(self) -> dict[str, Computation]:
        return {c.name: c for c in self.computations}

    @property
    def entry_computation(self) -> Computation:
        for c in self.computations:
            if c.name == self.entry:
                return c
        raise KeyError(self.entry)

    def instructions(self):
        for c in self.computations:
            yield from ((c, i) for i in c.instructions)
