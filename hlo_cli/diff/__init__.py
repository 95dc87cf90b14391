"""`hlo diff`: run two modules on the same inputs and compare every value, not only the results.

    from hlo_cli.diff import diff_modules, format_text
    report = diff_modules(module_a, module_b, args, rtol=1e-3, atol=1e-3)
    report.verdict            # "agree" | "differ" (the results)
    report.to_json()          # the documented dictionary (see DiffReport.to_json)
    print(format_text(report))

Matching (matching.py): same name, else the same metadata (op_name and source line), else
structure over matched operands; fused computations through their fusion instructions; copies,
reshapes and bitcasts that keep the elements' order are their operands (compared after a reshape).
Running (core.py): A first, keeping the values B's matched instructions need; then B, comparing each
as it is produced (A's values spill to a temporary directory beyond a memory budget).
"""
from __future__ import annotations

from .core import DiffReport, PairState, check_parameters, diff_modules
from .matching import Match, Matching, ModuleIndex, match_modules
from .text import format_text

__all__ = ["diff_modules", "DiffReport", "PairState", "format_text", "match_modules", "Matching", "Match",
           "ModuleIndex", "check_parameters"]
