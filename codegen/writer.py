"""Writing generated source: lines within LINE_LIMIT, indented by INDENT."""
from __future__ import annotations

import re


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
    line = f"{target} = {expr}"
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
        return wrap_call(f"{target} = {call.group()}", args, ")", width=width)
    if operator is not None:
        opening = f"{target} = ("
        return [opening + expr[:operator], " " * len(opening) + expr[operator + 1:] + ")"]
    return [line]
