"""One worker's requests shard, `requests.w{k}.jsonl`: its lines appended and flushed one by one.

Invariants: each line carries the fields of requests.jsonl with times on the bundle's clock
(`time.monotonic() - t0`, t0 the coordinator's: CLOCK_MONOTONIC is one clock per host; a Ray
worker moves t0 onto the driver's clock); secrets are redacted as BundleWriter redacts them.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from bundle.redact import Redactor
from bundle.store.writer import check_written, reopen_for_append, request_line


def shard_name(k: int) -> str:
    """The requests shard of worker K."""
    return f"requests.w{k}.jsonl"


class ShardWriter:
    """Appends one worker's request records to its shard, each line flushed, secrets redacted.

    SECRETS is BundleWriter.secrets (a Redactor), or the secrets themselves. The file is opened on the first record; a resumed bundle's shard that close()
    compressed goes back to plain .jsonl and a truncated last line is cut, as BundleWriter
    does for its own streams.
    """

    def __init__(self, bundle: str | os.PathLike, k: int, t0: float, secrets: Redactor | tuple = ()):
        self.path = Path(bundle) / shard_name(k)
        self.t0 = t0
        self.secrets = secrets if isinstance(secrets, Redactor) else Redactor(secrets)
        self._f = None

    def now(self) -> float:
        """Seconds since the bundle's t0."""
        return time.monotonic() - self.t0

    def _open(self):
        reopen_for_append(self.path)
        return open(self.path, "a", encoding="utf-8")

    def append(self, record: dict[str, Any]) -> None:
        check_written("requests", record)
        if self._f is None:
            self._f = self._open()
        line = self.secrets.line(record, request_line) if self.secrets else request_line(record)
        self._f.write(line + "\n")
        self._f.flush()

    def append_lines(self, text: str) -> None:
        """Whole lines another ShardWriter wrote (checked and redacted there), as they are."""
        if not text:
            return
        if self._f is None:
            self._f = self._open()
        self._f.write(text)
        self._f.flush()

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None
