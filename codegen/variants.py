"""One text for a kernel's two loops: the fast loop and the exact loop differ in a few statements.

The fast loop (codegen.fastpath) and the exact loop run the same nests; they differ where the
fast loop leaves out a clamp or runs a cheaper form of an op, counts its checks, or streams its
outputs. `one_body` writes the nests once, with those statements under `if exact:` / `if not
exact:`, for a function the kernel calls twice with a constant `exact` (`inline='always'`):
numba inlines both calls and drops the branch a constant never takes before it makes loops or
threads of them, so each call compiles to the loop it would be on its own.

The two texts are compared statement by statement, a statement with its continuation lines as
one, so that whatever differs is whole statements: a block both open alike is compared within,
anything else that differs goes under the `if`, wrapped again where the deeper indentation
takes it past LINE_LIMIT.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass

from .writer import INDENT, LINE_LIMIT, fit


@dataclass(frozen=True)
class Statement:
    """A statement's lines (its first line and continuation lines, or a comment line) and, if
    it opens a block, the block's statements."""
    lines: tuple[str, ...]
    block: tuple[Statement, ...] = ()

    @property
    def code(self) -> bool:
        return not self.lines[0].lstrip().startswith("#")

    @property
    def pad(self) -> str:
        return _pad(self.lines[0])

    def text(self) -> list[str]:
        return [*self.lines, *(line for s in self.block for line in s.text())]

    def deeper(self, margin: int) -> list[str]:
        """The statement one INDENT deeper, each statement of it that the INDENT takes past
        LINE_LIMIT `margin` columns in wrapped again where that fits (codegen.writer.fit)."""
        lines = [INDENT + line for line in self.lines]
        if any(margin + len(line) > LINE_LIMIT for line in lines):
            indent = INDENT + self.pad
            width = LINE_LIMIT - margin - len(indent)
            wrapped = fit([line[len(self.pad):] for line in self.lines], width)
            if all(len(line) <= width for line in wrapped):
                lines = [indent + line for line in wrapped]
        return [*lines, *(line for s in self.block for line in s.deeper(margin))]


def one_body(exact: list[str], fast: list[str], indent: int = 1) -> list[str]:
    """The lines of both, each difference under `if exact:` (and `else:`) or `if not exact:`,
    within LINE_LIMIT `indent` levels in."""
    return _merged(statements(exact), statements(fast), len(INDENT) * indent)


def statements(lines: list[str]) -> tuple[Statement, ...]:
    """`lines` as statements: a line and the lines that close its brackets, with the deeper
    lines after it as its block if it ends with `:`; a comment line alone."""
    result: list[Statement] = []
    k = 0
    while k < len(lines):
        first, k = k, k + 1
        if lines[first].lstrip().startswith("#"):
            result.append(Statement((lines[first],)))
            continue
        depth = _depth(lines[first])
        while depth > 0 and k < len(lines):
            depth += _depth(lines[k])
            k += 1
        head = tuple(lines[first:k])
        if not head[-1].endswith(":"):
            result.append(Statement(head))
            continue
        end = k
        while end < len(lines) and len(_pad(lines[end])) > len(_pad(lines[first])):
            end += 1
        result.append(Statement(head, statements(lines[k:end])))
        k = end
    return tuple(result)


def _merged(exact: tuple[Statement, ...], fast: tuple[Statement, ...], margin: int) -> list[str]:
    """Statements both have once (a block both open alike, merged within), the others as
    `_branches`. Comments only one side has: the exact loop's."""
    lines: list[str] = []
    matcher = difflib.SequenceMatcher(a=[s.lines for s in exact], b=[s.lines for s in fast],
                                      autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        ours, theirs = exact[i1:i2], fast[j1:j2]
        if tag == "equal":
            for mine, other in zip(ours, theirs):
                lines += (mine.text() if mine == other else
                          [*mine.lines, *_merged(mine.block, other.block, margin)])
        elif not any(s.code for s in (*ours, *theirs)):
            lines += [line for s in ours for line in s.text()]
        else:
            lines += _branches(ours, theirs, margin)
    return lines


def _branches(ours: tuple[Statement, ...], theirs: tuple[Statement, ...],
              margin: int) -> list[str]:
    """The exact loop's statements under `if exact:`, the fast loop's under `else:` (or `if not
    exact:` alone); a side of comments only stays outside, the exact loop's."""
    lines: list[str] = []
    if not any(s.code for s in ours):
        lines, ours = [line for s in ours for line in s.text()], ()
    if not any(s.code for s in theirs):
        theirs = ()
    pad = (ours or theirs)[0].pad
    mine = [line for s in ours for line in s.deeper(margin)]
    other = [line for s in theirs for line in s.deeper(margin)]
    if not mine:
        return [*lines, pad + "if not exact:", *other]
    return [*lines, pad + "if exact:", *mine, *([pad + "else:", *other] if other else [])]


def _pad(line: str) -> str:
    return line[:len(line) - len(line.lstrip())]


def _depth(line: str) -> int:
    """How many more brackets `line` opens than it closes."""
    return sum(line.count(o) - line.count(c) for o, c in ("()", "[]", "{}"))
