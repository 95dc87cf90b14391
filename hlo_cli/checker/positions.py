"""Finer source positions for diagnostics, recovered from the text.

The IR records where each instruction starts (its name, or the opcode of a nested instruction) and
where each computation starts.  A good diagnostic points at the token that is wrong: the opcode
whose rule failed, the operand the rule names, the declared result shape, the computation
signature's result.  This module finds those tokens by scanning the source from the recorded
start, skipping comments and strings; when the text does not look as expected it returns None and
the caller keeps the recorded position.
"""
from __future__ import annotations

import bisect
import re

_OPCODE = re.compile(r"[a-z][a-z0-9-]*(?=\s*\()")
_NAME = re.compile(r"%?[A-Za-z_][A-Za-z0-9_.\-]*:?")
_OPEN = "([{"
_CLOSE = ")]}"


class SourceIndex:
    """Maps (line, column) <-> offsets of one source text and finds tokens of instructions."""

    def __init__(self, text: str):
        self.text = text
        self._starts: list[int] | None = None

    @property
    def starts(self) -> list[int]:
        """The offset of each line's start: found on the first question (a clean module asks none)."""
        if self._starts is None:
            self._starts = [0] + [m.end() for m in re.finditer("\n", self.text)]
        return self._starts

    # -- offsets ----------------------------------------------------------------------------
    def offset(self, line: int, column: int) -> int | None:
        if line <= 0 or line > len(self.starts) or column <= 0:
            return None
        off = self.starts[line - 1] + column - 1
        return off if off <= len(self.text) else None

    def position(self, offset: int) -> tuple[int, int]:
        k = bisect.bisect_right(self.starts, offset) - 1
        return k + 1, offset - self.starts[k] + 1

    def line_text(self, line: int) -> str | None:
        if line <= 0 or line > len(self.starts):
            return None
        end = self.starts[line] - 1 if line < len(self.starts) else len(self.text)
        return self.text[self.starts[line - 1]:end].rstrip("\r")

    # -- scanning ---------------------------------------------------------------------------
    def skip_space(self, i: int) -> int:
        """Skip whitespace and comments from offset i."""
        t, n = self.text, len(self.text)
        while i < n:
            c = t[i]
            if c.isspace():
                i += 1
            elif t.startswith("//", i):
                j = t.find("\n", i)
                i = n if j < 0 else j + 1
            elif t.startswith("/*", i):
                j = t.find("*/", i + 2)
                i = n if j < 0 else j + 2
            else:
                break
        return i

    def skip_string(self, i: int) -> int:
        """i is at a quote: the offset after the closing quote."""
        t, n, q = self.text, len(self.text), self.text[i]
        i += 1
        while i < n:
            if t[i] == "\\":
                i += 2
                continue
            if t[i] == q:
                return i + 1
            i += 1
        return n

    def skip_group(self, i: int) -> int:
        """i is at an opening bracket: the offset after its matching closing bracket."""
        t, n = self.text, len(self.text)
        depth = 0
        while i < n:
            c = t[i]
            if c in "\"'":
                i = self.skip_string(i)
                continue
            if t.startswith("/*", i) or t.startswith("//", i):
                i = self.skip_space(i)
                continue
            if c in _OPEN:
                depth += 1
            elif c in _CLOSE:
                depth -= 1
                if depth == 0:
                    return i + 1
            i += 1
        return n

    def skip_shape(self, i: int) -> int | None:
        """i is at a shape (array, tuple or buffer): the offset after it, or None."""
        t = self.text
        if i >= len(t):
            return None
        if t[i] == "(":
            return self.skip_group(i)
        m = re.compile(r"[a-z][a-z0-9]*").match(t, i)
        if m is None:
            return None
        j = m.end()
        if j < len(t) and t[j] == "(" and m.group(0) == "b":      # buffer b(f32[4])
            return self.skip_group(j)
        if j >= len(t) or t[j] != "[":
            return None
        j = self.skip_group(j)
        if j < len(t) and t[j] in "{<":
            if t[j] == "{":
                j = self.skip_group(j)
            else:
                k = t.find(">", j)
                j = len(t) if k < 0 else k + 1
        return j

    def instruction_tokens(self, line: int, column: int, opcode: str):
        """(declared-shape offset or None, opcode offset, '(' offset) of the instruction whose
        recorded start is line:column, or None when the text does not match."""
        i = self.offset(line, column)
        if i is None:
            return None
        t = self.text
        # a nested instruction is recorded at its opcode, or at its shape
        if t.startswith(opcode, i) and self._is_call(i + len(opcode)):
            return None, i, self.skip_space(i + len(opcode))
        end = self.skip_shape(i)
        if end is not None:
            j = self.skip_space(end)
            if t.startswith(opcode, j) and self._is_call(j + len(opcode)):
                return i, j, self.skip_space(j + len(opcode))
        # a top-level instruction: [ROOT] name = [shape] opcode(
        j = self._after_name(i, "=")
        if j is None:
            return None
        j = self.skip_space(j + 1)
        shape_at = None
        if not (t.startswith(opcode, j) and self._is_call(j + len(opcode))):
            end = self.skip_shape(j)
            if end is None:
                return None
            shape_at, j = j, self.skip_space(end)
        if not t.startswith(opcode, j):
            return None
        k = self.skip_space(j + len(opcode))
        if k >= len(t) or t[k] != "(":
            return None
        return shape_at, j, k

    def _after_name(self, i: int, char: str) -> int | None:
        """The offset of `char` when a name starts at i and `char` follows it (after spaces), else None."""
        m = _NAME.match(self.text, i)
        if m is None:
            return None
        j = self.skip_space(m.end())
        return j if j < len(self.text) and self.text[j] == char else None

    def _is_call(self, j: int) -> bool:
        k = self.skip_space(j)
        return k < len(self.text) and self.text[k] == "("

    def operand_offsets(self, paren: int) -> list[int]:
        """Offsets of the operands inside the parenthesized list that opens at `paren`."""
        t, n = self.text, len(self.text)
        out = []
        i = self.skip_space(paren + 1)
        if i < n and t[i] == ")":
            return out
        out.append(i)
        while i < n:
            c = t[i]
            if c in "\"'":
                i = self.skip_string(i)
            elif t.startswith("/*", i) or t.startswith("//", i):
                i = self.skip_space(i)
            elif c in _OPEN:
                i = self.skip_group(i)
            elif c == ")":
                break
            elif c == ",":
                i = self.skip_space(i + 1)
                if i < n and t[i] != ")":
                    out.append(i)
            else:
                i += 1
        return out

    def attribute_offset(self, paren: int, name: str) -> int | None:
        """The offset of `name=` among the attributes after the operand list that opens at
        `paren` (up to the end of the instruction's line), or None."""
        t, n = self.text, len(self.text)
        if paren >= n or t[paren] != "(":
            return None
        i = self.skip_group(paren)
        want = re.compile(re.escape(name) + r"\s*=")
        while i < n:
            c = t[i]
            if c == "\n":
                return None
            if c in "\"'":
                i = self.skip_string(i)
            elif t.startswith("/*", i) or t.startswith("//", i):
                if t.startswith("//", i):
                    return None
                i = self.skip_space(i)
            elif c in _OPEN:
                i = self.skip_group(i)
            elif want.match(t, i) and (i == 0 or not (t[i - 1].isalnum() or t[i - 1] in "_-.")):
                return i
            else:
                i += 1
        return None

    def signature_offsets(self, line: int, column: int):
        """(offsets of the signature's parameters, offset of its result shape) of the computation
        recorded at line:column, or None if it has no signature."""
        i = self.offset(line, column)
        if i is None:
            return None
        t = self.text
        if t.startswith("ENTRY", i):
            i = self.skip_space(i + 5)
        j = self._after_name(i, "(")
        if j is None:
            return None
        params = self.operand_offsets(j)
        k = self.skip_space(self.skip_group(j))
        if not t.startswith("->", k):
            return params, None
        return params, self.skip_space(k + 2)
