"""Line charts as inline SVG, drawn on the server: no script, no library, the same markup in a static export.

Owns: `line_chart` (several series overlaid, an optional interval band per series, axes with round ticks, a
legend) and its palette.
Must not know: runs, metrics files, HTTP.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape
from typing import Protocol

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f")


class Curve(Protocol):
    label: str
    points: list[tuple[float, float]]
    band: list[tuple[float, float, float]]


def ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About `n` round values covering [lo, hi]."""
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / max(1, n)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    return [round(first + i * step, 10) for i in range(int((hi - first) / step + 1e-9) + 1)]


def _fmt(v: float) -> str:
    return f"{v:.0f}" if float(v).is_integer() and abs(v) < 1e6 else f"{v:.3g}"


def line_chart(series: Sequence[Curve], *, title: str, x_label: str = "step", y_label: str = "",
               width: int = 560, height: int = 240, y_range: tuple[float, float] | None = None) -> str:
    """An SVG element (a string) plotting each series' points as a line with markers, its band as a shaded area."""
    pad_l, pad_r, pad_t, pad_b = 52, 12, 24, 36
    pts = [p for s in series for p in s.points]
    bands = [(x, lo, hi) for s in series for x, lo, hi in s.band]
    if not pts:
        return ""
    xs = [x for x, _ in pts]
    ys = [y for _, y in pts] + [v for _, lo, hi in bands for v in (lo, hi)]
    x0, x1 = min(xs), max(xs)
    y0, y1 = y_range if y_range else (min(ys), max(ys))
    if x1 == x0:
        x0, x1 = x0 - 0.5, x1 + 0.5
    if y1 == y0:
        y0, y1 = y0 - 0.5, y1 + 0.5
    legend_h = 14 * len(series)
    plot_w, plot_h = width - pad_l - pad_r, height - pad_t - pad_b
    total_h = height + legend_h

    def sx(x: float) -> float:
        return pad_l + (x - x0) / (x1 - x0) * plot_w

    def sy(y: float) -> float:
        return pad_t + (1 - (y - y0) / (y1 - y0)) * plot_h

    out = [f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {total_h}" '
           f'width="{width}" height="{total_h}" role="img" aria-label="{escape(title)}">',
           f'<text class="title" x="{pad_l}" y="15">{escape(title)}</text>',
           f'<rect class="frame" x="{pad_l}" y="{pad_t}" width="{plot_w}" height="{plot_h}" fill="none" '
           f'stroke="#999"/>']
    for t in ticks(y0, y1):
        if y0 <= t <= y1:
            out.append(f'<line x1="{pad_l}" x2="{pad_l + plot_w}" y1="{sy(t):.1f}" y2="{sy(t):.1f}" stroke="#eee"/>'
                       f'<text class="tick" x="{pad_l - 4}" y="{sy(t) + 4:.1f}" text-anchor="end">{_fmt(t)}</text>')
    for t in ticks(x0, x1):
        if x0 <= t <= x1:
            out.append(f'<text class="tick" x="{sx(t):.1f}" y="{pad_t + plot_h + 14}" text-anchor="middle">'
                       f'{_fmt(t)}</text>')
    out.append(f'<text class="axis" x="{pad_l + plot_w / 2}" y="{pad_t + plot_h + 30}" text-anchor="middle">'
               f'{escape(x_label)}</text>')
    if y_label:
        out.append(f'<text class="axis" transform="rotate(-90)" x="{-(pad_t + plot_h / 2)}" y="12" '
                   f'text-anchor="middle">{escape(y_label)}</text>')
    for i, s in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        if s.band:
            band = sorted(s.band)
            poly = [(sx(x), sy(hi)) for x, _, hi in band] + [(sx(x), sy(lo)) for x, lo, _ in reversed(band)]
            out.append(f'<polygon class="band" points="{" ".join(f"{a:.1f},{b:.1f}" for a, b in poly)}" '
                       f'fill="{color}" fill-opacity="0.15" stroke="none"/>')
        line = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in sorted(s.points))
        out.append(f'<polyline class="series" data-label="{escape(s.label)}" points="{line}" fill="none" '
                   f'stroke="{color}" stroke-width="1.6"/>')
        if len(s.points) <= 60:
            out.extend(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.2" fill="{color}"><title>'
                       f'{escape(s.label)}: {_fmt(x)}, {y:.4g}</title></circle>' for x, y in s.points)
        ly = height + 14 * i + 4
        out.append(f'<rect x="{pad_l}" y="{ly}" width="10" height="10" fill="{color}"/>'
                   f'<text class="legend" x="{pad_l + 14}" y="{ly + 9}">{escape(s.label)}</text>')
    out.append("</svg>")
    return "".join(out)
