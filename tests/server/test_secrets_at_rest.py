"""Secrets at rest: tokens stored only as sha256, the database and the context file the server's alone."""

from __future__ import annotations

import hashlib
import stat
from pathlib import Path

import pytest
from sqlalchemy import select

from gpuq.run.store import Store, default_url
from gpuq.run.store.models import UserRow
from gpuq.server.auth import add_user, ensure_admin
from gpuq.server.context import read_context, write_context


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_store_keeps_only_each_tokens_sha256(tmp_path: Path) -> None:
    database = tmp_path / "gpuq.db"
    store = Store(f"sqlite:///{database}")
    store.migrate()
    admin = ensure_admin(store)
    member = add_user(store, "alice", namespaces=["team-a"])
    assert admin is not None
    with store.transaction() as session:
        rows = {row.name: row.token_hash for row in session.scalars(select(UserRow))}
    assert rows == {
        "admin": hashlib.sha256(admin.encode()).hexdigest(),
        "alice": hashlib.sha256(member.encode()).hexdigest(),
    }
    store.close()
    stored = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("gpuq.db"))
    assert admin.encode() not in stored and member.encode() not in stored
    assert hashlib.sha256(admin.encode()).hexdigest().encode() in stored


def test_a_new_database_and_its_journal_files_are_0600(tmp_path: Path) -> None:
    database = tmp_path / "gpuq.db"
    store = Store(f"sqlite:///{database}")
    store.migrate()
    add_user(store, "alice", namespaces=["team-a"])
    files = [p for p in tmp_path.iterdir() if p.name.startswith("gpuq.db")]
    assert {p.name for p in files} >= {"gpuq.db", "gpuq.db-wal", "gpuq.db-shm"}
    assert {p.name: mode(p) for p in files} == {p.name: 0o600 for p in files}
    store.close()


def test_an_existing_database_readable_by_others_is_made_private(tmp_path: Path) -> None:
    database = tmp_path / "gpuq.db"
    Store(f"sqlite:///{database}").migrate()
    database.chmod(0o644)
    Store(f"sqlite:///{database}").close()
    assert mode(database) == 0o600


def test_the_default_state_directory_is_0700(tmp_path: Path) -> None:
    (tmp_path / ".gpuq").mkdir(mode=0o755)
    assert default_url(tmp_path) == f"sqlite:///{tmp_path / '.gpuq' / 'gpuq.db'}"
    assert mode(tmp_path / ".gpuq") == 0o700


@pytest.mark.parametrize("existing", [None, 0o644], ids=["new", "was readable by others"])
def test_the_context_file_is_0600_in_a_0700_directory(tmp_path: Path, existing: int | None) -> None:
    path = tmp_path / "fresh" / "deeper" / "context.yaml"
    if existing is not None:
        path.parent.mkdir(parents=True)
        path.write_text("server: http://old\n")
        path.chmod(existing)
    write_context("http://127.0.0.1:8470", "the-token", path)
    assert mode(path) == 0o600
    assert read_context(path) == {"server": "http://127.0.0.1:8470", "token": "the-token"}
    if existing is None:
        assert mode(path.parent) == mode(path.parent.parent) == 0o700
