"""A file or folder named in a config or scenario: checked when the file is read, so that a name
the operating system cannot take (a NUL byte, a name over 255 bytes, a path over 4,096) is an
error naming its field, not an ``OSError`` or ``ValueError`` where it is first used."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator

MAX_PATH_BYTES = 4096  # Linux's PATH_MAX
MAX_NAME_BYTES = 255  # Linux's NAME_MAX


def _usable(path: Path) -> Path:
    text = str(path)
    if "\x00" in text:
        raise ValueError("holds a NUL byte")
    if len(text.encode()) > MAX_PATH_BYTES:
        raise ValueError(f"longer than {MAX_PATH_BYTES} bytes")
    if any(len(part.encode()) > MAX_NAME_BYTES for part in path.parts):
        raise ValueError(f"has a name longer than {MAX_NAME_BYTES} bytes")
    return path


#: A path a config or scenario names (relative ones are resolved against its folder).
FilePath = Annotated[Path, AfterValidator(_usable)]
