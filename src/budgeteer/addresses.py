"""Which webhook addresses point inside the service's own network (refused by default: a team
must not make the service call its loopback, a private range or a cloud metadata address).

Two checks, because DNS answers change: at submission, a URL whose host is a literal private,
loopback, link-local or reserved address (or ``localhost``) is refused with the field named;
at delivery, the host is resolved and every address it resolves to is checked again.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit


def _private_ip(text: str) -> bool | None:
    """Whether ``text`` is a private/loopback/link-local/reserved IP (``None``: not an IP)."""
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return None
    return ip.is_private or ip.is_loopback or ip.is_link_local or ip.is_reserved


def private_literal(url: str) -> bool:
    """True when the URL's host is, as written, an internal address or ``localhost``."""
    host = (urlsplit(url).hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    return bool(_private_ip(host))


def private_address(url: str) -> bool:
    """True when the URL's host resolves to an internal address (or does not resolve)."""
    host = urlsplit(url).hostname or ""
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return True
    return any(_private_ip(str(info[4][0])) for info in infos)
