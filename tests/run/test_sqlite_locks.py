"""A second store opened in a process must not drop the SQLite locks of the first one's connections.

SQLite's locks are POSIX record locks, released for the whole process when any descriptor of the
file closes. Opening and closing the database file to set its mode (as creating a store did) while
another store of the process held connections let another process, closing its own connection,
believe itself the last one, checkpoint and remove the WAL: every later query of the first process
failed with "disk I/O error" (``gpuq serve`` next to ``gpuq users add``: the loop stopped stepping).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gpuq.run.store import Store


def test_a_second_store_keeps_the_first_ones_locks_against_another_process(tmp_path: Path) -> None:
    database = tmp_path / "gpuq.db"
    url = f"sqlite:///{database}"
    first = Store(url)
    first.migrate()
    first.add_event("Normal", "Before", "Node", "", "box", "", 1.0)  # its pool now holds a connection
    second = Store(url)  # as the runner opens its own beside the API's
    other = (
        "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
        "c.execute('SELECT count(*) FROM events').fetchone(); c.close()"
    )
    subprocess.run([sys.executable, "-c", other, str(database)], check=True, timeout=60)  # gpuq users add
    assert Path(f"{database}-wal").exists(), "the other process did not take itself for the last one"
    first.add_event("Normal", "After", "Node", "", "box", "", 2.0)
    assert [e.reason for e in second.events()] == ["Before", "After"]
    first.close()
    second.close()


def test_a_new_database_file_is_still_created_private(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'fresh.db'}")
    assert oct((tmp_path / "fresh.db").stat().st_mode & 0o777) == "0o600"
    store.close()
