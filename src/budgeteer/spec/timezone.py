"""An IANA time zone named in a spec (a budget's period, an on-prem pool's calendar): checked
once, here, when the spec is read."""

from __future__ import annotations

from typing import Annotated
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AfterValidator, Field


def _known(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a name the OS cannot open
        raise ValueError(f"unknown time zone {value[:64]!r}") from None
    return value


#: A time zone name such as ``Europe/Paris`` (IANA names are at most a few dozen characters).
TimeZoneName = Annotated[str, Field(min_length=1, max_length=64), AfterValidator(_known)]
