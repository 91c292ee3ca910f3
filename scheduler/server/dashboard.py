"""The dashboard: what `status`, `show`, `budget`, `prices` and `report` print, as pages.

Rendered here, on the server, from the same documents the API answers with: plain HTML and
one inline style sheet, no script and nothing fetched from elsewhere (it works offline and
behind any proxy), refreshed by the browser itself every REFRESH seconds. Tables scroll
sideways on a phone and drop their lesser columns there. A page is read with the token the
login page put in an HttpOnly, SameSite=Strict cookie; the dashboard changes nothing, so a
page elsewhere that makes a browser load one learns nothing and does nothing.
"""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime
from typing import Annotated, Any
from urllib.parse import parse_qs, urlencode

from fastapi import APIRouter, Depends, Query
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from scheduler.server.auth import COOKIE, ApiError, check
from scheduler.server.common import address, context, limiter, page_principal, visible
from scheduler.state.accounts import Principal

router = APIRouter(include_in_schema=False)
Reader = Annotated[Principal, Depends(page_principal)]
REFRESH = 15  # seconds between the browser's own reloads
COOKIE_SECONDS = 12 * 3600

STYLE = """
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d2329;
background:#f6f7f9}
header{background:#1f3a5f;color:#fff;padding:10px 16px;display:flex;flex-wrap:wrap;gap:6px 18px;
align-items:center}
header b{font-size:16px;margin-right:8px}
header a{color:#dfe9f6;text-decoration:none}
header a.on{color:#fff;font-weight:600;border-bottom:2px solid #8fc1ff}
header .who{margin-left:auto;font-size:12px;color:#c4d3e6}
main{padding:14px 16px;max-width:1400px}
h1{font-size:18px;margin:4px 0 12px}
h2{font-size:15px;margin:18px 0 8px}
.scroll{overflow-x:auto;background:#fff;border:1px solid #dde1e6;border-radius:6px}
table{border-collapse:collapse;width:100%}
th,td{padding:6px 9px;text-align:left;border-bottom:1px solid #eceef1;vertical-align:top}
th{background:#f0f2f5;font-weight:600;font-size:12px;text-transform:uppercase;color:#4a5561}
td.num,th.num{text-align:right;white-space:nowrap}
td.id{font-family:ui-monospace,Menlo,Consolas,monospace;white-space:nowrap}
.reason{color:#4a5561;min-width:16em}
.st{font-weight:600;white-space:nowrap}
.RUNNING,.SUCCEEDED{color:#1a7f37}.FAILED{color:#cf222e}.HELD{color:#9a6700}
.RECOVERING{color:#8250df}.CANCELLED{color:#6e7781}
form.filters{display:flex;flex-wrap:wrap;gap:8px;margin:0 0 12px;align-items:end}
label{font-size:12px;color:#4a5561;display:flex;flex-direction:column;gap:2px}
select,input,button{font:inherit;padding:5px 8px;border:1px solid #c4cad1;border-radius:4px;
background:#fff}
button{background:#1f6feb;color:#fff;border-color:#1f6feb;cursor:pointer}
.bar{position:relative;height:14px;background:#eceef1;border-radius:3px;min-width:120px}
.bar i{position:absolute;top:0;bottom:0;left:0;border-radius:3px;background:#1f6feb}
.bar i.over{background:#cf222e}.bar i.warn{background:#d4a72c}
.bar s{position:absolute;top:-3px;bottom:-3px;width:2px;background:#1d2329}
.timeline{position:relative;background:#fff;border:1px solid #dde1e6;border-radius:6px;
padding:8px 10px}
.lane{position:relative;height:30px;margin:4px 0}
.lane span{position:absolute;top:0;height:30px;border-radius:4px;color:#fff;font-size:11px;
padding:2px 5px;overflow:hidden;white-space:nowrap}
.spot{background:#2da44e}.on-demand{background:#1f6feb}.ended-bad{outline:2px solid #cf222e}
.note{color:#4a5561;font-size:12px}
.error{background:#ffebe9;border:1px solid #ff8182;padding:8px 12px;border-radius:6px}
.card{background:#fff;border:1px solid #dde1e6;border-radius:6px;padding:10px 14px;
max-width:440px}
@media (max-width:720px){
 .wide{display:none}
 main{padding:10px 8px}
 header{padding:8px 10px}
 .reason{min-width:10em}
}
"""

PAGES = (("jobs", "Jobs"), ("budgets", "Budgets"), ("prices", "Prices"), ("report", "Report"))


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _page(title: str, body: str, p: Principal | None, on: str = "", refresh: bool = True) -> str:
    links = "".join(
        f'<a href="/ui/{key}" class="{"on" if key == on else ""}">{name}</a>' for key, name in PAGES
    )
    who = ""
    if p is not None:
        teams = "all teams" if p.admin else ", ".join(p.teams)
        who = (
            f'<span class="who">{_e(p.name)} ({_e(p.role)}, {_e(teams)}) '
            '<form method="post" action="/ui/logout" style="display:inline">'
            '<button style="padding:1px 6px;font-size:11px">sign out</button></form></span>'
        )
    meta = f'<meta http-equiv="refresh" content="{REFRESH}">' if refresh else ""
    nav = f"<header><b>spotwise</b>{links if p else ''}{who}</header>"
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"{meta}<title>{_e(title)} · spotwise</title><style>{STYLE}</style></head>"
        f"<body>{nav}<main><h1>{_e(title)}</h1>{body}</main></body></html>"
    )


def _html(text: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(
        text,
        status_code=status,
        headers={"Content-Security-Policy": _CSP},
    )


# Nothing but this server's own pages and their inline style: no script at all.
_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)


def login_page(message: str = "", status: int = 200) -> HTMLResponse:
    said = f'<p class="error">{_e(message)}</p>' if message else ""
    body = (
        f'{said}<div class="card"><form method="post" action="/ui/login">'
        '<label>API token<input type="password" name="token" autocomplete="off" '
        'required style="width:100%"></label><p><button>Sign in</button></p></form>'
        '<p class="note">A token comes from <code>spotwise token create NAME</code> on the '
        "daemon's host. It is kept in a cookie only this server reads.</p></div>"
    )
    return _html(_page("Sign in", body, None, refresh=False), status)


@router.get("/")
def root() -> Response:
    return RedirectResponse("/ui/jobs", status_code=303)


@router.get("/ui/login")
def login_form() -> Response:
    return login_page()


@router.post("/ui/login")
async def login(request: Request) -> Response:
    """Check the token (rate-limited like every authentication), then keep it in a cookie
    and go on to the jobs with a same-site navigation (a meta refresh)."""
    raw = (await request.body())[:8192].decode(errors="replace")
    form = parse_qs(raw)
    token = (form.get("token") or [""])[0].strip()
    # Where to go next: one of these pages only (never another site).
    after = (form.get("next") or [""])[0]
    if not re.fullmatch(r"/ui/[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)?", after) or ".." in after:
        after = "/ui/jobs"
    ctx = context(request)
    try:
        p = check(ctx, limiter(request), address(request), token or None)
    except ApiError as e:
        return login_page(str(e), e.status)
    secure = request.url.scheme == "https" or ctx.own.server.tls_cert is not None
    body = f'<p>Signed in. <a href="{_e(after)}">Continue</a></p>'
    page = _page("Signed in", body, p, refresh=False).replace(
        "<title>", f'<meta http-equiv="refresh" content="0;url={_e(after)}"><title>', 1
    )
    response = _html(page)
    response.set_cookie(
        COOKIE, token, max_age=COOKIE_SECONDS, httponly=True, samesite="strict", secure=secure,
        path="/",
    )  # fmt: skip
    return response


@router.post("/ui/logout")
def logout() -> Response:
    response = RedirectResponse("/ui/login", status_code=303)
    response.delete_cookie(COOKIE, path="/")
    return response


class _Screen:
    """Stored times (the daemon's clock) as the wall-clock moment, as the CLI shows them."""

    def __init__(self, clock: Any) -> None:
        self.speedup = float(getattr(clock, "speedup", 1.0) or 1.0)
        self.anchor = getattr(clock, "anchor", None)

    def wall(self, t: datetime | None) -> datetime | None:
        if t is None or self.anchor is None or self.speedup == 1.0:
            return t
        return self.anchor + (t - self.anchor) / self.speedup


def _time(value: Any, screen: _Screen) -> datetime | None:
    if value is None:
        return None
    t = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    t = t if t.tzinfo else t.replace(tzinfo=UTC)
    return screen.wall(t)


def _stamp(t: datetime | None) -> str:
    return t.astimezone(UTC).strftime("%m-%d %H:%M:%SZ") if t else "-"


def _money(x: float | None) -> str:
    if x is None:
        return "-"
    cents = round(x, 2)
    return f"-${-cents:,.2f}" if cents < 0 else f"${cents + 0.0:,.2f}"


def _where(r: dict[str, Any]) -> str:
    if not r.get("cloud"):
        return "-"
    text = "/".join(x for x in (r.get("cloud"), r.get("zone") or r.get("region")) if x)
    return f"local:{text}" if r.get("provider") == "local" else text


@router.get("/ui/jobs")
def jobs_page(
    request: Request,
    p: Reader,
    team: Annotated[str | None, Query(max_length=64)] = None,
    state: Annotated[str | None, Query(max_length=32)] = None,
) -> Response:
    from scheduler.core.states import JobState
    from scheduler.state import read_models
    from scheduler.state.liveness import daemon_warning

    ctx = context(request)
    screen = _Screen(ctx.clock())
    team = team or None
    states = [state] if state and state.upper() in {s.value for s in JobState} else None
    rows = read_models.job_rows(ctx.db, states=states, team=team, teams=visible(p))
    teams = sorted({r["team"] for r in read_models.job_rows(ctx.db, teams=visible(p))})
    warning = daemon_warning(ctx.read_settings(), read_models.daemon_heartbeat(ctx.db))
    team_opts = "".join(
        f'<option value="{_e(t)}"{" selected" if t == team else ""}>{_e(t)}</option>' for t in teams
    )
    state_opts = "".join(
        f"<option{' selected' if state and s.value == state.upper() else ''}>{s.value}</option>"
        for s in JobState
    )
    body = (
        '<form class="filters" method="get" action="/ui/jobs">'
        f'<label>team<select name="team"><option value="">all</option>{team_opts}</select></label>'
        f'<label>state<select name="state"><option value="">all</option>{state_opts}</select>'
        "</label><button>Filter</button></form>"
    )
    if warning:
        body += f'<p class="error">warning: {_e(warning)}</p>'
    head = (
        "<tr><th>id</th><th>name</th><th>state</th><th>team</th><th class=wide>where</th>"
        "<th class='num wide'>$/h</th><th class=num>cost</th><th class='num wide'>recov</th>"
        "<th class=wide>created</th><th>reason</th></tr>"
    )
    trs = []
    for r in rows[:1000]:
        price = r["price_per_hour"]
        link = f"/ui/jobs/{_e(r['id'])}"
        trs.append(
            f'<tr><td class=id><a href="{link}">{_e(r["id"])}</a></td><td>{_e(r["name"])}</td>'
            f'<td class="st {_e(r["state"])}">{_e(r["state"])}</td><td>{_e(r["team"])}</td>'
            f"<td class=wide>{_e(_where(r))}</td>"
            f"<td class='num wide'>{_money(price * (r.get('nodes') or 1)) if price else '-'}</td>"
            f"<td class=num>{_money(r['cost_usd'])}</td>"
            f"<td class='num wide'>{r['recoveries']}</td>"
            f"<td class=wide>{_stamp(_time(r['created_at'], screen))}</td>"
            f"<td class=reason>{_e(r['reason'] or '-')}</td></tr>"
        )
    if not trs:
        trs.append('<tr><td colspan=10 class="note">no jobs</td></tr>')
    more = f'<p class="note">{len(rows) - 1000} more not shown</p>' if len(rows) > 1000 else ""
    body += f'<div class="scroll"><table>{head}{"".join(trs)}</table></div>{more}'
    return _html(_page("Jobs", body, p, "jobs"))


@router.get("/ui/jobs/{ref}")
def job_page(request: Request, ref: str, p: Reader) -> Response:
    from scheduler.core.errors import UserError
    from scheduler.state import read_models

    ctx = context(request)
    screen = _Screen(ctx.clock())
    try:
        doc = read_models.job_detail(ctx.db, ref[:200], ctx.read_settings(), teams=visible(p))
    except UserError as e:
        return _html(_page("No such job", f'<p class="error">{_e(e)}</p>', p, "jobs"), 404)
    j = doc["job"]
    spec = doc.get("spec") or {}
    gpus = " or ".join(spec.get("gpus") or ["any:1"])
    facts = [
        ("state", f'<span class="st {_e(j["state"])}">{_e(j["state"])}</span>'),
        ("reason", _e(j["reason"] or "-")),
        ("team", _e(j["team"])),
        ("submitted by", _e(j.get("submitted_by") or "-")),
        ("asked", _e(f"gpus {gpus}, spot {spec.get('spot', 'prefer')}")),
        ("cost", _money(j["cost_usd"])),
        ("created", _stamp(_time(j["created_at"], screen))),
        ("checkpoint", _e(j["checkpoint_uri"])),
    ]
    env = spec.get("env") or {}
    if env:
        shown = p.sees_env_of(j["team"])
        text = (
            " ".join(f"{k}={v}" for k, v in sorted(env.items()))
            if shown
            else f"{', '.join(sorted(env))} (values shown to team {j['team']})"
        )
        facts.append(("env", _e(text)))
    body = '<div class="scroll"><table>' + "".join(
        f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in facts
    )
    body += "</table></div>"
    body += "<h2>Attempts</h2>" + _timeline(doc["attempts"], screen)
    body += "<h2>Events</h2>" + _events(doc["events"], screen)
    return _html(_page(f"{j['name']} ({j['id']})", body, p, "jobs"))


def _timeline(attempts: list[dict[str, Any]], screen: _Screen) -> str:
    """Each attempt as a bar on one time axis, with where it ran and why it ended, and the
    same as a table beneath."""
    if not attempts:
        return '<p class="note">none yet: the job has not been placed</p>'
    now = datetime.now(UTC)
    spans = []
    for a in attempts:
        start = _time(a["started_at"] or a["created_at"], screen) or now
        end = _time(a["ended_at"], screen) or now
        spans.append((a, start, max(end, start)))
    t0 = min(s for _, s, _ in spans)
    t1 = max(e for _, _, e in spans)
    total = max((t1 - t0).total_seconds(), 1.0)
    lanes = []
    for a, s, e in spans:
        left = 100 * (s - t0).total_seconds() / total
        width = max(100 * (e - s).total_seconds() / total, 1.5)
        bad = a.get("end_reason") in ("interrupted", "failed", "lost", "rejected")
        cls = f"{_e(a['market'])}{' ended-bad' if bad else ''}"
        label = f"#{a['number']} {a['pool']}"
        lanes.append(
            f'<div class="lane"><span class="{cls}" style="left:{left:.2f}%;'
            f'width:{min(width, 100 - left):.2f}%" title="{_e(label)}">{_e(label)}</span></div>'
        )
    axis = f'<p class="note">{_stamp(t0)} → {_stamp(t1)}</p>'
    rows = "".join(
        f"<tr><td class=num>{a['number']}</td><td class=id>{_e(a['pool'])}</td>"
        f"<td>{_e(a['market'])}</td><td class=wide>{_stamp(_time(a['started_at'], screen))}</td>"
        f"<td class=wide>{_stamp(_time(a['ended_at'], screen))}</td>"
        f"<td class=num>{_money(a['cost_usd'])}</td>"
        f"<td class=reason>{_e(_ended(a))}</td></tr>"
        for a in attempts
    )
    table = (
        '<div class="scroll"><table><tr><th class=num>#</th><th>pool</th><th>market</th>'
        "<th class=wide>started</th><th class=wide>ended</th><th class=num>cost</th>"
        f"<th>how it ended</th></tr>{rows}</table></div>"
    )
    return f'<div class="timeline">{"".join(lanes)}{axis}</div>{table}'


def _ended(a: dict[str, Any]) -> str:
    end = a.get("end_reason")
    if end is None:
        return str(a.get("state") or "").lower() or "-"
    detail = " ".join((a.get("detail") or "").split())
    code = f" (exit {a['exit_code']})" if a.get("exit_code") is not None else ""
    stop = f", asked to stop: {a['stop_reason']}" if a.get("stop_reason") else ""
    return f"{end}{code}{stop}" + (f": {detail}" if detail else "")


def _events(events: list[dict[str, Any]], screen: _Screen) -> str:
    rows = "".join(
        f"<tr><td class=wide>{_stamp(_time(e['at'], screen))}</td><td>{_e(e['kind'])}</td>"
        f"<td class=wide>{_e(e.get('actor') or '-')}</td>"
        f"<td class=reason>{_e(e['message'])}</td></tr>"
        for e in events[-200:]
    )
    return (
        '<div class="scroll"><table><tr><th class=wide>at</th><th>kind</th><th class=wide>who'
        f"</th><th>message</th></tr>{rows or '<tr><td colspan=4>none</td></tr>'}</table></div>"
    )


@router.get("/ui/budgets")
def budgets_page(request: Request, p: Reader) -> Response:
    from scheduler.server.spend import budget_doc

    rows = budget_doc(request, p)["budgets"]
    screen = _Screen(context(request).clock())
    trs = []
    for b in rows:
        limit = b["limit_usd"] or 1.0
        pct = 100 * b["spent_usd"] / limit
        proj = b.get("projected_usd")
        cls = "over" if pct >= 100 else "warn" if pct >= 80 else ""
        mark = f'<s style="left:{min(100 * proj / limit, 100):.1f}%"></s>' if proj else ""
        bar = (
            f'<div class="bar"><i class="{cls}" style="width:{min(pct, 100):.1f}%"></i>{mark}</div>'
        )
        forecast = _time(b.get("forecast_at"), screen)  # the wall clock, as the CLI says it
        trs.append(
            f"<tr><td>{_e(b['name'])}</td><td>{_e(b['scope'])}</td>"
            f"<td class=num>{_money(b['spent_usd'])} / {_money(b['limit_usd'])} "
            f"{_e(b['window'])}</td><td>{bar}</td><td class=num>{pct:.0f}%</td>"
            f"<td class='num wide'>{_money(proj)}</td>"
            f"<td class=wide>{_e(_forecast_text(forecast))}</td>"
            f"<td>{_e(b['state'])}{' (hard)' if b['hard'] else ' (soft)'}</td></tr>"
        )
    if not trs:
        trs.append('<tr><td colspan=8 class="note">no budgets configured</td></tr>')
    body = (
        '<div class="scroll"><table><tr><th>name</th><th>scope</th><th class=num>spent / '
        "limit</th><th>spend (| projected)</th><th class=num>%</th><th class='num wide'>"
        "projected</th><th class=wide>limit reached</th><th>state</th></tr>"
        f"{''.join(trs)}</table></div><p class=note>projected: the spend at the window's end "
        "if the current burn goes on; limit reached: when, at that burn.</p>"
    )
    return _html(_page("Budgets", body, p, "budgets"))


def _forecast_text(value: Any) -> str:
    if not value:
        return "-"
    t = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return t.astimezone(UTC).strftime("%b %d %H:%MZ")


@router.get("/ui/prices")
def prices_page(
    request: Request,
    p: Reader,
    gpu: Annotated[str | None, Query(max_length=32)] = None,
) -> Response:
    from scheduler.server.spend import prices_doc

    doc = prices_doc(request, gpu or None, None, None)
    rows = doc["offerings"][:40]
    trs = "".join(
        f"<tr><td>{'local' if r['provider'] == 'local' else _e(r['cloud'])}</td>"
        f"<td>{_e(r['zone'])}</td><td class=id>{_e(r['instance_type'])}</td>"
        f"<td>{r['gpu_count']}x{_e(r['gpu_model'] or 'none')}</td><td>{_e(r['market'])}</td>"
        f"<td class=num>${r['price_per_hour']:.4f}</td>"
        f"<td class='num wide'>${r['price_per_hour'] / max(r['gpu_count'], 1):.4f}</td></tr>"
        for r in rows
    )
    errors = "".join(f'<p class="error">{_e(x)}</p>' for x in doc["errors"])
    body = (
        f'<form class="filters" method="get" action="/ui/prices"><label>GPU<input name="gpu" '
        f'value="{_e(gpu or "")}" placeholder="A100"></label><button>Filter</button></form>'
        f'{errors}<div class="scroll"><table><tr><th>cloud</th><th>zone</th><th>type</th>'
        "<th>gpus</th><th>market</th><th class=num>$/h</th><th class='num wide'>$/gpu-h</th>"
        f"</tr>{trs or '<tr><td colspan=7>no offerings</td></tr>'}</table></div>"
        f'<p class="note">the cheapest {len(rows)} of {len(doc["offerings"])} offerings</p>'
    )
    return _html(_page("Prices", body, p, "prices"))


@router.get("/ui/report")
def report_page(
    request: Request,
    p: Reader,
    by: Annotated[str, Query(pattern="^(job|team|cloud)$")] = "team",
    since: Annotated[str, Query(max_length=16)] = "30d",
) -> Response:
    from scheduler.server.spend import report_doc

    doc = report_doc(request, p, by, since, None)
    head = f"<tr><th>{_e(by)}</th>" + ("<th>name</th>" if by == "job" else "")
    head += (
        "<th class=num>cost</th><th class=num>on-demand</th><th class=num>savings</th>"
        "<th class='num wide'>interruptions</th><th class='num wide'>gpu-h</th></tr>"
    )

    def row(r: dict[str, Any], key: str) -> str:
        pct = r.get("savings_pct")
        saved = _money(r.get("savings_usd")) + (f" ({pct:.0f}%)" if pct is not None else "")
        name = f"<td>{_e(r.get('name', ''))}</td>" if by == "job" else ""
        return (
            f"<tr><td>{_e(key)}</td>{name}<td class=num>{_money(r['cost_usd'])}</td>"
            f"<td class=num>{_money(r['ondemand_usd'])}</td><td class=num>{saved}</td>"
            f"<td class='num wide'>{r['interruptions']}</td>"
            f"<td class='num wide'>{r['gpu_hours']:.2f}</td></tr>"
        )

    trs = "".join(row(r, r[by]) for r in doc["rows"]) + row(doc["total"] | {"name": ""}, "total")
    links = " · ".join(
        f'<a href="/ui/report?{urlencode({"by": b, "since": since})}">by {b}</a>'
        for b in ("team", "job", "cloud")
    )
    notes = "".join(f'<p class="note">* {_e(n)}</p>' for n in doc["notes"])
    body = f'<p>{links}</p><div class="scroll"><table>{head}{trs}</table></div>{notes}'
    return _html(_page(f"Cost report by {by}, last {since}", body, p, "report"))
