"""Where the grammar is: no heavy imports, so that the parse cache can fingerprint the grammar
without loading Lark or the parser."""
from __future__ import annotations

from pathlib import Path


def grammar_path() -> Path:
    """The grammar shipped inside the wheel, or the repository's grammar/ in a source checkout."""
    pkg = Path(__file__).resolve().parent.parent
    for cand in (pkg / "grammar" / "hlo.lark", pkg.parent / "grammar" / "hlo.lark"):
        if cand.is_file():
            return cand
    raise FileNotFoundError("grammar/hlo.lark is missing from the installation")
