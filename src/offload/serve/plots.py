"""The dashboard's plots as inline SVG, drawn on the server from ``/api/stats`` figures.

``assets/dashboard.js`` draws the same specs the same way once it has fresh figures, so
the page reads the same with or without script. A spec is plain data:
``{"xmin", "xmax", "ymax", "yfmt", "xlabels", "lines", "bars", "hlines", "empty"}``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

from offload.serve.markup import render

WIDTH, HEIGHT = 640, 180
LEFT, RIGHT, TOP, BOTTOM = 56, 8, 10, 22
#: the window's levels, as the proxy reports them (shares of n_ctx), and their labels
LEVELS = (("ceiling", "ceiling"), ("high_water", "high"), ("target", "target"))


def compact(value: float) -> str:
    """1234 -> ``1.2k``, 2500000 -> ``2.5M`` (the axis labels)."""
    v = abs(value)
    if v >= 1e6:
        return f"{value / 1e6:.1f}M"
    if v >= 1e3:
        return f"{value / 1e3:.1f}k"
    return str(round(value))


def clock_label(at: float, span: float = 3600.0) -> str:
    """A unix time as ``HH:MM`` local time (``HH:MM:SS`` on an axis spanning under 10 min)."""
    return time.strftime("%H:%M:%S" if span < 600 else "%H:%M", time.localtime(at))


def savings_spec(proxy: Mapping[str, Any]) -> dict[str, Any]:
    """Tokens saved, cumulative, over the last requests of every session."""
    rows: Sequence[Sequence[float]] = proxy.get("savings") or []
    points, total = [], 0.0
    for at, client, wire in rows:
        total += max(0.0, client - wire)
        points.append([at, total])
    span = points[-1][0] - points[0][0] if points else 0.0
    return {
        "xmin": points[0][0] if points else 0,
        "xmax": points[-1][0] if points else 1,
        "ymax": max(total, 1.0) * 1.1,
        "yfmt": "tokens",
        "xlabels": [clock_label(p[0], span) for p in (points[0], points[-1])] if points else [],
        "lines": [{"cls": "saved", "pts": points}],
        "bars": [],
        "hlines": [],
        "empty": "no proxied requests yet" if not points else "",
    }


def occupancy_spec(
    session: Mapping[str, Any], window: Mapping[str, Any], n_ctx: int | None
) -> dict[str, Any]:
    """One session's wire tokens per turn against n_ctx, its window levels marked, and what
    the client sent (dashed, clipped at the top of the window's scale)."""
    turns = session.get("turns") or []
    size = next((t["n_ctx"] for t in reversed(turns) if t.get("n_ctx")), None) or n_ctx or 0
    wire = [[i + 1, t.get("wire_tokens") or 0] for i, t in enumerate(turns)]
    client = [[i + 1, t.get("client_tokens") or 0] for i, t in enumerate(turns)]
    # the scale is the window's: what the client sent beyond it is clipped at the top
    top = max([size * 1.1] + [p[1] for p in wire] + [1])
    hlines = [{"y": size, "cls": "n_ctx", "label": "n_ctx"}] if size else []
    for key, cls in LEVELS:
        share = window.get(key)
        if size and isinstance(share, int | float):
            hlines.append({"y": share * size, "cls": cls, "label": cls})
    return {
        "xmin": 1,
        "xmax": max(len(turns), 2),
        "ymax": top * 1.05,
        "yfmt": "tokens",
        "xlabels": ["turn 1", f"turn {len(turns)}"] if turns else [],
        "lines": [{"cls": "client", "pts": client}, {"cls": "wire", "pts": wire}],
        "bars": [],
        "hlines": hlines,
        "empty": "no turns recorded" if not turns else "",
    }


def cache_spec(session: Mapping[str, Any]) -> dict[str, Any]:
    """The share of each turn's prompt the upstream reused from its cache."""
    turns = session.get("turns") or []
    bars = []
    for i, t in enumerate(turns):
        prompt, cached = t.get("prompt_tokens"), t.get("cached_tokens")
        if prompt and cached is not None:
            bars.append([i + 1, 100.0 * cached / prompt])
    return {
        "xmin": 0.5,  # a bar is centred on its turn: half a turn of room at each end
        "xmax": len(turns) + 0.5,
        "ymax": 100,
        "yfmt": "pct",
        "xlabels": ["turn 1", f"turn {len(turns)}"] if turns else [],
        "lines": [],
        "bars": [{"cls": "cache", "pts": bars, "n": len(turns)}],
        "hlines": [],
        "empty": "the upstream reported no cache figures" if not bars else "",
    }


def _fmt_y(value: float, yfmt: str) -> str:
    return f"{round(value)}%" if yfmt == "pct" else compact(value)


@dataclass(frozen=True)
class _Scale:
    """Where a spec's values fall in the plot's pixels."""

    xmin: float
    xmax: float
    ymax: float
    inner_w: float = WIDTH - LEFT - RIGHT
    inner_h: float = HEIGHT - TOP - BOTTOM

    def x(self, x: float) -> float:
        span = self.xmax - self.xmin
        return LEFT + ((x - self.xmin) / span if span > 0 else 0.5) * self.inner_w

    def y(self, y: float) -> float:
        return TOP + (1 - min(y, self.ymax) / self.ymax) * self.inner_h


def svg(spec: Mapping[str, Any], *, plot_id: str, title: str) -> Markup:
    """The spec as an inline ``<svg>`` (the same elements the page's script draws), from
    ``templates/plot.svg``."""
    at = _Scale(float(spec["xmin"]), float(spec["xmax"]), float(spec["ymax"]) or 1.0)
    grid = [
        {
            "y": f"{at.y(at.ymax * f):.1f}",
            "ty": f"{at.y(at.ymax * f) + 4:.1f}",
            "label": _fmt_y(at.ymax * f, spec["yfmt"]),
        }
        for f in (0.0, 0.5, 1.0)
    ]
    hlines = [
        {
            "cls": h["cls"],
            "label": h["label"],
            "y": f"{at.y(float(h['y'])):.1f}",
            "ty": f"{at.y(float(h['y'])) - 3:.1f}",
        }
        for h in spec["hlines"]
    ]
    polylines = [
        {
            "cls": line["cls"],
            "n": len(line["pts"]),
            "points": " ".join(
                f"{at.x(float(x)):.1f},{at.y(float(y)):.1f}" for x, y in line["pts"]
            ),
        }
        for line in spec["lines"]
        if line["pts"]
    ]
    empty = None
    if spec.get("empty"):
        empty = {
            "x": f"{LEFT + at.inner_w / 2:.1f}",
            "y": f"{TOP + at.inner_h / 2:.1f}",
            "text": spec["empty"],
        }
    return render(
        "plot.svg",
        plot_id=plot_id,
        title=title,
        width=WIDTH,
        height=HEIGHT,
        left=LEFT,
        right=WIDTH - RIGHT,
        grid=grid,
        xlabels=spec.get("xlabels") or [],
        hlines=hlines,
        rects=_rects(spec["bars"], at),
        polylines=polylines,
        empty=empty,
    )


def _rects(bars: Sequence[Mapping[str, Any]], at: _Scale) -> list[dict[str, str]]:
    """Each bar series' rectangles, a bar 0.7 of its slot wide."""
    rects = []
    for b in bars:
        width = max(1.0, at.inner_w / max(int(b["n"]), 1) * 0.7)
        for x, y in b["pts"]:
            top = at.y(float(y))
            rects.append(
                {
                    "cls": b["cls"],
                    "x": f"{at.x(float(x)) - width / 2:.1f}",
                    "y": f"{top:.1f}",
                    "w": f"{width:.1f}",
                    "h": f"{TOP + at.inner_h - top:.1f}",
                }
            )
    return rects
