"""The cost report as one self-contained HTML file: tables plus matplotlib plots as inline SVG.

Nothing is fetched when it is opened (no scripts, fonts or images from anywhere): glyphs are
drawn as SVG paths, so it looks the same offline, in a mail attachment or in a CI artefact.
Rendering only; every figure comes from `scheduler.state.report.Report`.
"""

from __future__ import annotations

import html
import io
from datetime import datetime
from typing import Any

from scheduler.state.report import Report, Row, store_url

# Distinct, saturated colours (the screenshot test looks for them; the page's text is grey).
SERIES = ("#1f77b4", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
PRICES = ("#6a4c93", "#f4a261", "#1982c4", "#8ac926", "#ff595e", "#5e548e", "#c9184a")
SPOT = "#2a9d8f"
ON_DEMAND = "#8d99ae"
INTERRUPTION = "#e63946"

_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; color: #222; margin: 2em auto; max-width: 1100px; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; } h2 { font-size: 1.15em; margin-top: 1.8em; }
.meta { color: #555; } .cards { display: flex; flex-wrap: wrap; gap: 0.8em; margin: 1em 0; }
.card { border: 1px solid #ccc; border-radius: 6px; padding: 0.5em 0.9em; min-width: 9em; }
.card b { display: block; font-size: 1.3em; }
table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
th, td { padding: 0.25em 0.6em; border-bottom: 1px solid #ddd; text-align: right; }
th:first-child, td:first-child, td.l { text-align: left; }
tr.total td { font-weight: bold; border-top: 2px solid #999; }
figure { margin: 0.5em 0; } figure svg { max-width: 100%; height: auto; }
ol.notes li { margin-bottom: 0.4em; color: #333; }
"""


def render(report: Report) -> str:
    """The whole page as a string."""
    r = report
    by = r.by
    span = (
        f"{_when(r.window.start)} to {_when(r.window.end)}"
        if r.window.start
        else f"all time to {_when(r.window.end)}"
    )
    t = r.total
    saved = _money(t.savings_usd) + (
        f" ({t.savings_pct:.1f}%)" if t.savings_pct is not None else ""
    )
    cards = [
        ("cost (paid)", _money(t.cost_usd)),
        ("on-demand<sup>2</sup>", _money(t.ondemand_usd)),
        ("savings", saved),
        ("interruptions", str(t.interruptions)),
        ("GPU-hours", f"{t.gpu_hours:,.2f}"),
        ("useful hours<sup>3</sup>", f"{t.useful_hours:,.2f} of {t.hours:,.2f}"),
    ]
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        "<title>spotwise cost report</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>spotwise cost report</h1>",
        f'<p class="meta">{_e(span)} (UTC), by {_e(by)}; generated {_e(_when(r.generated_at))}</p>',
        '<div class="cards">'
        + "".join(f'<div class="card">{k}<b>{_e(v)}</b></div>' for k, v in cards)
        + "</div>",
        f"<h2>By {_e(by)}</h2>",
        _table(r),
        "<h2>Spend over time against each budget</h2>",
        _figure("plot-budgets", _budget_plot(r)),
        "<h2>Spot price history for the pools used</h2>",
        _figure("plot-prices", _price_plot(r)),
        "<h2>Interruptions on the timeline</h2>",
        _figure("plot-timeline", _timeline_plot(r)),
        "<h2>Predicted against observed interruptions, per pool</h2>",
        _figure("plot-calibration", _calibration_plot(r)),
        "<h2>On-demand basis</h2>",
        _basis(r),
        "<h2>Notes</h2>",
        '<ol class="notes">' + "".join(f"<li>{_e(n)}</li>" for n in r.notes) + "</ol>",
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def _table(r: Report) -> str:
    heads = [r.by.upper()]
    if r.by == "job":
        heads += ["NAME", "TEAM"]
    if r.by == "team":
        heads += ["BUDGETS"]
    heads += [
        "COST<sup>1</sup>",
        "ON-DEMAND<sup>2</sup>",
        "SAVINGS",
        "SAVED %",
        "INTERRUPTIONS",
        "HOURS",
        "LOST H<sup>3</sup>",
        "GPU-H",
        "JOBS",
    ]
    out = ["<table><thead><tr>" + "".join(f"<th>{h}</th>" for h in heads) + "</tr></thead>"]
    out.append("<tbody>")
    for row in r.rows:
        out.append(_tr(r.by, row, ""))
    out.append(_tr(r.by, r.total, ' class="total"'))
    out.append("</tbody></table>")
    return "".join(out)


def _tr(by: str, row: Row, cls: str) -> str:
    total = cls != ""
    cells = [row.key]
    if by == "job":
        cells += ["", ""] if total else [row.name, row.team]
    if by == "team":
        cells += [""] if total else [", ".join(sorted(row.budgets)) or "none"]
    lead = "".join(f'<td class="l">{_e(c)}</td>' for c in cells)
    pct = row.savings_pct
    nums = [
        _money(row.cost_usd),
        _money(row.ondemand_usd),
        _money(row.savings_usd),
        "-" if pct is None else f"{pct:.1f}%",
        str(row.interruptions),
        f"{row.hours:,.2f}",
        f"{row.lost_hours:,.2f}",
        f"{row.gpu_hours:,.2f}",
        str(len(row.job_ids)),
    ]
    return f"<tr{cls}>{lead}" + "".join(f"<td>{_e(n)}</td>" for n in nums) + "</tr>"


def _store(uri: str) -> str:
    """The job's checkpoint store, linked to where a person can look at it."""
    url = store_url(uri)
    if not uri:
        return "-"
    if url is None:
        return _e(uri)
    return f'<a href="{_e(url)}">{_e(uri)}</a>'


def _basis(r: Report) -> str:
    rows = "".join(
        f'<tr><td class="l">{_e(c.job_name)}</td><td class="l">{_e(c.job_id)}</td>'
        f'<td class="l">{_e(c.offering.pool if c.offering else "none listed")}</td>'
        f"<td>{_e(_money(c.offering.price_per_hour) if c.offering else '-')}</td>"
        f'<td class="l">{_store(c.checkpoint_uri)}</td></tr>'
        for c in r.ondemand
    )
    head = (
        "<tr><th>JOB</th><th>ID</th><th>CHEAPEST ADEQUATE ON-DEMAND</th><th>$/H</th>"
        "<th>CHECKPOINTS</th></tr>"
    )
    return f"<table><thead>{head}</thead><tbody>{rows}</tbody></table>"


# -- plots ----------------------------------------------------------------------------------
def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)  # no display; also keeps tests off any GUI toolkit
    import matplotlib.pyplot as plt

    plt.rcParams.update(
        {
            "svg.fonttype": "path",  # glyphs as paths: no font needed where it is opened
            "svg.hashsalt": "spotwise",  # stable ids: the same report renders the same file
            "font.size": 9,
            "axes.spines.top": False,
            "axes.spines.right": False,
        }
    )
    return plt


def _axes(height: float = 3.2) -> tuple[Any, Any]:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, height), layout="constrained")
    return fig, ax


def _dates(ax: Any, r: Report) -> None:
    """UTC time axis shared by the three plots: from the window's first activity (a 30-day
    window with a day of jobs would otherwise be a sliver at the right) to its end."""
    import matplotlib.dates as mdates

    loc = mdates.AutoDateLocator()
    ax.xaxis.set_major_locator(loc)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(loc))
    end = _naive(r.window.end)
    start = _naive(r.first_activity or r.window.start or r.window.end)
    pad = (end - start) * 0.03
    ax.set_xlim(start - pad, end + pad)
    ax.set_xlabel("UTC")


def _empty(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#666")
    ax.set_xticks([])
    ax.set_yticks([])


def _budget_plot(r: Report) -> str:
    fig, ax = _axes()
    if not r.budgets:
        _empty(ax, "no budgets configured")
    for i, b in enumerate(r.budgets):
        colour = SERIES[i % len(SERIES)]
        xs = [_naive(t) for t, _ in b.points]
        ax.plot(xs, [v for _, v in b.points], color=colour, lw=2.5, label=f"{b.rule.name} spent")
        kind = "hard" if b.rule.hard else "soft"
        ax.axhline(
            b.rule.limit_usd,
            color=colour,
            lw=1.5,
            ls="--",
            label=f"{b.rule.name} limit ${b.rule.limit_usd:,.0f}/{b.rule.window.value} ({kind})",
        )
    if r.budgets:
        top_spent = max((v for b in r.budgets for _, v in b.points), default=0.0)
        top_limit = max(b.rule.limit_usd for b in r.budgets)
        if top_limit > 20 * max(top_spent, 1.0):
            # Spend far below the limits: linear to $1, logarithmic above, so both show.
            ax.set_yscale("symlog", linthresh=1.0)
            ax.set_ylabel("USD in the budget's window (log above $1)")
        else:
            ax.set_ylabel("USD in the budget's window")
        ax.set_ylim(bottom=0, top=max(top_limit, top_spent) * 1.6)
        _legend(ax)
        _dates(ax, r)
    return _svg(fig)


def _legend(ax: Any, **kw: Any) -> None:
    """Above the plot, never over the data."""
    ax.legend(loc="lower left", bbox_to_anchor=(0, 1.0), fontsize=8, frameon=False, ncols=3, **kw)


def _price_plot(r: Report) -> str:
    fig, ax = _axes()
    pools = [p for p, pts in sorted(r.prices.items()) if pts]
    if not pools:
        _empty(ax, "no spot pools used in this window (or no price history recorded)")
    for i, pool in enumerate(pools):
        pts = r.prices[pool]
        xs = [_naive(t) for t, _ in pts] + [_naive(r.window.end)]
        ys = [p for _, p in pts] + [pts[-1][1]]
        ax.plot(xs, ys, drawstyle="steps-post", color=PRICES[i % len(PRICES)], lw=2.5, label=pool)
    if pools:
        ax.set_ylabel("spot $/h")
        _legend(ax)
        _dates(ax, r)
    return _svg(fig)


def _timeline_plot(r: Report) -> str:
    labels: list[str] = []
    for s in r.timeline:
        if s.job_label not in labels:
            labels.append(s.job_label)
    fig, ax = _axes(max(2.4, 0.45 * len(labels) + 1.2))
    if not labels:
        _empty(ax, "no attempts ran in this window")
        return _svg(fig)
    import matplotlib.dates as mdates

    for s in r.timeline:
        y = labels.index(s.job_label)
        start, end = mdates.date2num(_naive(s.start)), mdates.date2num(_naive(s.end))
        colour = SPOT if s.market == "spot" else ON_DEMAND
        ax.barh(y, max(end - start, 1e-4), left=start, height=0.5, color=colour)
    hits = [(s.interrupted_at, labels.index(s.job_label)) for s in r.timeline if s.interrupted_at]
    if hits:
        ax.scatter(
            [_naive(t) for t, _ in hits],
            [y for _, y in hits],
            marker="X",
            s=140,
            color=INTERRUPTION,
            zorder=3,
            label="interruption",
        )
    from matplotlib.patches import Patch

    handles = [Patch(color=SPOT, label="spot"), Patch(color=ON_DEMAND, label="on-demand")]
    if hits:
        handles.append(ax.collections[-1])
    _legend(ax, handles=handles)
    ax.set_yticks(range(len(labels)), labels=labels)
    ax.invert_yaxis()
    ax.xaxis_date()
    _dates(ax, r)
    return _svg(fig)


def _calibration_plot(r: Report) -> str:
    """Each pool's prior (the cloud's risk data, or the configured prior) against the rate
    it then showed, log-log, with the diagonal a calibrated prior would sit on."""
    fig, ax = _axes(3.6)
    pts = [c for c in r.calibration if c.predicted > 0]
    if not pts:
        _empty(ax, "no pool has an hour of spot exposure yet")
        return _svg(fig)
    floor = min([c.predicted for c in pts] + [c.observed for c in pts if c.observed > 0]) / 2
    xs = [c.predicted for c in pts]
    ys = [max(c.observed, floor) for c in pts]  # a pool never interrupted sits on the floor
    sizes = [20 + 6 * min(c.exposure_hours, 40) for c in pts]
    ax.scatter(xs, ys, s=sizes, color=SPOT, alpha=0.75, edgecolors="#264653")
    lo, hi = floor, max(xs + ys) * 2
    ax.plot([lo, hi], [lo, hi], color=ON_DEMAND, linestyle="--", linewidth=1, label="calibrated")
    for c, x, y in zip(pts, xs, ys, strict=True):
        ax.annotate(c.pool.split("/", 2)[1], (x, y), fontsize=7, color="#555",
                    xytext=(4, 3), textcoords="offset points")  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("predicted interruptions per hour (prior)")
    ax.set_ylabel("observed per hour")
    _legend(ax)
    return _svg(fig)


def _svg(fig: Any) -> str:
    plt = _pyplot()
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg") :]  # drop the XML prolog and DOCTYPE: inline in HTML


def _figure(fid: str, svg: str) -> str:
    return f'<figure id="{fid}">{svg}</figure>'


def _naive(t: datetime) -> datetime:
    """matplotlib plots in UTC; naive UTC avoids its time zone conversion."""
    return t.replace(tzinfo=None) if t.tzinfo else t


def _money(x: float | None) -> str:
    if x is None:
        return "-"
    return f"-${-x:,.2f}" if x < 0 else f"${x:,.2f}"


def _when(t: datetime | None) -> str:
    return "-" if t is None else t.strftime("%Y-%m-%d %H:%M")


def _e(text: Any) -> str:
    return html.escape(str(text))
