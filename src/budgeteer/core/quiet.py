"""Keep the solver's own prints off standard output.

HiGHS (through ``scipy.optimize.milp``) writes debugging lines such as
``HighsMipSolverData::transformNewIntegerFeasibleSolution tmpSolver.run();`` straight to file
descriptor 1 from C++, even with ``disp=False`` — about a hundred per large plan — which breaks
anyone who pipes ``--json`` output. While a solve runs, descriptor 1 points at ``/dev/null``.

Descriptors belong to the process, so swaps are serialised by one lock and nested uses keep the
outer redirection; Python-level writes to ``sys.stdout`` from other threads during a solve are
lost with it (the service logs to standard error, so nothing of ours is).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator

_LOCK = threading.RLock()


@contextlib.contextmanager
def solver_output_silenced() -> Iterator[None]:
    """Point descriptor 1 at ``/dev/null`` for the duration (restored even on error)."""
    with _LOCK:
        try:
            sys.stdout.flush()
            saved = os.dup(1)
        except (OSError, ValueError):  # no descriptor 1 (closed, or a test's capture)
            yield
            return
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, 1)
            finally:
                os.close(devnull)
            yield
        finally:
            os.dup2(saved, 1)
            os.close(saved)
