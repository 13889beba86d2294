"""One text for a kernel's two loops: the fast loop and the exact loop differ in a few lines.

The fast loop (codegen.fastpath) and the exact loop run the same nests; they differ where the
fast loop leaves out a clamp or runs a cheaper form of an op, counts its checks, or streams its
outputs. `one_body` writes the nests once, with those lines under `if exact:` / `if not exact:`,
for a function the kernel calls twice with a constant `exact` (`inline='always'`): numba inlines
both calls and drops the branch a constant never takes before it makes loops or threads of them,
so each call compiles to the loop it would be on its own.
"""
from __future__ import annotations

import difflib

from .writer import INDENT, LINE_LIMIT


def one_body(exact: list[str], fast: list[str], indent: int = 1) -> list[str] | None:
    """The lines of both, each difference under `if exact:` (and `else:`) or `if not exact:`,
    or None where a difference is not whole statements, or would not fit in LINE_LIMIT
    `indent` levels in."""
    lines: list[str] = []
    matcher = difflib.SequenceMatcher(a=exact, b=fast, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal" or not _code(exact[i1:i2]) and not _code(fast[j1:j2]):
            lines += exact[i1:i2]          # a comment only one loop has: the exact loop's
            continue
        ours, theirs = _chunks(exact[i1:i2], exact[i2:]), _chunks(fast[j1:j2], fast[j2:])
        if ours is None or theirs is None:
            return None
        while ours or theirs:
            pad = max((chunks[0][0] for chunks in (ours, theirs) if chunks), key=len)
            mine = ours.pop(0)[1] if ours and ours[0][0] == pad else None
            other = theirs.pop(0)[1] if theirs and theirs[0][0] == pad else None
            if other is None:
                lines += [pad + "if exact:", *(INDENT + line for line in mine)]
            elif mine is None:
                lines += [pad + "if not exact:", *(INDENT + line for line in other)]
            else:
                lines += [pad + "if exact:", *(INDENT + line for line in mine),
                          pad + "else:", *(INDENT + line for line in other)]
    if any(len(INDENT * indent + line) > LINE_LIMIT for line in lines):
        return None
    return lines


def _chunks(block: list[str], after: list[str]) -> list[tuple[str, list[str]]] | None:
    """`block` as runs of whole statements at one indentation, each with its indentation
    (a run ends where a statement starts shallower), or None if it is not whole statements:
    a run with a line shallower than its first statement, brackets unbalanced, a block opened
    at its end, or followed by a deeper line."""
    runs: list[tuple[str, list[str]]] = []
    for line in block:
        pad = line[:len(line) - len(line.lstrip())]
        if line.lstrip().startswith("#") and runs:
            runs[-1][1].append(line)
        elif not runs or len(pad) < len(runs[-1][0]):
            runs.append((pad, [line]))
        else:
            runs[-1][1].append(line)
    following = [*(run[1] for run in runs[1:]), after]
    for (pad, run), rest in zip(runs, following):
        code, later = _code(run), _code(rest)[:1]
        text = "\n".join(code)
        if (not code or code[-1].rstrip().endswith(":")
                or any(text.count(o) != text.count(c) for o, c in ("()", "[]", "{}"))
                or later and later[0].startswith(pad + " ")):
            return None
    return runs


def _code(lines: list[str]) -> list[str]:
    """The lines that are not comments."""
    return [line for line in lines if not line.lstrip().startswith("#")]
