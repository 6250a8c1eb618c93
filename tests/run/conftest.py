"""Database fixtures: every store test runs on SQLite (a file in tmp_path) and on PostgreSQL.

PostgreSQL tests use a fresh schema per test (``search_path`` set through the URL), so
they are isolated and can run alongside other test sessions on the same database. An
unreachable server fails those tests; it never skips them.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from gpuq.run.store import Store

POSTGRES_URL = os.environ.get("GPUQ_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
BACKENDS = ("sqlite", "postgresql")


def _libpq_url(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


@pytest.fixture(scope="session")
def postgres_admin() -> str:
    """The libpq URL of the test database, after checking that the server answers."""
    url = _libpq_url(POSTGRES_URL)
    try:
        with psycopg.connect(url, connect_timeout=3) as connection:
            connection.execute("SELECT 1")
    except psycopg.Error as err:
        pytest.fail(
            f"PostgreSQL is unreachable at {url} ({err}). The store tests need it: start it "
            "(e.g. pg_ctl start), or point GPUQ_TEST_POSTGRES_URL at a server.",
            pytrace=False,
        )
    return url


@pytest.fixture
def postgres_url(postgres_admin: str) -> Iterator[str]:
    """A store URL whose ``search_path`` is a fresh schema, dropped after the test."""
    schema = f"gpuq_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_admin, autocommit=True) as connection:
        connection.execute(f'CREATE SCHEMA "{schema}"')
    yield f"{POSTGRES_URL}?options=-csearch_path%3D{schema}"
    with psycopg.connect(postgres_admin, autocommit=True) as connection:
        connection.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'gpuq.db'}"


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest) -> str:
    """The URL of an empty database on each backend."""
    fixture = "sqlite_url" if request.param == "sqlite" else "postgres_url"
    url: str = request.getfixturevalue(fixture)
    return url


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    """A migrated store on each backend."""
    opened = Store(store_url)
    opened.migrate()
    yield opened
    opened.close()
