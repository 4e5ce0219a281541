"""The service's files are the service's alone; jobs get only their own folder.

Called by ``serve`` and ``run`` before the loop starts (see ``docs/security.md``):

- every file the service creates from here on is private (umask 077): the store's SQLite
  file, logs, attempt records; the SQLite files already there are made 0600 and the signing
  key is 0600 from its creation;
- the work folder is 0711 — jobs (another user when the service is root) may pass through it
  to their own checkpoint folder but not list it or read what is in it;
- a config file that holds a secret (``api.admin_token``, ``api.metrics_token``) must not be
  readable by anyone else: the service refuses to start, naming the file and the fix;
- when jobs run as another user, that user must be able to reach the work folder (every parent
  traversable): refused at start with the folder named, not at the first launch.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from budgeteer.backends.jobuser import JobUser
from budgeteer.config import ServiceConfig
from budgeteer.errors import SpecError

log = logging.getLogger("budgeteer.security")


@contextmanager
def protected(
    config: ServiceConfig,
    config_path: Path | None,
    workdir: Path,
    store_url: str,
    job_user: JobUser | None,
) -> Iterator[None]:
    """Apply the rules of the module docstring while the block runs (the umask is restored
    after it); raises :class:`SpecError` naming the field when the service must not start as
    configured."""
    check_config_file(config, config_path)
    check_folders(workdir, store_url, job_user)
    previous = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(previous)


def check_folders(workdir: Path, store_url: str, job_user: JobUser | None) -> None:
    """Make the work folder passable, the store private, and check the jobs can reach their
    folders."""
    workdir.mkdir(parents=True, exist_ok=True, mode=0o711)
    _chmod_own(workdir, 0o711)
    checkpoints = workdir / "checkpoints"
    checkpoints.mkdir(exist_ok=True, mode=0o711)
    _chmod_own(checkpoints, 0o711)
    for path in _sqlite_files(store_url):
        _chmod_own(path, 0o600)
    if job_user is None:
        if os.geteuid() != 0:
            log.info(
                "sandbox jobs run as this service's user (uid %d): they can read what it can; "
                "run the service as root to run them as an unprivileged user (backend.run_as)",
                os.geteuid(),
            )
        return
    blocked = _untraversable(checkpoints)
    if blocked is not None:
        raise SpecError(
            "backend.workdir",
            f"jobs run as {job_user.name!r} but cannot reach {checkpoints}: {blocked} is not "
            f"traversable by other users (chmod o+x {blocked}, or choose a work folder such as "
            "/var/lib/budgeteer)",
        )


def check_config_file(config: ServiceConfig, path: Path | None) -> None:
    """Refuse a config file holding a secret that other users can read."""
    if path is None or not path.exists():
        return
    secret = next(
        (
            name
            for name, value in (
                ("api.admin_token", config.api.admin_token),
                ("api.metrics_token", config.api.metrics_token),
            )
            if value
        ),
        None,
    )
    mode = stat.S_IMODE(path.stat().st_mode)
    if secret is not None and mode & 0o077:
        raise SpecError(
            secret,
            f"{path} holds a secret but is readable by other users (mode {mode:04o}); "
            f"chmod 600 {path}, or set it through the environment instead",
        )


def _chmod_own(path: Path, mode: int) -> None:
    """``chmod`` what this process owns (a shared folder of someone else is left alone)."""
    if path.exists() and path.stat().st_uid == os.geteuid():
        os.chmod(path, mode)


def _sqlite_files(url: str) -> list[Path]:
    if not url.startswith("sqlite:///"):
        return []
    db = Path(url.removeprefix("sqlite:///"))
    return [db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")]


def _untraversable(folder: Path) -> Path | None:
    """The first of ``folder`` and its parents that others cannot pass through."""
    for p in (folder, *folder.resolve().parents):
        if not stat.S_IMODE(p.stat().st_mode) & stat.S_IXOTH:
            return p
    return None
