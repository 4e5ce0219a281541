"""Leader election: only one scheduler acts at a time.

- PostgreSQL: a session-level advisory lock (``pg_try_advisory_lock``) held on a dedicated
  connection; the server releases it when that connection (or its process) dies.
- SQLite: an exclusive ``flock`` on a file beside the database; the OS releases it when the
  process dies.
- In memory: a process-local lock.

``try_acquire`` never blocks; the loop retries it while it waits. ``release`` gives it up.
"""

from __future__ import annotations

import contextlib
import fcntl
import threading
import zlib
from pathlib import Path
from typing import IO, Protocol

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

LOCK_NAME = "budgeteer-scheduler"


class LeaderLock(Protocol):
    """Non-blocking leadership."""

    def try_acquire(self) -> bool:
        """True if this process now holds (or already held) leadership."""
        ...

    def release(self) -> None:
        """Give leadership up (no-op if not held)."""
        ...


class PostgresLeaderLock:
    """A PostgreSQL advisory lock on its own connection."""

    def __init__(self, engine: Engine, name: str = LOCK_NAME) -> None:
        self._engine = engine
        self._key = zlib.crc32(name.encode())
        self._conn: Connection | None = None

    def try_acquire(self) -> bool:
        """See :class:`LeaderLock`. While held, each call checks that the lock's session is
        still alive: a database restart ends the session and with it the lock, and then this
        process must not believe it leads (it tries to take the lock again)."""
        if self._conn is not None:
            try:
                self._conn.execute(sa.text("SELECT 1")).scalar()
                self._conn.commit()
                return True
            except sa.exc.DBAPIError:
                self._drop()
        try:
            conn = self._engine.connect()
        except sa.exc.DBAPIError:
            return False  # the database is away: nobody can lead through it now
        got = bool(
            conn.execute(sa.text("SELECT pg_try_advisory_lock(:k)"), {"k": self._key}).scalar()
        )
        conn.commit()
        if got:
            self._conn = conn
        else:
            conn.close()
        return got

    def release(self) -> None:
        """See :class:`LeaderLock` (a lock whose session already died is simply forgotten)."""
        if self._conn is not None:
            try:
                self._conn.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": self._key})
                self._conn.commit()
            except sa.exc.DBAPIError:
                pass  # the session is gone, and the lock with it
            self._drop()

    def _drop(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(sa.exc.DBAPIError):
                self._conn.close()
            self._conn = None


class FileLeaderLock:
    """An exclusive ``flock`` on ``path`` (SQLite deployments on one machine)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._fh: IO[bytes] | None = None

    def try_acquire(self) -> bool:
        """See :class:`LeaderLock`."""
        if self._fh is not None:
            return True
        fh = open(self._path, "ab")  # noqa: SIM115 - held open while leading
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            return False
        self._fh = fh
        return True

    def release(self) -> None:
        """See :class:`LeaderLock`."""
        if self._fh is not None:
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None


class LocalLeaderLock:
    """Leadership within one process (the in-memory store)."""

    _lock = threading.Lock()

    def __init__(self) -> None:
        self._held = False

    def try_acquire(self) -> bool:
        """See :class:`LeaderLock`."""
        if not self._held:
            self._held = self._lock.acquire(blocking=False)
        return self._held

    def release(self) -> None:
        """See :class:`LeaderLock`."""
        if self._held:
            self._lock.release()
            self._held = False
