"""ir/module.py `make_instruction` (the parser's and the cache's way to make an Instruction) must make
exactly what Instruction(...) makes: the same class, fields, location, equality, and a frozen object."""
from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest

from hlo_cli.ir.module import Instruction, Loc, make_instruction
from hlo_cli.ir.shape import Shape


def _fields(i):
    return [getattr(i, f.name) for f in dataclasses.fields(Instruction)]


def test_the_same_instruction_as_the_constructor():
    shape = Shape.tuple_of([])
    args = ("a.1", "add", shape, ("x", "y"), {"k": 1}, None, 3)
    made = make_instruction(*args, "f.hlo", 7, 9, (None, shape))
    built = Instruction(*args, Loc("f.hlo", 7, 9), (None, shape))
    assert type(made) is Instruction and type(made.loc) is Loc
    assert _fields(made) == _fields(built) and made == built
    assert (made.loc.file, made.loc.line, made.loc.column) == ("f.hlo", 7, 9) and str(made.loc) == "f.hlo:7:9"
    assert made.attrs is args[4] and made.operands is args[3]


def test_it_stays_frozen_and_copies_like_an_instruction():
    made = make_instruction("a", "negate", None, ("x",), {}, None, None, "f", 1, 2, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.name = "b"
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.loc.line = 3
    for other in (copy.copy(made), copy.deepcopy(made), pickle.loads(pickle.dumps(made)),
                  dataclasses.replace(made, name="a")):
        assert type(other) is Instruction and other == made and other.loc == made.loc
    assert dataclasses.replace(made, name="b").name == "b"
    with pytest.raises(TypeError):
        hash(made)
