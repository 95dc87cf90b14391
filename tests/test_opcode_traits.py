"""The opcode table's traits: the facts other layers ask instead of keeping their own sets."""
import pytest

from hlo_cli.ir import opcodes as oc
from hlo_cli.ir.opcodes import (ASYNC, CALLS, COLLECTIVE, ELEMENTWISE, READS_RNG, SIDE_EFFECT, has_side_effect,
                                has_trait, with_trait)


class _Inst:
    def __init__(self, opcode, **attrs):
        self.opcode, self.attrs = opcode, attrs


def test_every_trait_names_known_opcodes_and_every_opcode_has_a_trait_set():
    assert set(oc.TRAITS) == set(oc.OPCODES)
    for trait in (SIDE_EFFECT, READS_RNG, ELEMENTWISE, CALLS, COLLECTIVE, ASYNC):
        assert with_trait(trait) <= set(oc.OPCODES)


@pytest.mark.parametrize("opcode", ["rng", "rng-get-and-update-state", "infeed", "outfeed", "send", "recv-done",
                                    "all-reduce-start", "collective-permute-done"])
def test_xla_side_effecting_opcodes(opcode):
    # XLA's HloInstruction::HasSideEffectNoRecurse lists these (xla/hlo/ir/hlo_instruction.cc)
    assert has_trait(opcode, SIDE_EFFECT) and has_side_effect(_Inst(opcode))


def test_instruction_level_side_effects():
    assert not has_side_effect(_Inst("custom-call"))
    assert has_side_effect(_Inst("custom-call", custom_call_has_side_effect=True))
    assert not has_side_effect(_Inst("all-reduce"))
    assert has_side_effect(_Inst("all-reduce", constrain_layout=True))
    assert not has_side_effect(_Inst("add"))


def test_rng_is_both_side_effecting_and_random():
    assert has_trait("rng", READS_RNG) and not has_trait("rng-bit-generator", READS_RNG)


def test_elementwise_and_unknown():
    assert has_trait("add", ELEMENTWISE) and has_trait("select", ELEMENTWISE) and has_trait("compare", ELEMENTWISE)
    assert not has_trait("dot", ELEMENTWISE) and not has_trait("no-such-op", ELEMENTWISE)
    assert with_trait(ELEMENTWISE, COLLECTIVE) == with_trait(ELEMENTWISE) | with_trait(COLLECTIVE)


def test_computation_attributes_follow_the_table():
    assert oc.computation_attributes("while") == ("condition", "body")
    assert oc.computation_attributes("conditional") == ("true_computation", "false_computation",
                                                        "branch_computations")
    assert oc.computation_attributes("call") == ("to_apply",)
    assert oc.computation_attributes("add") == () and oc.computation_attributes("no-such-op") == ()
    # every opcode said to call computations names them in an attribute
    assert all(oc.computation_attributes(op) for op in with_trait(CALLS))


def test_registrar_files_rules_and_refuses_a_second_one():
    table = {}
    register = oc.registrar(table, "test rules")

    @register("add", "subtract")
    def rule(*args):
        return args
    assert table == {"add": rule, "subtract": rule}
    with pytest.raises(RuntimeError, match="two test rules for add"):
        register("add")(lambda: None)


def test_with_attribute_reads_the_rows():
    assert oc.with_attribute("source_target_pairs") == {"collective-permute", "collective-permute-start"}
    assert oc.with_attribute("use_global_device_ids") == {"all-reduce", "all-reduce-start", "all-gather",
                                                          "all-gather-start", "reduce-scatter"}
    assert oc.with_attribute("no_such_attribute") == frozenset()
