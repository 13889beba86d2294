"""Render the report's data as one self-contained HTML page: inline CSS, inline SVG charts,
no scripts and no external resources, so it opens anywhere and can be mailed as one file."""
from __future__ import annotations

from html import escape

from .plan import nest_shapes
from .runner import DELEGATE_LABEL, RESOLVER_LABELS
from .text import node_ranges

LITERT_COLOR, DELEGATE_COLOR, IDLE_COLOR = "#8f9bb3", "#1b9e77", "#d5d9e0"
PALETTE = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d",
           "#1f78b4", "#b2df8a", "#fb9a99")
CHAR_WIDTH = 7.8  # px per character of the 12px labels (upper case), to size label columns

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1d2433;
       margin: 0; background: #f4f6f9; }
main { max-width: 1100px; margin: 0 auto; padding: 24px 28px 48px; background: #fff; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 32px 0 10px; border-bottom: 1px solid #e3e6eb; padding-bottom: 4px; }
.meta { color: #5b6475; font-size: 12.5px; }
.cards { display: flex; flex-wrap: wrap; gap: 12px; margin: 18px 0 6px; }
.card { border: 1px solid #e3e6eb; border-radius: 8px; padding: 10px 16px; min-width: 140px; }
.card b { display: block; font-size: 22px; }
.card span { color: #5b6475; font-size: 12.5px; }
.good { color: #127a5b; } .bad { color: #b4470b; }
.note { background: #fff6e5; border: 1px solid #f0d39a; border-radius: 6px; padding: 8px 12px; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { text-align: left; padding: 5px 8px; border-bottom: 1px solid #eceef2;
         vertical-align: top; }
th { background: #f7f8fa; font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
code, pre { font: 12px/1.4 ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; }
pre { background: #f7f8fa; border: 1px solid #e3e6eb; border-radius: 6px; padding: 10px;
      overflow-x: auto; }
details { margin: 8px 0; } summary { cursor: pointer; }
svg { display: block; max-width: 100%; height: auto; }
td.nowrap { white-space: nowrap; }
svg text { font: 12px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; fill: #1d2433; }
svg .value { fill: #3b4354; }
.swatch { display: inline-block; width: 11px; height: 11px; border-radius: 2px;
          margin-right: 6px; vertical-align: -1px; }
"""


def _num(value: float, digits: int = 1) -> str:
    return f"{value:,.{digits}f}"


def hbar_chart(rows: list[tuple[str, list[float]]], series: list[tuple[str, str]],
               unit: str, stacked: bool = False, width: int = 1000) -> str:
    """Horizontal bars, one group per row and one bar per series, each labelled with its value;
    or, `stacked`, one bar of segments per row, labelled with the first series' share."""
    label_w = int(max((len(label) for label, _ in rows), default=4) * CHAR_WIDTH) + 20
    value_w = 130
    bar_h, gap, group_gap, top = 18, 3, 14, 26
    per_group = bar_h if stacked else len(series) * (bar_h + gap) - gap
    height = top + len(rows) * (per_group + group_gap)
    peak = max((sum(v) if stacked else max(v, default=0) for _, v in rows), default=0) or 1
    scale = (width - label_w - value_w) / peak
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img">']
    x = label_w
    for name, color in series:  # legend
        parts.append(f'<rect x="{x}" y="4" width="11" height="11" rx="2" fill="{color}"/>'
                     f'<text x="{x + 16}" y="14">{escape(name)}</text>')
        x += 16 + int(len(name) * CHAR_WIDTH) + 24
    y = top
    for label, values in rows:
        parts.append(f'<text x="{label_w - 10}" y="{y + per_group / 2 + 4}" '
                     f'text-anchor="end">{escape(label)}</text>')
        offset = 0.0
        for (name, color), value in zip(series, values):
            if stacked and value <= 0:
                continue
            w = max(value * scale, 1.0)
            bx = label_w + (offset if stacked else 0)
            parts.append(f'<rect class="bar" x="{bx:.1f}" y="{y}" width="{w:.1f}" '
                         f'height="{bar_h}" rx="2" fill="{color}">'
                         f'<title>{escape(label)}, {escape(name)}: {_num(value)} {unit}'
                         f'</title></rect>')
            if stacked:
                offset += value * scale
            else:
                parts.append(f'<text class="value" x="{bx + w + 6:.1f}" y="{y + bar_h - 5}">'
                             f'{_num(value)} {unit}</text>')
                y += bar_h + gap
        if stacked:
            parts.append(f'<text class="value" x="{label_w + offset + 6:.1f}" '
                         f'y="{y + bar_h - 5}">{_num(values[0], 0)} of {_num(sum(values), 0)} '
                         f'{escape(series[0][0])}</text>')
            y += bar_h + group_gap
        else:
            y += group_gap - gap
    parts.append("</svg>")
    return "".join(parts)


def plan_strip(nodes: list[dict], width: int = 1000) -> str:
    """The execution plan as a row of cells, coloured by partition, grey where LiteRT runs;
    op names under the cells when they fit."""
    label_chars, margin = 14, 60          # rotated labels need room below and to the right
    cell = min(40.0, (width - margin) / max(len(nodes), 1))
    labelled = cell >= 14
    height = 34 + (int(label_chars * CHAR_WIDTH * 0.85) if labelled else 0)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img">']
    for i, node in enumerate(nodes):
        part = node["partition"]
        color = PALETTE[part % len(PALETTE)] if node["reason"] is None else IDLE_COLOR
        what = f"partition {part}" if node["reason"] is None else node["reason"]
        x = i * cell
        parts.append(f'<rect x="{x:.1f}" y="0" width="{max(cell - 1, 0.5):.1f}" height="30" '
                     f'fill="{color}"><title>node {node["index"]} {escape(node["op"])}: '
                     f'{escape(what)}</title></rect>')
        if labelled:
            op = node["op"]
            op = op if len(op) <= label_chars else op[:label_chars - 1] + "…"
            parts.append(f'<text transform="translate({x + cell / 2 - 3:.1f},40) rotate(55)" '
                         f'font-size="10">{escape(op)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _table(header: list[str], rows: list[list[str]], numeric: set[int],
           nowrap: frozenset[int] = frozenset()) -> str:
    """Cells are HTML already; header cells are text."""
    def cls(i: int) -> str:
        return ' class="num"' if i in numeric else ' class="nowrap"' if i in nowrap else ""
    head = "".join(f"<th{cls(i)}>{escape(h)}</th>" for i, h in enumerate(header))
    body = "".join("<tr>" + "".join(f"<td{cls(i)}>{c}</td>" for i, c in enumerate(row))
                   + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _cards(data: dict) -> str:
    e2e = data["end_to_end"]
    ratio = e2e["speedup"]
    cards = [(f"{data['delegated']} / {data['nodes']}", "nodes delegated", ""),
             (str(len(data["partitions"])), "partitions", ""),
             (f"{_num(e2e['litert_us'])} µs", "LiteRT default (median)", ""),
             (f"{_num(e2e['delegate_us'])} µs", "with fusion_delegate (median)", ""),
             (f"{ratio:.2f}x", "end-to-end speedup", "good" if ratio >= 1 else "bad")]
    return '<div class="cards">' + "".join(
        f'<div class="card"><b class="{c}">{escape(v)}</b><span>{escape(t)}</span></div>'
        for v, t, c in cards) + "</div>"


def _partition_rows(partitions: list[dict]) -> list[list[str]]:
    rows = []
    for p in partitions:
        ratio = p["speedup"]
        rows.append([
            f'<span class="swatch" style="background:{PALETTE[p["index"] % len(PALETTE)]}">'
            f'</span>{p["index"]}',
            f"<code>{escape(p['kernel'] or '-')}</code>", escape(node_ranges(p["nodes"])),
            escape(" ".join(p["ops"])),
            escape(nest_shapes(p["nests"])), _num(p["litert_us"]),
            _num(p["delegate_us"]),
            f'<span class="{"good" if ratio >= 1 else "bad"}">{ratio:.2f}x</span>',
            _num(p["gbps"], 1), escape(p["compile"])])
    return rows


def render_html(data: dict) -> str:
    """The whole page; every value from `data` is escaped."""
    e2e, machine = data["end_to_end"], data["machine"]
    series = [(RESOLVER_LABELS["xnnpack"], LITERT_COLOR), (DELEGATE_LABEL, DELEGATE_COLOR)]
    title = f"fusion-delegate report: {data['model'].rsplit('/', 1)[-1]}"
    meta = [data["model"], f"generated {data['generated']}", machine["cpu"],
            f"{data['num_threads']} thread(s)", f"medians of {data['num_runs']} interleaved runs",
            machine["runtime"], f"numba {machine['numba']}"]
    out = ['<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
           f"<title>{escape(title)}</title><style>{CSS}</style></head><body><main>",
           f"<h1>{escape(title)}</h1>",
           f'<div class="meta">{" · ".join(escape(m) for m in meta)}</div>',
           _cards(data)]
    if data["note"]:
        out.append(f'<p class="note">{escape(data["note"])}</p>')
    out += ["<h2>End to end</h2>",
            hbar_chart([("whole model", [e2e["litert_us"], e2e["delegate_us"]])], series, "µs"),
            f'<p class="meta">Init (compiling included): LiteRT {_num(e2e["litert_init_us"] / 1e3)}'
            f' ms, with fusion_delegate {_num(e2e["delegate_init_us"] / 1e3)} ms.</p>']
    if data["partitions"]:
        rows = [(f"{p['index']}: {p['kernel'] or '-'} ({len(p['nodes'])} ops)",
                 [p["litert_us"], p["delegate_us"]]) for p in data["partitions"]]
        out += ["<h2>Time per partition</h2>",
                '<p class="meta">Each partition cut out as a model of its own and timed on '
                "LiteRT and on the delegate.</p>",
                hbar_chart(rows, series, "µs"),
                "<h2>Partitions</h2>",
                _table(["#", "kernel", "nodes", "fused ops", "loop nests", "LiteRT µs",
                        "delegate µs", "speedup", "GB/s", "compile"],
                       _partition_rows(data["partitions"]), numeric={5, 6, 7, 8},
                       nowrap=frozenset({0, 1, 2, 4, 9}))]
    out += ["<h2>Execution plan</h2>",
            '<p class="meta">One cell per node, coloured by partition; grey nodes run on '
            "LiteRT.</p>", plan_strip(data["plan"])]
    histogram = [(h["op"], [h["delegated"], h["nodes"] - h["delegated"]])
                 for h in data["op_histogram"]]
    out += ["<h2>Ops</h2>",
            hbar_chart(histogram, [("delegated", DELEGATE_COLOR), ("left to LiteRT", IDLE_COLOR)],
                       "nodes", stacked=True)]
    if data["left_alone"]:
        out += ["<h2>Not delegated</h2>",
                _table(["op", "nodes", "reason"],
                       [[escape(r["op"]), str(r["nodes"]), escape(r["reason"])]
                        for r in data["left_alone"]], numeric={1})]
    if data["partitions"]:
        out.append("<h2>Generated kernels</h2>")
        for p in data["partitions"]:
            out.append(f"<details><summary>partition {p['index']}: "
                       f"<code>{escape(p['kernel'] or '-')}</code> "
                       f"<span class=\"meta\">{escape(p['source_path'] or '')}</span></summary>"
                       f"<pre>{escape(p['source'] or '')}</pre></details>")
    out.append("</main></body></html>")
    return "\n".join(out)
