"""Waiting on a real engine (Slurm, Ray) in tests: real time passes, bounded."""

from __future__ import annotations

import time
from collections.abc import Callable

from budgeteer.backends.base import ComputeBackend, Handle, Status


def settle(backend: ComputeBackend, handle: Handle, seconds: float = 120) -> Status:
    """Poll the attempt until it ends; AssertionError after ``seconds``."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        status = backend.status(handle)
        if status.state.is_final:
            return status
        time.sleep(0.2)
    raise AssertionError(f"{handle.id} did not end within {seconds} s")


def until(check: Callable[[], object], seconds: float = 120) -> None:
    """Poll ``check()`` until true; AssertionError after ``seconds``."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {seconds} s")
