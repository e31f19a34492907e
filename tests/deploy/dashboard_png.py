"""Draw the Grafana dashboard's panels to a PNG from a real Prometheus's answers.

No Grafana runs here, so this is a stand-in for a screenshot, and an honest one: every panel is
laid out by its gridPos and drawn from the values Prometheus returns for that panel's own
queries (stat: the instant values; table: instant values joined per job; bar chart: instant
values by the ``workers`` label; time series and state timeline: range queries). Rows marked
``repeat`` are drawn once per value of their variable, as Grafana repeats them.

    python -m tests.deploy.dashboard_png docs/img/dashboard.png   # about 80 s

The repeated job row is drawn for ``mlp-50``: predicted, resized by ``initial`` mode to its
recommendation, and the one job whose training worker reports its observed throughput.

The data come from the dashboard test's harness (``controller_flow``): a real Prometheus
scraping ``advisor controller`` through a whole flow of five jobs, then ``--seconds`` more of it
running (resyncs every 5 s) so the time series have some length.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.deploy import promql

BG, PANEL, GRID, TEXT, MUTED = "#111217", "#181b1f", "#2c3235", "#ccccdc", "#8e8e9e"
COLORS = ("#73BF69", "#F2CC0C", "#8AB8FF", "#FF780A", "#F2495C", "#5794F2", "#B877D9", "#FADE2A")
UNIT_ROW = 0.34  # inches per grid row
UNIT_COL = 18 / 24  # inches per grid column


def legend(fmt: str, labels: Mapping[str, str]) -> str:
    if not fmt or fmt == "__auto":
        return ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "__name__") or "value"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt)


def expand_repeats(panels: list[dict[str, Any]], variables: Mapping[str, str],
                   repeat_values: Mapping[str, list[str]]) -> list[tuple[dict[str, Any], dict[str, str]]]:
    """(panel, variables for it) in drawing order, repeated rows copied below each other."""
    rows: list[tuple[dict[str, Any] | None, list[dict[str, Any]]]] = [(None, [])]
    for panel in panels:
        if panel["type"] == "row":
            rows.append((panel, []))
        else:
            rows[-1][1].append(panel)
    placed: list[tuple[dict[str, Any], dict[str, str]]] = []
    shift = 0
    for row, members in rows:
        name = row.get("repeat") if row else None
        values = repeat_values.get(name, variables.get(name, "").split("|")) if name else [None]
        height = (max((p["gridPos"]["y"] + p["gridPos"]["h"] for p in members), default=row["gridPos"]["y"] + 1)
                  - row["gridPos"]["y"]) if row else 0
        for i, value in enumerate(values):
            local = dict(variables)
            if name and value is not None:
                local[name] = value
            offset = shift + i * height
            for panel in ([row] if row else []) + members:
                moved = dict(panel, gridPos=dict(panel["gridPos"], y=panel["gridPos"]["y"] + offset))
                placed.append((moved, local))
        shift += (len(values) - 1) * height
    return placed


def render_dashboard(dashboard: Mapping[str, Any], prom: Any, path: Path, variables: Mapping[str, str], *,
                     start: float, end: float, repeat_values: Mapping[str, list[str]] | None = None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    placed = expand_repeats(dashboard["panels"], variables, repeat_values or {})
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p, _ in placed)
    width, height = 24 * UNIT_COL, rows * UNIT_ROW + 0.6
    fig = plt.figure(figsize=(width, height), facecolor=BG)
    fig.text(0.006, 1 - 0.3 / height, dashboard["title"], color=TEXT, fontsize=15, weight="bold", va="center")
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(end))
    fig.text(0.994, 1 - 0.3 / height, f"queried from Prometheus at {stamp}", color=MUTED, fontsize=9,
             ha="right", va="center")
    for panel, local in placed:
        g = panel["gridPos"]
        left, top = g["x"] * UNIT_COL, 0.6 + g["y"] * UNIT_ROW  # inches from the top-left corner
        w, h = g["w"] * UNIT_COL, g["h"] * UNIT_ROW
        title = promql.substitute(panel["title"], local)
        if panel["type"] == "row":
            fig.text((left + 0.08) / width, 1 - (top + h / 2) / height, title, color=TEXT, fontsize=12,
                     weight="bold", va="center")
            continue
        frame = fig.add_axes(_box(left + 0.04, top + 0.04, w - 0.08, h - 0.08, width, height), facecolor=PANEL)
        frame.set_xticks([])
        frame.set_yticks([])
        for spine in frame.spines.values():
            spine.set_color(GRID)
        frame.text(0.1 / (w - 0.08), 1 - 0.17 / (h - 0.08), title, color=TEXT, fontsize=9.5, weight="bold",
                   va="center", transform=frame.transAxes)
        plain = panel["type"] in ("stat", "table")
        margins = (0.15, 0.35, 0.15, 0.1) if plain else (0.6, 0.4, 0.2, 0.45)  # left, top, right, bottom
        ax = fig.add_axes(_box(left + margins[0], top + margins[1], w - margins[0] - margins[2],
                               h - margins[1] - margins[3], width, height))
        ax.set_facecolor("none")
        _style(ax)
        draw = {"stat": _stat, "table": _table, "barchart": _barchart, "timeseries": _timeseries,
                "state-timeline": _state_timeline}[panel["type"]]
        draw(ax, panel, prom, local, start, end)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90, facecolor=BG)
    plt.close(fig)
    return path


def _box(left: float, top: float, w: float, h: float, width: float, height: float) -> tuple[float, ...]:
    """A rectangle given in inches from the figure's top-left corner, in figure fractions."""
    return left / width, 1 - (top + h) / height, w / width, h / height


def _style(ax: Any) -> None:
    for spine in ax.spines.values():
        spine.set_color(GRID)
    ax.tick_params(colors=MUTED, labelsize=7)
    ax.grid(color=GRID, linewidth=0.5)


def _instant(prom: Any, target: Mapping[str, Any], variables: Mapping[str, str], at: float) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = prom.query(promql.substitute(target["expr"], variables), at=at)
    return result


def _range(prom: Any, target: Mapping[str, Any], variables: Mapping[str, str], start: float,
           end: float) -> list[dict[str, Any]]:
    step = max(1.0, (end - start) / 200)
    result: list[dict[str, Any]] = prom.query_range(promql.substitute(target["expr"], variables), start, end, step)
    return result


def _no_data(ax: Any) -> None:
    ax.text(0.5, 0.5, "No data", color=MUTED, ha="center", va="center", transform=ax.transAxes)


def _stat(ax: Any, panel: Mapping[str, Any], prom: Any, variables: Mapping[str, str], start: float,
          end: float) -> None:
    ax.axis("off")
    items = [(legend(t.get("legendFormat", ""), s["metric"]), float(s["value"][1]))
             for t in panel["targets"] for s in _instant(prom, t, variables, end)]
    if not items:
        return _no_data(ax)
    decimals = panel.get("fieldConfig", {}).get("defaults", {}).get("decimals")
    for i, (name, value) in enumerate(items):
        x = (i + 0.5) / len(items)
        shown = f"{value:.4g}" if decimals is None else f"{value:.{decimals}f}"
        ax.text(x, 0.45, shown, color=COLORS[0], fontsize=24, weight="bold", ha="center",
                va="center", transform=ax.transAxes)
        ax.text(x, 0.12, name, color=MUTED, fontsize=8, ha="center", transform=ax.transAxes)


def _table(ax: Any, panel: Mapping[str, Any], prom: Any, variables: Mapping[str, str], start: float,
           end: float) -> None:
    ax.axis("off")
    rows: dict[tuple[str, str], dict[str, str]] = {}
    columns = ["namespace", "tfjob"]
    for t in panel["targets"]:
        column = t.get("legendFormat", t["refId"])
        columns.append(column)
        for s in _instant(prom, t, variables, end):
            # the job's namespace (the target's own, "namespace", is the controller's: not a column)
            key = (s["metric"].get("job_namespace", ""), s["metric"].get("tfjob", ""))
            # A column named like a label shows the label (e.g. the phase), else the value.
            value = s["metric"].get(column) or f"{float(s['value'][1]):.4g}"
            rows.setdefault(key, {"namespace": key[0], "tfjob": key[1]})[column] = value
    if not rows:
        return _no_data(ax)
    cells = [[row.get(c, "") for c in columns] for _, row in sorted(rows.items())]
    table = ax.table(cellText=cells, colLabels=columns, loc="upper center", cellLoc="left")
    table.auto_set_font_size(False)
    table.set_fontsize(8)
    for cell in table.get_celld().values():
        cell.set_facecolor(PANEL)
        cell.set_edgecolor(GRID)
        cell.get_text().set_color(TEXT)
    table.scale(1, 1.35)


def _barchart(ax: Any, panel: Mapping[str, Any], prom: Any, variables: Mapping[str, str], start: float,
              end: float) -> None:
    """First query as bars by the ``workers`` label, the others (the interval bounds) as lines."""
    drawn = False
    for i, t in enumerate(panel["targets"]):
        result = _instant(prom, t, variables, end)
        series = sorted((int(s["metric"]["workers"]), float(s["value"][1])) for s in result)
        if not series:
            continue
        xs, ys = zip(*series)
        name = t.get("legendFormat", t["refId"])
        if i == 0:
            ax.bar(xs, ys, color=COLORS[2], alpha=0.85, label=name)
        else:
            ax.plot(xs, ys, color=COLORS[3 + i], linewidth=1.2, marker=".", label=name)
        drawn = True
    if not drawn:
        return _no_data(ax)
    ax.set_xlabel("workers", color=MUTED, fontsize=8)
    ax.legend(fontsize=7, facecolor=PANEL, edgecolor=GRID, labelcolor=TEXT, loc="upper left")


def _timeseries(ax: Any, panel: Mapping[str, Any], prom: Any, variables: Mapping[str, str], start: float,
                end: float) -> None:
    n = 0
    for t in panel["targets"]:
        for s in _range(prom, t, variables, start, end):
            xs = [float(v[0]) - end for v in s["values"]]
            ys = [float(v[1]) for v in s["values"]]
            step = "post" if (panel.get("fieldConfig", {}).get("defaults", {}).get("custom", {})
                              .get("lineInterpolation") == "stepAfter") else None
            kwargs = {"drawstyle": "steps-post"} if step else {}
            # Dashed and dotted after the first colours, so equal series stay visible on each other.
            ax.plot(xs, ys, color=COLORS[n % len(COLORS)], linewidth=1.6 - 0.3 * (n % 3),
                    linestyle=("-", "--", ":")[n % 3], label=legend(t.get("legendFormat", ""), s["metric"]), **kwargs)
            n += 1
    if not n:
        return _no_data(ax)
    ax.set_xlabel("seconds before now", color=MUTED, fontsize=7)
    ax.legend(fontsize=6, facecolor=PANEL, edgecolor=GRID, labelcolor=TEXT, loc="upper left", ncol=2)


def _state_timeline(ax: Any, panel: Mapping[str, Any], prom: Any, variables: Mapping[str, str], start: float,
                    end: float) -> None:
    lanes: dict[str, list[tuple[float, float, str]]] = {}
    for t in panel["targets"]:
        for s in _range(prom, t, variables, start, end):
            lane = s["metric"].get("tfjob", "")
            times = [float(v[0]) - end for v in s["values"]]
            step = times[1] - times[0] if len(times) > 1 else 1.0
            lanes.setdefault(lane, []).append((times[0], times[-1] - times[0] + step, s["metric"].get("phase", "")))
    if not lanes:
        return _no_data(ax)
    ax.grid(False)
    phases = sorted({p for spans in lanes.values() for *_, p in spans})
    for row, (lane, spans) in enumerate(sorted(lanes.items())):
        for x, w, phase in spans:
            ax.broken_barh([(x, w)], (row - 0.35, 0.7), color=COLORS[phases.index(phase) % len(COLORS)])
            ax.text(x + w / 2, row, phase, color=BG, fontsize=8, ha="center", va="center", weight="bold")
    ax.set_yticks(range(len(lanes)), sorted(lanes), color=TEXT, fontsize=8)
    ax.set_xlabel("seconds before now", color=MUTED, fontsize=7)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path)
    parser.add_argument("--seconds", type=float, default=60, help="how long to keep scraping after the flow")
    args = parser.parse_args()

    from tests.deploy.controller_flow import scraped_controller
    from tests.deploy.test_dashboard import DASHBOARD, RULES, VARIABLES

    with tempfile.TemporaryDirectory() as tmp, scraped_controller(Path(tmp), rule_files=[RULES]) as flow:
        time.sleep(args.seconds)
        flow.prom.wait_for_scrapes(1)
        out = render_dashboard(json.loads(DASHBOARD.read_text()), flow.prom, args.output, VARIABLES,
                               start=flow.start, end=time.time(), repeat_values={"tfjob": ["mlp-50"]})
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
