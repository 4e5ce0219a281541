"""Reading a user's text file — a spec, a config, a scenario, a trace, a catalog — the one way:
at most a limit of bytes (a pipe's too, whose size the file system does not tell), decoded as
UTF-8, and every problem as one sentence for the caller's error to carry with its file."""

from __future__ import annotations

from pathlib import Path


class TextFileProblem(Exception):
    """Why a text file could not be read; ``str`` of it is the sentence (``cannot read: No
    such file or directory``, ``larger than 16777216 bytes``, ``not UTF-8 text: byte 0xff on
    line 3``)."""


def read_text(path: Path, limit: int) -> str:
    """The UTF-8 text of ``path``, a file or a pipe, of at most ``limit`` bytes."""
    try:
        with path.open("rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise TextFileProblem(f"cannot read: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise TextFileProblem(f"larger than {limit} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise TextFileProblem(
            f"not UTF-8 text: byte 0x{data[exc.start]:02x} on line {line}"
        ) from None
