"""What a source file holds: its modules (ModuleSource, each with the file's positions) and the file
read and split (FileModules), with the choice of one module (``--module N|NAME``)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import Diagnostic, HloInputError
from .split import LIT, SAVED_GRAPHS, Region, SkippedGraph, module_text


@dataclass(frozen=True)
class ModuleSource:
    """One module of a file: what the parser reads (`text`, with the file's positions) and where it
    came from; a module proto's source holds its IR already (`module`) and the IR printer's text."""
    file: str                # the file's display name ('<stdin>' for standard input)
    index: int               # 0-based position among the file's modules
    count: int               # how many modules the file holds
    region: Region
    file_text: str
    module: object = field(default=None, compare=False, repr=False)   # the IR, for a proto decoded into it

    @property
    def name(self) -> str | None:
        """The name on its `HloModule` line (None without a header)."""
        return self.region.name

    @property
    def line(self) -> int:
        return self.region.line

    @property
    def text(self) -> str:
        return module_text(self.file_text, self.region)

    @property
    def own_text(self) -> str:
        """The module's own part of the file (without the blanked lines before it)."""
        return self.file_text[self.region.start:self.region.end]

    @property
    def label(self) -> str:
        """How to name it in tables: the file, and which of its modules when it holds several."""
        if self.count == 1:
            return self.file
        return f"{self.file} #{self.index}" + (f" {self.name}" if self.name else "")

    def describe(self) -> str:
        return f"#{self.index} {self.name or '(no HloModule line)'} (line {self.line})"


@dataclass(frozen=True)
class FileModules:
    """A file read and split into its modules."""
    file: str
    text: str
    layout: str                          # split.SINGLE, LIT, SAVED_GRAPHS or CONCATENATED
    modules: tuple[ModuleSource, ...]
    skipped: tuple[SkippedGraph, ...]    # saved graphs that are not HLO text
    file_size: int | None = None         # the file's bytes when `text` is not them (a proto's printed text)

    @property
    def size(self) -> int:
        if self.file_size is not None:
            return self.file_size
        return len(self.text.encode("utf-8", "replace"))

    def select(self, which: str | None, option: str = "--module") -> ModuleSource:
        """The module `which` names (a 0-based index or a module name); None asks for the only one;
        OPTION is how messages name the choice (hlo diff: --module-a, --module-b)."""
        mods = self.modules
        if which is None:
            if len(mods) == 1:
                return mods[0]
            raise input_error(f"holds {len(mods)} HLO modules; choose one with {option} N (0-based) or "
                               f"{option} NAME:\n{self.listing()}", self.file, "E081")
        w = which.strip()
        if re.fullmatch(r"[+-]?\d+", w):
            k = int(w)
            if 0 <= k < len(mods):
                return mods[k]
            if not any(m.name == w for m in mods):
                raise input_error(f"{option} {which}: no module #{k}; this file holds {len(mods)} "
                                   f"module{'s' if len(mods) != 1 else ''} (0-based):\n{self.listing()}",
                                   self.file, "E082")
        named = [m for m in mods if m.name == w]
        if len(named) == 1:
            return named[0]
        if len(named) > 1:
            raise input_error(f"{option} {which}: {len(named)} modules have this name; choose one by its "
                               f"number:\n{self.listing()}", self.file, "E082")
        raise input_error(f"{option} {which}: no module of this name; this file holds:\n{self.listing()}",
                           self.file, "E082")

    def listing(self) -> str:
        return "\n".join("  " + m.describe() for m in self.modules)

    def separator(self) -> tuple[str, str, str]:
        """(before each module, between two modules, after the last) to print modules back the way
        they came: `// -----` between lit-test modules, BEGIN/END_GRAPH around saved graphs."""
        if self.layout == SAVED_GRAPHS:
            return "## BEGIN_GRAPH\n", "## END_GRAPH\n\n## BEGIN_GRAPH\n", "## END_GRAPH\n"
        if self.layout == LIT:
            return "", "\n// -----\n\n", ""
        return "", "\n", ""


def input_error(message: str, file: str, code: str) -> HloInputError:
    """HloInputError about FILE (exit 2) with its diagnostic code."""
    return HloInputError(f"{file}: {message}", [Diagnostic(message, file, code=code)])
