"""Fixed-width text for terminals: tables, microseconds, shapes, node ranges."""
from __future__ import annotations

from collections.abc import Iterable, Sequence


def table(header: Sequence[str] | None, rows: Iterable[Sequence[object]], align: str = "",
          indent: int = 0) -> list[str]:
    """Columns padded to their widest cell; `align` has one 'l' or 'r' per column (default
    'l'). The last column is not padded, so a long last cell never widens the others."""
    cells = ([[str(c) for c in header]] if header else []) + [[str(c) for c in r] for r in rows]
    if not cells:
        return []
    columns = len(cells[0])
    widths = [max(len(row[i]) for row in cells) for i in range(columns)]
    align = align.ljust(columns, "l")
    lines = []
    for row in cells:
        parts = [c.rjust(w) if a == "r" else c.ljust(w) for c, w, a in zip(row, widths, align)]
        if align[-1] == "l":
            parts[-1] = row[-1]
        lines.append((" " * indent + "  ".join(parts)).rstrip())
    return lines


def us(value: float) -> str:
    """Microseconds with a thousands separator: 1,737.4."""
    return f"{value:,.1f}"


def shape(dims: Iterable[int]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


def node_ranges(nodes: Iterable[int]) -> str:
    """10,11,12,14 -> '10-12,14'."""
    spans: list[list[int]] = []
    for n in sorted(nodes):
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def speedup(before: float, after: float) -> str:
    return f"{before / after:.2f}x" if after > 0 else "n/a"
