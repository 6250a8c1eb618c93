"""Waking the leader when the store changed, instead of polling it.

Notifications are hints, never the record: the leader reads what changed from the store's feed
(``Store.read_feed``, by version), so a lost or duplicated notification only delays or repeats a
cheap read. Two sources wake it:

* PostgreSQL: every write that the leader must learn of at once (a submission, a deletion, an
  object) sends ``NOTIFY gpuq_changes_<schema>`` in its transaction, which PostgreSQL delivers at commit to
  every session that ran ``LISTEN`` on it, whichever replica wrote;
* this process: the same writes set an in-process signal per database, so an API on the same
  server wakes its leader on SQLite too (other processes writing one SQLite file are seen at the
  leader's next interval).
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Any

from sqlalchemy.engine import URL

CHANNEL = "gpuq_changes"
"""The channel's prefix; the schema the store's tables live in completes it (:func:`channel_for`)."""
_log = logging.getLogger(__name__)
_signals: dict[str, threading.Event] = {}
_generations: dict[str, int] = {}
_signals_lock = threading.Lock()


def channel_for(schema: str | None) -> str:
    """The NOTIFY channel of the store whose tables are in ``schema``: ``LISTEN`` is per database, not
    per schema, so two control planes in two schemas of one database must not wake each other."""
    cleaned = re.sub(r"[^a-z0-9_]", "_", (schema or "").lower())[:40]
    return f"{CHANNEL}_{cleaned}" if cleaned else CHANNEL


def local_signal(url: URL) -> threading.Event:
    """The in-process signal of the database ``url`` names (one per database, shared by its stores)."""
    key = url.render_as_string(hide_password=True)
    with _signals_lock:
        return _signals.setdefault(key, threading.Event())


def objects_generation(url: URL) -> int:
    """How many object changes this process has made in the database ``url`` names."""
    with _signals_lock:
        return _generations.get(url.render_as_string(hide_password=True), 0)


def bump_objects_generation(url: URL) -> None:
    """This process changed an object of ``url``'s database (before its commit: a reader that sees the
    new generation reads the signature again, at worst before the commit, and again at its recheck)."""
    key = url.render_as_string(hide_password=True)
    with _signals_lock:
        _generations[key] = _generations.get(key, 0) + 1


class Wakeup:
    """What the leader waits on between steps: :meth:`wait` returns early when a change was written."""

    def __init__(self, url: URL) -> None:
        self.url = url
        self._local = local_signal(url)
        self._listening: Any = None  # the psycopg connection that LISTENs (PostgreSQL)
        self._channel = CHANNEL
        self._postgres = url.get_backend_name() == "postgresql"

    def interrupt(self) -> None:
        """Wake the waiter now (a pod started, the server stops)."""
        self._local.set()
        if self._listening is not None:
            try:
                self._listening.execute(f"NOTIFY {self._channel}")
            except Exception:  # a hint only; the next wait reconnects
                self._drop()

    def wait(self, timeout_s: float) -> bool:
        """Wait at most ``timeout_s`` for a change; True when one was signalled (the signal is consumed)."""
        if self._local.is_set() or not self._postgres:
            woke = self._local.wait(timeout_s)
            self._local.clear()
            self._drain()
            return woke
        connection = self._connection()
        if connection is None:
            woke = self._local.wait(timeout_s)
            self._local.clear()
            return woke
        try:
            woke = any(True for _ in connection.notifies(timeout=max(timeout_s, 0.0), stop_after=1))
        except Exception as error:  # the connection broke: re-read the store at once
            _log.warning("lost the PostgreSQL LISTEN connection (%s); reconnecting", error)
            self._drop()
            return True
        self._local.clear()
        return woke

    def close(self) -> None:
        self._drop()

    def _connection(self) -> Any:
        if self._listening is None:
            import psycopg

            try:
                conninfo = self.url.set(drivername="postgresql").render_as_string(hide_password=False)
                self._listening = psycopg.connect(conninfo, autocommit=True)
                schema = self._listening.execute("SELECT current_schema()").fetchone()
                self._channel = channel_for(schema[0] if schema else None)
                self._listening.execute(f"LISTEN {self._channel}")
            except Exception as error:  # fall back to the interval
                _log.warning("cannot LISTEN on PostgreSQL (%s); polling the store", error)
                self._drop()
        return self._listening

    def _drain(self) -> None:
        """Consume notifications already received (the local signal answered first)."""
        if self._listening is not None:
            try:
                for _ in self._listening.notifies(timeout=0, stop_after=64):
                    pass
            except Exception:
                self._drop()

    def _drop(self) -> None:
        connection, self._listening = self._listening, None
        if connection is not None:
            try:
                connection.close()
            except Exception:
                _log.debug("closing the LISTEN connection failed", exc_info=True)
