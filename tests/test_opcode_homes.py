"""The opcode table is the index of every opcode's homes: each opcode of hlo_cli/ir/opcodes.py has
exactly one shape rule (hlo_cli/shapes) and one evaluation rule (hlo_cli/interpreter), and these
tests say where each lives."""
import pytest

import hlo_cli.interpreter  # noqa: F401  (registers every evaluation rule)
from hlo_cli.interpreter.registry import EVAL_RULES, rule_for
from hlo_cli.ir.opcodes import OPCODES, async_generic
from hlo_cli.shapes import RULES
from hlo_cli.shapes.registry import home, rule_of


def _eval_home(opcode):
    fn = rule_for(opcode)
    return None if fn is None else getattr(fn, "__wrapped__", fn).__module__


@pytest.mark.parametrize("opcode", sorted(OPCODES))
def test_every_opcode_has_one_shape_rule_and_one_evaluation_rule(opcode):
    shape_home, eval_home = home(opcode), _eval_home(opcode)
    where = f"shape rule: {shape_home or 'MISSING'}; evaluation rule: {eval_home or 'MISSING'}"
    assert opcode in RULES, f"{opcode}: no shape rule registered under its own name ({where})"
    assert opcode in EVAL_RULES, f"{opcode}: no evaluation rule registered under its own name ({where})"
    assert shape_home is not None and shape_home.startswith("hlo_cli.shapes.families."), \
        f"{opcode}: the shape rule must live in a module of hlo_cli/shapes/families ({where})"
    assert eval_home is not None and eval_home.startswith("hlo_cli.interpreter."), \
        f"{opcode}: the evaluation rule must live in hlo_cli/interpreter ({where})"


def test_no_rule_for_a_name_outside_the_opcode_table():
    assert not set(RULES) - set(OPCODES), f"shape rules for unknown opcodes: {sorted(set(RULES) - set(OPCODES))}"
    assert not set(EVAL_RULES) - set(OPCODES), \
        f"evaluation rules for unknown opcodes: {sorted(set(EVAL_RULES) - set(OPCODES))}"


def test_home_names_the_module_that_defines_the_rule():
    # rules registered through a family decorator are found by the function they wrap
    assert home("add") == "hlo_cli.shapes.families.elementwise"
    assert home("dot") == "hlo_cli.shapes.families.linalg"
    assert home("all-reduce") == "hlo_cli.shapes.families.collective"
    assert home("no-such-op") is None and rule_of("no-such-op") is None


def test_async_sugar_takes_the_generic_async_rules():
    assert async_generic("negate-start") == "async-start"
    assert async_generic("custom-call-update") == "async-update"
    assert async_generic("fusion-done") == "async-done"
    # real opcodes and unknown bases are not sugar
    assert async_generic("all-reduce-start") is None and async_generic("copy-done") is None
    assert async_generic("no-such-op-start") is None
    assert rule_of("negate-start") is RULES["async-start"]
    assert home("negate-done") == home("async-done")
    assert rule_for("negate-start") is rule_for("async-start")
