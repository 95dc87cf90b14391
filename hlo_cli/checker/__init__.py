"""The verifier: structural checks, then "infer each instruction's shape and compare it with the
declared one", layout rules, and warnings for legal-but-suspicious things.

`check_module(module)` returns every finding as a Diagnostic (errors and warnings), sorted by
position; it never raises for a problem of the module.
"""
from .verify import CODES, check_module

__all__ = ["check_module", "CODES"]
