"""BundleWriter: raw samples appended and flushed line by line, the manifest replaced atomically."""

from __future__ import annotations

import gzip
import io
import json
import os
import time
from pathlib import Path
from typing import Any

try:
    import orjson
except ImportError:     # pragma: no cover - orjson is a dependency
    orjson = None

from bundle.files import (
    BundleError,
    server_log_name,
)
from bundle.redact import Redactor
from bundle.request_table.fileread import line_blocks
from bundle.schema import manifest_problem, not_finite, record_problem
from bundle.store.manifest import KIND, MANIFEST_KEYS, SCHEMA_VERSION
from bundle.store.streams import SAMPLE_FILES, SHARD_RE, stream_names


def request_line(record: dict[str, Any]) -> str:
    """A request record as one JSON line, ten times faster than json.dumps and read back as the
    same values (floats to the last bit; an exponent may be spelled 1e-7 for 1e-07).

    Request records hold only the client's clock and values parsed from the server's JSON,
    never NaN or infinity (which orjson would write as null); anything orjson refuses is
    written by json.
    """
    if orjson is not None:
        try:
            return orjson.dumps(record, option=orjson.OPT_NON_STR_KEYS).decode()
        except TypeError:
            pass
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False)


def reopen_for_append(p: Path) -> None:
    """Make the stream file P appendable again: what close() compressed into P.gz goes back to
    plain P (close() compresses the whole of it again), and a truncated last line (a crash
    mid-write; the reader skips it) is cut, so new lines do not join it."""
    gz = p.with_name(p.name + ".gz")
    if gz.exists():
        try:
            with gzip.open(gz, "rb") as src:
                data = src.read()
        except (OSError, EOFError) as e:
            raise BundleError(f"{gz}: corrupt compressed file ({e}); cannot resume") from None
        if p.exists():
            data += p.read_bytes()
        tmp = p.with_name(p.name + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, p)
        gz.unlink()
    if p.exists() and p.stat().st_size:
        data = p.read_bytes()
        if not data.endswith(b"\n"):
            with open(p, "rb+") as f:
                f.truncate(data.rfind(b"\n") + 1)


GZ_MEMBER_BYTES = 32 << 20


def compress_in_members(src: Path, dst: Path, member_bytes: int = GZ_MEMBER_BYTES,
                        level: int = 9) -> None:
    """Gzip SRC into DST as independent members of about MEMBER_BYTES of whole lines each.

    The result is one ordinary gzip file (members concatenate: any gzip reader reads it
    whole), and a reader can inflate the members in parallel. Streamed: a large round never
    sits in memory.
    """
    tmp = dst.with_name(dst.name + ".tmp")
    with open(tmp, "wb") as out:
        for block, _lines, _tail in line_blocks(src, member_bytes):
            out.write(gzip.compress(block, compresslevel=level, mtime=0))
    os.replace(tmp, dst)


def check_written(stream: str, record: dict[str, Any]) -> None:
    """Refuse to write a record the reader would refuse (a collector's bug, caught where it is
    made rather than when the bundle is read)."""
    bad = record_problem(stream, record) or not_finite(
        {k: v for k, v in record.items() if k != "chunks"})    # chunk times: the client's clock
    if bad:
        raise ValueError(f"a {stream} record the bundle reader would refuse: {bad}")


def _json_line(record: dict[str, Any]) -> str:
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False)


class BundleWriter:
    """Appends raw samples to a bundle directory; refuses to overwrite an existing bundle.

    SECRETS (an API key, a token from the server's command line) are replaced by
    `[redacted]` in everything this writer puts in the bundle, and in server.log on close,
    whatever their length (bundle/redact.py: a short one where it stands as a whole token).
    """

    def __init__(self, path: str | os.PathLike, manifest: dict[str, Any], resume: bool = False,
                 secrets: tuple[str, ...] | list[str] = ()):
        self.path = Path(path)
        self.secrets = Redactor(secrets)
        if (self.path / "manifest.json").exists() and not resume:
            raise BundleError(f"{self.path}/manifest.json: a bundle already exists here; "
                              "choose another --out or remove it (bundles are never overwritten)")
        self.path.mkdir(parents=True, exist_ok=True)
        self.t0 = time.monotonic()
        if resume:
            old = json.loads((self.path / "manifest.json").read_text())
            # Keep the original clock: new samples continue on the same time axis.
            self.t0 = time.monotonic() - (time.time() - old["clock"]["t0_wall_unix"])
            manifest = {**old, **{k: v for k, v in manifest.items() if k not in ("clock", "created_utc")}}
            self._reopen_streams()
        else:
            manifest = {
                "schema_version": SCHEMA_VERSION,
                "kind": KIND,
                "origin": "recorded",
                "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "status": "running",
                "status_reason": None,
                "clock": {"t0_wall_unix": time.time(), "source": "time.monotonic",
                          "unit": "s since t0"},
                **manifest,
            }
        self.manifest = manifest
        self._files: dict[str, io.TextIOWrapper] = {}
        self.write_manifest()

    def _reopen_streams(self) -> None:
        """Make a resumed bundle's streams appendable (see `reopen_for_append`)."""
        for stream in stream_names(self.path):
            reopen_for_append(self.path / f"{stream}.jsonl")

    def now(self) -> float:
        """Seconds since t0 on the bundle's clock."""
        return time.monotonic() - self.t0

    def append(self, stream: str, record: dict[str, Any]) -> None:
        """Append one JSON line to STREAM.jsonl and flush it to the OS at once."""
        if stream not in SAMPLE_FILES and not SHARD_RE.fullmatch(stream):
            raise ValueError(f"unknown sample stream {stream!r}")
        check_written(stream, record)
        f = self._files.get(stream)
        if f is None:
            f = open(self.path / f"{stream}.jsonl", "a", encoding="utf-8")
            self._files[stream] = f
        dumps = request_line if stream == "requests" else _json_line
        f.write((self.secrets.line(record, dumps) if self.secrets else dumps(record)) + "\n")
        f.flush()

    def scrub(self, text: str) -> str:
        """TEXT with every secret replaced by `[redacted]`."""
        return self.secrets.text(text)

    def scrub_server_log(self) -> None:
        """Redact secrets a server printed (vLLM logs its --api-key among non-default args)."""
        if not self.secrets:
            return
        # server.log, and server.{k}.log of the other servers of a round against several.
        for log in [self.path / server_log_name(), *sorted(self.path.glob("server.[0-9]*.log"))]:
            if not log.exists():
                continue
            text = log.read_bytes().decode("utf-8", "surrogateescape")
            clean = self.scrub(text)
            if clean != text:
                tmp = log.with_name(log.name + ".tmp")
                tmp.write_bytes(clean.encode("utf-8", "surrogateescape"))
                os.replace(tmp, log)

    def update(self, **fields: Any) -> None:
        """Change manifest fields and rewrite it atomically."""
        self.manifest.update(fields)
        self.write_manifest()

    def write_manifest(self) -> None:
        unknown = set(self.manifest) - MANIFEST_KEYS
        if unknown:
            raise BundleError(f"manifest fields not in format v{SCHEMA_VERSION}: {sorted(unknown)}")
        bad = manifest_problem(self.manifest)
        if bad:
            raise BundleError(f"{self.path}/manifest.json: not written, the reader would refuse it: {bad}")
        tmp = self.path / "manifest.json.tmp"
        text = self.secrets.line(self.manifest, lambda m: json.dumps(
            m, indent=2, ensure_ascii=False, sort_keys=True)) + "\n"
        tmp.write_text(text)
        os.replace(tmp, self.path / "manifest.json")

    def close(self, status: str, reason: str | None = None, compress_over: int = 1 << 20) -> None:
        """Close streams, compress large ones (>compress_over bytes) and record the final status."""
        for f in self._files.values():
            f.close()
        self._files.clear()
        self.scrub_server_log()
        files = {}
        for stream in stream_names(self.path):  # request shards too, as `requests.w{k}`
            p = self.path / f"{stream}.jsonl"
            if p.exists() and p.stat().st_size > compress_over:
                compress_in_members(p, p.with_suffix(".jsonl.gz"))
                p.unlink()
            for cand in (p, p.with_suffix(".jsonl.gz")):
                if cand.exists():
                    files[stream] = cand.name
        if (self.path / server_log_name()).exists():
            files["server_log"] = server_log_name()
        self.update(status=status, status_reason=reason, files=files)
