"""`spotwise server` (the API server and dashboard in the foreground, what its systemd unit
starts), and `spotwise login` / `logout` (remember a server and token for this user's
later commands, in a file only this user may read).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from scheduler.cli.common import ConfigOpt, print_err, print_out, remember_database_urls

commands = typer.Typer()


@commands.command()
def server(
    listen: Annotated[
        str | None,
        typer.Option(metavar="HOST:PORT", help="Where to listen (else [server] listen)"),
    ] = None,
    tls_cert: Annotated[
        Path | None, typer.Option(metavar="FILE", help="PEM certificate (else [server] tls_cert)")
    ] = None,
    tls_key: Annotated[
        Path | None, typer.Option(metavar="FILE", help="PEM private key (else [server] tls_key)")
    ] = None,
    insecure_http: Annotated[
        bool,
        typer.Option("--insecure-http", help="Allow plain HTTP on an address that is not loopback"),
    ] = False,
    config: ConfigOpt = None,
    log_level: Annotated[
        str | None,
        typer.Option(help="DEBUG, INFO, WARNING or ERROR (else $SPOTWISE_LOG_LEVEL, log_level)"),
    ] = None,
) -> None:
    """The API server and dashboard for remote users (loopback unless told otherwise)."""
    from scheduler.daemon.logs import configure, resolve_level
    from scheduler.server.app import serve
    from scheduler.server.context import ServerContext
    from scheduler.state.files import load_config

    remember_database_urls()
    cfg = load_config(config)
    configure(resolve_level(cfg.daemon.log_level, log_level))
    s = cfg.server
    cert, key = tls_cert or s.tls_cert, tls_key or s.tls_key
    serve(ServerContext(config=cfg), listen or s.listen, cert, key, insecure_http)


@commands.command()
def login(
    url: Annotated[str, typer.Argument(metavar="URL", help="The server, e.g. https://host:8765")],
    token_stdin: Annotated[
        bool, typer.Option("--token-stdin", help="Read the token from standard input")
    ] = False,
) -> None:
    """Remember an API server and token for this user's commands (a 0600 file)."""
    import os
    import sys

    from scheduler.cli.remote import ENV_TOKEN, Remote, save_login
    from scheduler.core.errors import UserError

    if token_stdin:
        token = sys.stdin.readline().strip()
    elif os.environ.get(ENV_TOKEN):
        token = os.environ[ENV_TOKEN].strip()
    elif sys.stdin.isatty():
        import getpass

        token = getpass.getpass("token: ").strip()
    else:
        raise UserError(f"no token: give --token-stdin, set {ENV_TOKEN}, or run it in a terminal")
    if not token:
        raise UserError("the token is empty")
    who = Remote(url, token).get("/whoami")  # refused here, not at the next command
    path = save_login(url.rstrip("/"), token)
    teams = "every team" if who["role"] == "admin" else ", ".join(who["teams"]) or "no team"
    print_out(f"logged in to {url.rstrip('/')} as {who['user']} ({who['role']}, {teams})")
    print_err(f"saved in {path} (only you can read it); spotwise logout forgets it")


@commands.command()
def logout() -> None:
    """Forget the API server and token `spotwise login` remembered."""
    from scheduler.cli.remote import login_file

    path = login_file()
    if path.exists():
        path.unlink()
        print_out(f"removed {path}")
    else:
        print_err("not logged in")
