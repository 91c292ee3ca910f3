"""PostgreSQL fixtures: one server per test session, a fresh database per test.

Without a server (no $SPOTWISE_TEST_PG_URL, no initdb) these tests skip with the reason;
with SPOTWISE_REQUIRE_PG=1 (CI) a missing server fails them instead.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from tests.system.postgres.cluster import ENV_REQUIRE, ENV_URL, Cluster, find_bindir


def _unavailable(why: str) -> None:
    text = f"PostgreSQL tests need a server: {why}"
    if os.environ.get(ENV_REQUIRE) == "1":
        pytest.fail(f"{text} ({ENV_REQUIRE}=1)", pytrace=False)
    pytest.skip(text)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """The URL of a server whose user may create databases."""
    url = os.environ.get(ENV_URL)
    if url:
        yield url
        return
    bindir = find_bindir()
    if bindir is None:
        _unavailable(
            f"set {ENV_URL}, or install PostgreSQL (Debian: apt-get install postgresql) "
            "so that initdb can start a throwaway cluster"
        )
    try:
        cluster = Cluster(bindir).start()  # type: ignore[arg-type]
    except (RuntimeError, OSError) as e:
        _unavailable(f"could not start a throwaway cluster: {e}")
        raise
    try:
        yield cluster.url
    finally:
        cluster.stop()


@pytest.fixture
def pg_url(pg_server: str) -> Iterator[str]:
    """A new, empty database on the server, dropped after the test."""
    name = f"t_{secrets.token_hex(6)}"
    admin = sa.create_engine(pg_server, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as c:
            c.execute(sa.text(f'CREATE DATABASE "{name}"'))
        url = sa.engine.make_url(pg_server).set(database=name)
        yield url.render_as_string(hide_password=False)
        with admin.connect() as c:
            c.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


class FakeMonotonic:
    """A monotonic clock the test moves: lease deadlines without sleeping."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


def expire_lease(url: str) -> None:
    """As if lease_ttl had passed since the holder's last renewal (the server's clock)."""
    engine = sa.create_engine(url)
    try:
        with engine.begin() as c:
            c.execute(sa.text("UPDATE daemonlease SET renewed_at = renewed_at - interval '1 day'"))
    finally:
        engine.dispose()
