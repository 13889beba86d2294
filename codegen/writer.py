"""Writing generated source: lines within LINE_LIMIT, indented by INDENT."""
from __future__ import annotations

import re
import textwrap


INDENT = "    "


LINE_LIMIT = 100


def wrap_call(opening: str, args: list[str], closing: str, indent: str = "",
              width: int = LINE_LIMIT) -> list[str]:
    """`opening arg, arg, ...closing`, broken into lines within `width`: continuation lines
    aligned after `opening`, or, where that leaves too little room, indented one level."""
    for hanging in (False, True):
        follow = indent + (INDENT if hanging else " " * len(opening))
        lines, line = ([indent + opening], follow) if hanging and args else ([], indent + opening)
        for i, arg in enumerate(args):
            piece = arg + (", " if i < len(args) - 1 else closing)
            if len(line) + len(piece.rstrip()) > width and line.strip():
                lines.append(line.rstrip())
                line = follow
            line += piece
        lines.append(line if args else indent + opening + closing)
        if all(len(line) <= width for line in lines):
            break
    return lines


def assignment(target: str, expr: str, width: int) -> list[str]:
    """`target = expr`, broken within `width` at the outermost call's commas, else at the
    outermost binary operator (the expression then in parentheses)."""
    return _broken(f"{target} = ", expr, width)


def fit(lines: list[str], width: int) -> list[str]:
    """A statement written as `lines` (unindented, continuation lines as the writer breaks
    them) written again within `width`: a comment line as comment lines, a call or an
    assignment broken as `assignment` breaks one; a line it cannot break stays whole."""
    if lines[0].startswith("#"):
        return ["# " + line for line in textwrap.wrap(lines[0][1:].strip(), width - 2)]
    text = lines[0]
    for line in lines[1:]:
        text += ("" if text.endswith(("(", "[")) else " ") + line.strip()
    target, equals, expr = text.partition(" = ")
    return assignment(target, expr, width) if equals else _broken("", text, width)


def _broken(opening: str, expr: str, width: int) -> list[str]:
    """`opening` and `expr`, broken as `assignment` says."""
    line = opening + expr
    if len(line) <= width:
        return [line]
    depth, commas, operator = 0, [], None
    for i, char in enumerate(expr):
        depth += (char in "([") - (char in ")]")
        if depth == 1 and expr[i:i + 2] == ", ":
            commas.append(i)
        if depth == 0 and operator is None and expr[i:i + 3] in (" + ", " - ", " * ", " / "):
            operator = i
    call = re.match(r"[\w.]+\(", expr)
    if call and expr.endswith(")") and operator is None:
        bounds = [call.end(), *(i + 2 for i in commas), len(expr) + 1]
        args = [expr[a:b - 2] for a, b in zip(bounds, bounds[1:])]
        return wrap_call(opening + call.group(), args, ")", width=width)
    if operator is not None:
        opening += "("
        return [opening + expr[:operator], " " * len(opening) + expr[operator + 1:] + ")"]
    return [line]
