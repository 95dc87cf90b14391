"""Shape inference: XLA's shape rules, one pure rule per opcode, grouped by family.

Importing this package registers every rule (each family module registers its own).
"""
from .registry import RULES, RuleContext, ShapeRuleError, fail, infer_shape, rule, shapes_text

# family modules register their rules on import
from . import families  # noqa: F401,E402  (registers the rules)

__all__ = ["RULES", "RuleContext", "ShapeRuleError", "fail", "infer_shape", "rule", "shapes_text"]
