"""`spotwise user` and `spotwise token`: who may use the API server, managed on the daemon's
host (they write the database directly, as the operator who runs them).

A token is printed once, when it is made, and never again: only its hash is stored. Each
change is an event in the audit log naming the Unix user who made it.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from scheduler.cli.common import (
    ConfigOpt,
    Format,
    OutputOpt,
    open_engine,
    print_err,
    print_json,
    print_out,
    unix_user,
)

commands = typer.Typer()
user_app = typer.Typer(help="Users of the API server: add, list, remove.", no_args_is_help=True)
commands.add_typer(user_app, name="user")
token_app = typer.Typer(help="API tokens: create (shown once), list, revoke.", no_args_is_help=True)
commands.add_typer(token_app, name="token")

NameArg = Annotated[str, typer.Argument(metavar="NAME", help="The user's name")]


def _now() -> datetime:
    return datetime.now(UTC)  # accounts live in wall-clock time, whatever the market's speed


@user_app.command("add")
def user_add(
    name: NameArg,
    team: Annotated[
        list[str] | None,
        typer.Option("--team", "-t", metavar="TEAM", help="A team it belongs to (repeatable)"),
    ] = None,
    role: Annotated[str, typer.Option(help="member, viewer or admin")] = "member",
    config: ConfigOpt = None,
) -> None:
    """Add a user: a member acts on its teams' jobs, a viewer reads them, an admin all."""
    from scheduler.state.accounts import add_user

    cfg, engine = open_engine(config)
    teams = [x for t in team or [] for x in t.split(",") if x.strip()]
    user = add_user(engine, name, role, teams, _now(), unix_user(), list(cfg.daemon.teams))
    print_out(f"added {user.name}: {user.role}" + (f" of {user.teams}" if user.teams else ""))
    print_err(f"next: spotwise token create {user.name}")


@user_app.command("list")
def user_list(config: ConfigOpt = None, output: OutputOpt = Format.table) -> None:
    """Every user, its role and teams, and how many live tokens it has."""
    from scheduler.cli.columns import Col, layout, lines
    from scheduler.cli.common import terminal_width
    from scheduler.state.accounts import tokens, users
    from scheduler.state.read_models import document

    _cfg, engine = open_engine(config)
    now = _now()
    live: dict[str, int] = {}
    for t in tokens(engine):
        if t.revoked_at is None and (t.expires_at is None or t.expires_at > now):
            live[t.user_name] = live.get(t.user_name, 0) + 1
    rows: list[dict[str, Any]] = [
        {
            "name": u.name,
            "role": u.role,
            "teams": [x for x in u.teams.split(",") if x],
            "tokens": live.get(u.name, 0),
            "created_at": u.created_at,
            "created_by": u.created_by,
            "disabled_at": u.disabled_at,
        }
        for u in users(engine)
    ]
    if output == "json":
        print_json(document(users=rows))
        return
    cells: list[dict[str, str]] = [
        {
            "NAME": r["name"],
            "ROLE": r["role"] + (" (removed)" if r["disabled_at"] else ""),
            "TEAMS": ",".join(r["teams"]) or "-",
            "TOKENS": str(r["tokens"]),
        }
        for r in rows
    ]
    cols = (Col("NAME"), Col("ROLE"), Col("TEAMS"), Col("TOKENS", right=True))
    for line in lines(layout(cols, cells, terminal_width()), cells):
        sys.stdout.write(line + "\n")


@user_app.command("remove")
def user_remove(name: NameArg, config: ConfigOpt = None) -> None:
    """Remove a user and revoke its tokens (its jobs and events keep its name)."""
    from scheduler.state.accounts import remove_user

    _cfg, engine = open_engine(config)
    n = remove_user(engine, name, _now(), unix_user())
    print_out(f"removed {name}; {n} token(s) revoked")


@token_app.command("create")
def token_create(
    name: NameArg,
    expires: Annotated[
        str, typer.Option(metavar="DURATION", help="90d, 12h, ... or 'never'")
    ] = "90d",
    label: Annotated[str, typer.Option(help="What it is for (shown by token list)")] = "",
    config: ConfigOpt = None,
) -> None:
    """Make a token for a user and print it, once (only its hash is stored)."""
    from providers.settings import parse_duration
    from scheduler.core.errors import UserError
    from scheduler.state.accounts import create_token

    if expires == "never":
        life = None
    else:
        try:
            life = parse_duration(expires)
        except (ValueError, TypeError) as e:
            raise UserError(f"--expires {expires!r}: {e} (or 'never')") from None
        if life.total_seconds() <= 0:
            raise UserError("--expires must be longer than 0 (or 'never')")
    _cfg, engine = open_engine(config)
    row, token = create_token(engine, name, _now(), unix_user(), life, label[:200])
    sys.stdout.write(token + "\n")
    until = f"expires {row.expires_at:%Y-%m-%d %H:%M}Z" if row.expires_at else "never expires"
    print_err(
        f"token swt_{row.id} for {row.user_name}, {until}: it is shown only now; "
        "give it as SPOTWISE_TOKEN, or to spotwise login"
    )


@token_app.command("list")
def token_list(
    name: Annotated[str | None, typer.Argument(metavar="NAME", help="Only this user's")] = None,
    config: ConfigOpt = None,
    output: OutputOpt = Format.table,
) -> None:
    """Tokens by id (never their secret): whose, when made, expiry, revoked."""
    from scheduler.cli.columns import Col, layout, lines
    from scheduler.cli.common import terminal_width
    from scheduler.state.accounts import tokens
    from scheduler.state.read_models import document

    _cfg, engine = open_engine(config)
    now = _now()
    rows: list[dict[str, Any]] = [
        {
            "id": f"swt_{t.id}",
            "user": t.user_name,
            "label": t.label,
            "created_at": t.created_at,
            "created_by": t.created_by,
            "expires_at": t.expires_at,
            "revoked_at": t.revoked_at,
            "state": "revoked"
            if t.revoked_at
            else "expired"
            if t.expires_at and t.expires_at <= now
            else "active",
        }
        for t in tokens(engine, name)
    ]
    if output == "json":
        print_json(document(tokens=rows))
        return
    cells: list[dict[str, str]] = [
        {
            "ID": r["id"],
            "USER": r["user"],
            "STATE": r["state"],
            "EXPIRES": f"{r['expires_at']:%Y-%m-%d}" if r["expires_at"] else "never",
            "LABEL": r["label"] or "-",
        }
        for r in rows
    ]
    cols = (Col("ID"), Col("USER"), Col("STATE"), Col("EXPIRES"), Col("LABEL"))
    for line in lines(layout(cols, cells, terminal_width(), shrink=(("LABEL", 8),)), cells):
        sys.stdout.write(line + "\n")


@token_app.command("revoke")
def token_revoke(
    token_id: Annotated[str, typer.Argument(metavar="ID", help="swt_... (from token list)")],
    config: ConfigOpt = None,
) -> None:
    """Revoke a token at once (every server refuses it from its next request)."""
    from scheduler.state.accounts import revoke_token

    _cfg, engine = open_engine(config)
    row = revoke_token(engine, token_id, _now(), unix_user())
    print_out(f"revoked swt_{row.id} of {row.user_name}")
