"""The execution policy for commands submitted through the API (the sandbox runs them as local
processes): a command runs only when it starts with one of the operator's allowed prefixes,
unless the operator opted in to any command (``api.run_any_command``).

A prefix matches argument by argument, exactly: ``[python, -m, mypkg.train]`` allows
``python -m mypkg.train --epochs 3`` (``python`` found on the service's ``PATH``) but not
``python -c …``, ``python -m mypkg.train_evil`` or ``/tmp/python -m mypkg.train`` (a path the
operator did not name: list ``/opt/venv/bin/python`` to allow that interpreter).
"""

from __future__ import annotations

from collections.abc import Sequence


def command_allowed(command: Sequence[str], allowed: Sequence[Sequence[str]]) -> bool:
    """Whether ``command`` starts with one of the ``allowed`` prefixes (see the module
    docstring)."""
    return any(_starts_with(command, prefix) for prefix in allowed)


def _starts_with(command: Sequence[str], prefix: Sequence[str]) -> bool:
    if not prefix or len(command) < len(prefix):
        return False
    return all(c == p for c, p in zip(command, prefix, strict=False))
