"""Credentials kept out of a bundle: every form of a secret is replaced by `[redacted]`.

A secret of SECRET_MIN_LEN characters or more is replaced wherever it occurs. A shorter one
("abc", "1234") is replaced wherever it stands as a whole token (not inside a longer word or
number), and in JSON records only inside strings, so a sample value that merely contains it,
or a number equal to it, is kept.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from typing import Any

REDACTED = "[redacted]"
API_KEY_ENV = "SERVING_LEDGER_API_KEY"   # the client's bearer token; never given to a server
SECRET_MIN_LEN = 8
# What continues a token: a short secret next to it is part of a longer word or number
# ("abcdef", "x-abc", "1024.5"); a full stop that ends a sentence does not.
_BEFORE = r"(?<![A-Za-z0-9_\-])(?<![A-Za-z0-9]\.)"
_AFTER = r"(?![A-Za-z0-9_\-])(?!\.[A-Za-z0-9])"


class Redactor:
    """Replaces the credentials it was given by REDACTED in text and in JSON-ready records."""

    def __init__(self, secrets=()):
        secrets = [s for s in secrets if s]
        forms = set()
        for s in secrets:
            if len(s) >= SECRET_MIN_LEN:
                forms.update((s, json.dumps(s, ensure_ascii=False)[1:-1]))
        self.long = tuple(sorted(forms, key=len, reverse=True))
        short = sorted({s for s in secrets if len(s) < SECRET_MIN_LEN}, key=len, reverse=True)
        self.short = re.compile(f"{_BEFORE}(?:{'|'.join(map(re.escape, short))}){_AFTER}"
                                ) if short else None

    def __bool__(self) -> bool:
        return bool(self.long) or self.short is not None

    def text(self, text: str) -> str:
        """TEXT with every secret replaced (a short one where it is a whole token)."""
        for secret in self.long:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return self.short.sub(REDACTED, text) if self.short is not None else text

    def record(self, value: Any) -> Any:
        """VALUE (a JSON-ready object) with a short secret replaced inside its strings."""
        if self.short is None:
            return value
        if isinstance(value, str):
            return self.short.sub(REDACTED, value)
        if isinstance(value, dict):
            return {self.record(k): self.record(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.record(v) for v in value]
        return value

    def line(self, record: dict, dumps) -> str:
        """RECORD serialised by DUMPS with every secret replaced."""
        text = dumps(self.record(record))
        for secret in self.long:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text


def url_credentials(url: str) -> str | None:
    """The `user:password` part of URL (http://user:pass@host/...), None when it has none."""
    try:
        netloc = urllib.parse.urlsplit(url).netloc
    except ValueError:
        netloc = url.split("//", 1)[-1].split("/", 1)[0]
    return netloc.rpartition("@")[0] or None
