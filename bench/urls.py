"""The servers' URLs a round talks to: each an http(s) URL with a host and no credentials, and
no server named twice, however it is spelled (`127.0.0.1` and `localhost`, `:80` and none)."""

from __future__ import annotations

import socket
import urllib.parse
from functools import lru_cache

from bench.prompts import PlanError
from bundle.redact import url_credentials

DEFAULT_PORTS = {"http": 80, "https": 443}


def check_endpoint(url: str, where: str) -> None:
    """Refuse an endpoint that is not an http(s) URL with a host, or that carries a user and
    password: requests carry a key only as SERVING_LEDGER_API_KEY, which never reaches a bundle."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port     # noqa: B018 - raises on a port that is not a number
    except ValueError as e:
        raise PlanError(f"{where}: {url!r:.120} is not a URL ({e})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PlanError(f"{where}: {url!r:.120} is not an http:// or https:// URL with a host")
    if url_credentials(url):
        raise PlanError(f"{where}: the URL of {parts.hostname} carries a user and password; "
                        "give the server's key as SERVING_LEDGER_API_KEY (never recorded) instead")


@lru_cache(maxsize=256)
def _addresses(host: str) -> frozenset[str]:
    """The addresses HOST resolves to (itself when it does not resolve)."""
    try:
        return frozenset(a[4][0] for a in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP))
    except (OSError, UnicodeError):
        return frozenset({host})


def same_server(a: str, b: str) -> bool:
    """Whether URLs A and B name one server: the same scheme, port and path, and hosts that
    resolve to a common address."""
    pa, pb = urllib.parse.urlsplit(a), urllib.parse.urlsplit(b)
    if pa.scheme != pb.scheme or (pa.port or DEFAULT_PORTS.get(pa.scheme)) != (
            pb.port or DEFAULT_PORTS.get(pb.scheme)) or pa.path.rstrip("/") != pb.path.rstrip("/"):
        return False
    ha, hb = (pa.hostname or "").lower(), (pb.hostname or "").lower()
    return ha == hb or bool(_addresses(ha) & _addresses(hb))


def check_endpoints_differ(urls: list[str], where: str) -> None:
    """Refuse URLS that name one server twice (it would count as two engines)."""
    for i, a in enumerate(urls):
        for b in urls[:i]:
            if same_server(a, b):
                raise PlanError(f"{where}: one server is named twice, {b!r:.80} and {a!r:.80} "
                                "(the same address, port and path): it would count as two engines")
