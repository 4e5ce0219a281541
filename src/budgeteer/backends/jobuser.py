"""Who a sandbox job runs as, and what it inherits from the service.

Jobs never run as root. When the service runs as root (uid 0), every sandbox job runs as an
unprivileged user — ``backend.run_as`` in the config, ``nobody`` by default — with no
supplementary groups, umask 077, in its own folder (its checkpoint folder, made its home and
working directory, mode 0700 and owned by that user). The service's own files (config, store,
signing key, logs, attempt records) are the service's alone (see
:mod:`budgeteer.service.hardening`), so a job cannot read the admin token or the key that signs
job tokens.

When the service runs as an ordinary user it cannot switch users: jobs run as that user (a
``run_as`` naming another user is an error at start, not a silent downgrade).

A job's environment is built, not inherited: the service's environment holds its tokens and
database URL, so only the variables named in :data:`BASE_ENV` and the config's ``pass_env``
cross over, plus what budgeteer gives the job itself.
"""

from __future__ import annotations

import importlib
import os
import pwd
import shutil
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from budgeteer.errors import SpecError

#: the service's variables a job sees by default: locale, search paths, time zone, GPUs, and
#: the host's settings for the numeric libraries' kernels and threads. A host that pins
#: OpenBLAS's kernels (``OPENBLAS_CORETYPE``: its CPU detection can be wrong on a virtual CPU)
#: runs its jobs' numpy with the same kernels as its own processes. Without that, a sandboxed
#: run of ``examples/train_linear.py`` ends 1 ulp away from the same script run from a shell.
BASE_ENV = (
    "PATH",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "PYTHONPATH",
    "VIRTUAL_ENV",
    "CUDA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "OPENBLAS_CORETYPE",
    "MKL_NUM_THREADS",
)
#: the default unprivileged user when the service runs as root
DEFAULT_USER = "nobody"
FIELD = "backend.run_as"
#: what a job needs to import :mod:`budgeteer.sdk` and report through the API
SDK_PACKAGES = (
    "budgeteer",
    "httpx",
    "httpcore",
    "anyio",
    "certifi",
    "idna",
    "h11",
    "typing_extensions",
)


@dataclass(frozen=True, slots=True)
class JobUser:
    """The unprivileged user sandbox jobs run as (only when the service is root)."""

    name: str
    uid: int
    gid: int

    def spec(self) -> str:
        """``UID:GID`` as the shim takes it."""
        return f"{self.uid}:{self.gid}"


def resolve_job_user(run_as: str | None, euid: int | None = None) -> JobUser | None:
    """The user jobs run as under a service of effective uid ``euid`` (default: this
    process's), or ``None`` for "this service's own user" (only when that is not root).

    ``run_as`` is a user name or a numeric uid. Raises :class:`SpecError` naming
    ``backend.run_as`` for an unknown user, for root, or for another user when the service
    cannot switch (it is not root)."""
    euid = os.geteuid() if euid is None else euid
    if run_as is None:
        if euid != 0:
            return None
        run_as = DEFAULT_USER
    try:
        entry = pwd.getpwuid(int(run_as)) if run_as.isdigit() else pwd.getpwnam(run_as)
    except KeyError:
        raise SpecError(FIELD, f"no such user {run_as!r} on this machine") from None
    if entry.pw_uid == 0:
        raise SpecError(
            FIELD,
            f"{run_as!r} is root; jobs never run as root — name an "
            "unprivileged user (default: nobody)",
        )
    if euid != 0:
        if entry.pw_uid == euid:
            return None
        raise SpecError(
            FIELD,
            f"this service runs as uid {euid}, not root, so it cannot run jobs "
            f"as {run_as!r}; leave run_as unset (jobs run as the service's user) or start the "
            "service as root",
        )
    return JobUser(entry.pw_name, entry.pw_uid, entry.pw_gid)


def job_environment(
    service_env: Mapping[str, str], pass_env: Iterable[str], own: Mapping[str, str]
) -> dict[str, str]:
    """A job's environment: the service's variables named in :data:`BASE_ENV` or
    ``pass_env`` (where set), then ``own`` (what budgeteer gives the job) on top."""
    names = (*BASE_ENV, *pass_env)
    env = {name: service_env[name] for name in names if name in service_env}
    env.update(own)
    return env


def prepare_private_folder(folder: Path, user: JobUser | None) -> None:
    """Create ``folder`` (a job's checkpoint folder); with ``user``, make it that user's alone
    (owner, mode 0700) and every missing parent traversable but not listable (0711)."""
    missing = [p for p in (folder, *folder.parents) if not p.exists()]
    folder.mkdir(parents=True, exist_ok=True)
    if user is None:
        return
    for parent in missing[1:]:
        os.chmod(parent, 0o711)
    os.chown(folder, user.uid, user.gid)
    os.chmod(folder, 0o700)


def blocked_for(user: JobUser, path: Path, *, execute: bool = True) -> Path | None:
    """The first folder on the way to ``path`` that ``user`` (no supplementary groups) cannot
    pass, or ``path`` itself when the user cannot run it (``execute``) or read it; ``None``
    when the user gets there. Symbolic links are followed, as ``exec`` would."""
    target = path.resolve()
    for folder in reversed(target.parents):
        if not _allowed(user, folder, 0o1):
            return folder
    if not target.exists():
        return target
    return None if _allowed(user, target, 0o1 if execute else 0o4) else target


def _allowed(user: JobUser, path: Path, bit: int) -> bool:
    st = path.stat()
    mode = st.st_mode
    if st.st_uid == user.uid:
        return bool(mode & (bit << 6))
    if st.st_gid == user.gid:
        return bool(mode & (bit << 3))
    return bool(mode & bit)


def python_for(user: JobUser | None, stage: Path, packages: Iterable[str] = SDK_PACKAGES) -> str:
    """A Python interpreter ``user`` can run, with ``packages`` importable: this process's own
    when the user reaches it, else a system Python of the same version with copies of
    ``packages`` (and the libraries they bundle) staged in ``stage`` behind a small wrapper.

    The demo and the tests use it: under root, where the interpreter often lives in root's
    home (pyenv), the jobs' unprivileged user cannot run it. A deployment installs its training
    code where the job user can reach it instead. Raises :class:`SpecError` naming
    ``backend.run_as`` when no interpreter the user can run is found."""
    own = Path(sys.executable)
    if user is None or blocked_for(user, own) is None:
        return sys.executable
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [Path(f"/usr/bin/python{version}"), Path(f"/usr/local/bin/python{version}")]
    system = next((c for c in candidates if c.exists() and blocked_for(user, c) is None), None)
    if system is None:
        raise SpecError(
            FIELD,
            f"jobs run as {user.name!r}, which cannot run {own} (its folders are closed to it) "
            f"and no Python {version} it can run was found in /usr/bin or /usr/local/bin",
        )
    site = stage / "site"
    if not (stage / "python").exists():
        site.mkdir(parents=True, exist_ok=True)
        for folder in (stage, site):
            os.chmod(folder, 0o755)
        for name in packages:
            source = Path(importlib.import_module(name).__file__ or "")
            if source.name != "__init__.py":  # a module of one file
                shutil.copy2(source, site / source.name)
                continue
            root = source.parent
            shutil.copytree(root, site / name, dirs_exist_ok=True)
            libs = root.with_name(f"{name}.libs")  # wheels' bundled shared libraries
            if libs.is_dir():
                shutil.copytree(libs, site / libs.name, dirs_exist_ok=True)
        wrapper = stage / ".python.tmp"
        wrapper.write_text(
            f'#!/bin/sh\nPYTHONPATH={site}${{PYTHONPATH:+:$PYTHONPATH}} exec {system} "$@"\n'
        )
        os.chmod(wrapper, 0o755)
        os.replace(wrapper, stage / "python")
    return str(stage / "python")
