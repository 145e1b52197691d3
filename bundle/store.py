"""Run bundles: a directory of raw samples written append-only, and a strict reader.

Layout (documented in docs/bundle.md): `manifest.json`, provenance and status, rewritten
atomically, never partially; one `<stream>.jsonl` per sample stream bundle/schema.py declares
(`STREAMS`: points, requests, metrics, gpu, ...), and `requests.w{k}.jsonl` from
load-generating worker process k; `server.log`, the engine's log, when the tool launched it.

Invariants: every `t` is seconds since the bundle's t0 on the monotonic clock; a sample
line is flushed as soon as it is written, so a crash loses at most the last line; nothing
derived (no mean, no percentile) is ever written here.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

try:
    import orjson
except ImportError:     # pragma: no cover - orjson is a dependency
    orjson = None

from bundle.files import (
    BundleError,
    bundle_file,
    check_record,
    lines_of,
    loads_finite,
    loads_unique,
    no_newline,
    run_dir,
    server_log_name,
    stream_file,
)
from bundle.redact import REDACTED, SECRET_MIN_LEN, Redactor  # noqa: F401 - REDACTED re-exported
from bundle.request_table.fileread import line_blocks, read_request_files
from bundle.request_table.table import RequestTable
from bundle.schema import STREAMS, manifest_problem, not_finite, record_problem

SCHEMA_VERSION = 3
KIND = "serving-ledger/bundle"
# The sample streams, as bundle/schema.py declares them (STREAMS), in their order.
SAMPLE_FILES = tuple(s.name for s in STREAMS)

# Every manifest key of the current version; the reader refuses any other.
MANIFEST_KEYS = {
    "schema_version", "kind", "origin", "created_utc", "status", "status_reason",
    "clock", "tool", "host", "gpus", "gpu_absent_reason", "engine", "model",
    "plan", "files", "workload_source", "ray",
}
REQUIRED_KEYS = {"schema_version", "kind", "origin", "status", "clock", "tool", "engine", "plan"}
STATUSES = {"running", "complete", "interrupted", "failed"}
# Manifest keys that hold a JSON object (or null) and a list (or null).
OBJECT_KEYS = ("clock", "tool", "host", "engine", "model", "plan", "files", "workload_source", "ray")
LIST_KEYS = ("gpus",)
# Fields every record of a stream must carry (the report reads them unguarded); "t" a number.
RECORD_FIELDS = {s.name: s.required for s in STREAMS}

ORIGINS = {"recorded", "hand-built-fixture"}
# Request shards: worker process k appends its finished requests to requests.w{k}.jsonl.
SHARD_RE = re.compile(r"requests\.w(0|[1-9][0-9]*)")
SHARD_FILE_RE = re.compile(r"(requests\.w(?:0|[1-9][0-9]*))\.jsonl(?:\.gz)?")


def shard_streams(path: Path) -> list[str]:
    """The request shard streams (`requests.w{k}`) present in bundle directory PATH, in k order."""
    found = {m.group(1) for p in path.iterdir() if (m := SHARD_FILE_RE.fullmatch(p.name))} \
        if path.is_dir() else set()
    return sorted(found, key=lambda s: int(s[len("requests.w"):]))


def stream_names(path: Path) -> list[str]:
    """Every sample stream of bundle directory PATH: SAMPLE_FILES, then the request shards."""
    return list(SAMPLE_FILES) + shard_streams(path)


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


@dataclass
class Bundle:
    """A bundle read back: manifest plus raw sample lists, with any read warnings.

    The requests are a columnar RequestTable (`request_table`, what the report reads);
    `requests` gives them as record dicts, built on first use (slow for a large round).
    """

    path: Path
    manifest: dict[str, Any]
    points: list[dict] = field(default_factory=list)
    metrics: list[dict] = field(default_factory=list)
    gpu: list[dict] = field(default_factory=list)
    client: list[dict] = field(default_factory=list)
    host: list[dict] = field(default_factory=list)
    dcgm: list[dict] = field(default_factory=list)
    shards: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    request_table: RequestTable = field(default_factory=RequestTable.empty)
    request_files: list[str] = field(default_factory=list)  # read, in order
    _requests: list[dict] | None = field(default=None, repr=False, compare=False)

    @property
    def requests(self) -> list[dict]:
        """Every request record as a dict, in bundle order (requests.jsonl, then the shards)."""
        if self._requests is None:
            self._requests = list(self.request_table)
        return self._requests

    @property
    def name(self) -> str:
        return run_dir(self.path).name

    def server_log(self, k: int = 0) -> str | None:
        """Server K's log (server_log_name), checked like every other file of the bundle (a
        regular file inside it, at most MAX_LOG_BYTES), or None when it has none."""
        p = bundle_file(self.path, server_log_name(k))
        if p is None:
            return None
        with open(p, "rb") as f:
            data = f.read(MAX_LOG_BYTES + 1)
        if len(data) > MAX_LOG_BYTES:
            raise BundleError(f"{p}: over {MAX_LOG_BYTES >> 20} MiB; not an engine log this tool "
                              "reads (trim it, or move it out of the bundle)")
        return data.decode("utf-8", errors="replace")

    def other_server_logs(self) -> list[tuple[str, str]]:
        """(file name, text) of the logs of servers 1, 2, … (`server.k.log`, launched beside
        server 0 whose log is server.log), in order, up to the first k the bundle lacks."""
        out, k = [], 1
        while (text := self.server_log(k)) is not None:
            out.append((server_log_name(k), text))
            k += 1
        return out

    def file_for(self, stream: str) -> str:
        """The file name a stream was read from, for provenance (for requests with shards: every
        file, joined by ` + `)."""
        if stream == "requests" and any(SHARD_FILE_RE.fullmatch(f) for f in self.request_files):
            return " + ".join(self.request_files)
        return (self.manifest.get("files") or {}).get(stream, f"{stream}.jsonl")


def upgrade_manifest(manifest: dict[str, Any], path: Path) -> dict[str, Any]:
    """Bring an older manifest up to SCHEMA_VERSION through the chained upgrade_to_N steps."""
    version = manifest.get("schema_version")
    if version is None:
        raise BundleError(f"{path}: no schema_version; this is not a serving-ledger bundle "
                          "(re-record it with `make run`)")
    if not isinstance(version, int):
        raise BundleError(f"{path}: schema_version {version!r} is not an integer")
    if version > SCHEMA_VERSION:
        raise BundleError(f"{path}: schema_version {version} is newer than this tool reads "
                          f"({SCHEMA_VERSION}); upgrade serving-ledger")
    while version < SCHEMA_VERSION:
        step = UPGRADES.get(version + 1)
        if step is None:
            raise BundleError(f"{path}: schema_version {version} is older than any this tool "
                              f"can upgrade (oldest {min(UPGRADES, default=SCHEMA_VERSION)}); "
                              "re-record the round")
        manifest = step(manifest)
        version = manifest["schema_version"]
    return manifest


# upgrade_to_N(manifest_of_version_N_minus_1) -> manifest_of_version_N. Version 1 is the first.

# Version 1 named the embedded model with this English note after its name.
_V1_EMBEDDED_NOTE = " (embedded, random weights via --load-format dummy)"


def upgrade_to_2(manifest: dict[str, Any]) -> dict[str, Any]:
    """Version 2 states the model's load format as a field (`model.load_format`, "dummy" for
    random weights) where version 1 wrote it as a note in `model.name`."""
    model = dict(manifest.get("model") or {})
    name = model.get("name")
    if isinstance(name, str) and name.endswith(_V1_EMBEDDED_NOTE):
        model["name"] = name[: -len(_V1_EMBEDDED_NOTE)]
        model["load_format"] = "dummy"
    return {**manifest, "model": model, "schema_version": 2}


def upgrade_to_3(manifest: dict[str, Any]) -> dict[str, Any]:
    """Version 3 lets a round talk to several endpoints (`plan.engine.endpoints`): its scrapes'
    samples and its requests then carry the endpoint's index (`endpoint`). A version 2 bundle
    talked to one endpoint, so nothing in it changes."""
    return {**manifest, "schema_version": 3}


UPGRADES: dict[int, Any] = {2: upgrade_to_2, 3: upgrade_to_3}


# Streams read with every key checked for a repeat, and those whose `t` never goes back.
UNIQUE_KEY_STREAMS = tuple(s.name for s in STREAMS if s.unique_keys)
ORDERED_STREAMS = tuple(s.name for s in STREAMS if s.ordered)


def iter_jsonl(path: Path, warnings: list[str], fields: tuple[str, ...] = (),
               stream: str = "") -> Iterator[tuple[int, dict]]:
    """(line number, record) of a .jsonl or .jsonl.gz file; a truncated last line is reported
    and skipped, a file with no newline at all refused.

    Every record must be finite JSON holding FIELDS (a `t` a number) whose fields have the types
    bundle/schema.py gives STREAM, or BundleError names the line and field; lines and inflation
    are bounded (bundle/files.py).
    """
    loads = loads_unique if stream in UNIQUE_KEY_STREAMS else loads_finite
    last_t, last_n = None, 0
    for n, line, ended in lines_of(path):
        if not line.strip():
            continue
        where = f"{path} line {n}"
        try:
            rec = loads(line, where)
        except BundleError:
            if not ended:
                if n == 1:
                    raise no_newline(path, len(line)) from None
                warnings.append(f"{path.name} line {n}: truncated last line skipped")
                continue
            raise
        check_record(rec, where, fields)
        bad = record_problem(stream, rec) if stream else None
        if bad:
            raise BundleError(f"{where}: {bad}")
        if stream in ORDERED_STREAMS:
            if last_t is not None and rec["t"] < last_t:
                raise BundleError(f"{where}: 't' is {rec['t']!r}, before line {last_n}'s "
                                  f"{last_t!r}; a sampler's records are in time order (lines "
                                  "moved or merged from another bundle)")
            last_t, last_n = rec["t"], n
        yield n, rec


def check_point_events(path: Path, events: list[tuple[int, dict]]) -> None:
    """Refuse point events no run writes: a measure or end without its start, an end before its
    start, and a point started again after it ended ok (an id used twice: one run's requests
    would be taken for the other's), and a search verdict on a point that never started. A point started again after it failed or was cut short is
    a resumed round's re-run, and the later run counts."""
    open_at: dict[str, tuple[int, float]] = {}
    ended_ok: dict[str, int] = {}
    started: set[str] = set()
    for n, e in events:
        pid, ev = e.get("point"), e["event"]
        if pid is None:
            continue
        where = f"{path} line {n}"
        if ev == "search":     # a search sweep's verdict, written once the point has run
            if pid not in started:
                raise BundleError(f"{where}: the search verdict of point {pid!r} comes before "
                                  "the point started")
            continue
        if ev == "start":
            started.add(pid)
            if pid in ended_ok:
                raise BundleError(f"{where}: point {pid!r} starts again after it ended ok on line "
                                  f"{ended_ok[pid]}; a point id is used once")
            open_at[pid] = (n, e["t"])
        elif pid not in open_at:
            raise BundleError(f"{where}: the {ev} event of point {pid!r} has no start before it")
        elif e["t"] < open_at[pid][1]:
            raise BundleError(f"{where}: the {ev} of point {pid!r} at t={e['t']!r} is before its "
                              f"start at t={open_at[pid][1]!r} (line {open_at[pid][0]})")
        elif ev == "end":
            del open_at[pid]
            if e.get("status", "ok") == "ok":
                ended_ok[pid] = n


def point_coverage_warnings(points: list[dict], table: RequestTable, files: str) -> list[str]:
    """Warnings for requests of a point the points stream never starts (they are not counted),
    and for a started point with no request recorded."""
    started = {e["point"] for e in points if e["event"] == "start"}
    counts = table.point_counts()
    out = [f"{files}: {n:,} request(s) of point {pid!r}, which points.jsonl never starts, are "
           "not counted" for pid, n in counts.items() if pid not in started]
    out += [f"points.jsonl: point {pid!r} started but no request of it was recorded"
            for pid in sorted(started) if pid not in counts]
    return out


def read_bundle(path: str | os.PathLike) -> Bundle:
    """Read and validate a bundle directory; raise BundleError naming the file on bad input."""
    path = Path(path)
    mpath = path / "manifest.json"
    if bundle_file(path, "manifest.json") is None:
        raise BundleError(f"{mpath}: missing; not a bundle directory")
    manifest = read_manifest(mpath)
    if not isinstance(manifest, dict):
        raise BundleError(f"{mpath}: expected a JSON object")
    manifest = upgrade_manifest(manifest, mpath)
    unknown = set(manifest) - MANIFEST_KEYS
    if unknown:
        raise BundleError(f"{mpath}: unknown fields {sorted(unknown)} for format "
                          f"v{SCHEMA_VERSION}; the bundle was written by another tool version")
    missing = REQUIRED_KEYS - set(manifest)
    if missing:
        raise BundleError(f"{mpath}: missing fields {sorted(missing)}")
    if manifest["kind"] != KIND:
        raise BundleError(f"{mpath}: kind {manifest['kind']!r} is not {KIND!r}")
    if manifest["status"] not in STATUSES:
        raise BundleError(f"{mpath}: status {manifest['status']!r} not one of {sorted(STATUSES)}")
    if manifest["origin"] not in ORIGINS:
        raise BundleError(f"{mpath}: origin {manifest['origin']!r} not one of {sorted(ORIGINS)}")
    for key, kind, what in ([(k, dict, "a JSON object") for k in OBJECT_KEYS]
                            + [(k, list, "a JSON list") for k in LIST_KEYS]):
        if manifest.get(key) is not None and not isinstance(manifest[key], kind):
            raise BundleError(f"{mpath}: {key} must be {what}, not {manifest[key]!r:.60}")
    t0 = (manifest["clock"] or {}).get("t0_wall_unix")
    if not isinstance(t0, (int, float)) or isinstance(t0, bool):
        raise BundleError(f"{mpath}: clock.t0_wall_unix must be a number, not {t0!r:.60}")
    bad = manifest_problem(manifest)
    if bad:
        raise BundleError(f"{mpath}: {bad}")
    b = Bundle(path=path, manifest=manifest)
    files = {stream: stream_file(path, stream) for stream in stream_names(path)}
    for stream in SAMPLE_FILES:
        if stream != "requests" and files[stream] is not None:
            numbered = list(iter_jsonl(files[stream], b.warnings, RECORD_FIELDS[stream], stream))
            if stream == "points":
                check_point_events(files[stream], numbered)
            getattr(b, stream).extend(rec for _, rec in numbered)
    # Requests: requests.jsonl, then each worker's shard in k order, as one columnar table. A
    # closed bundle lists its shards in the manifest; a shard it does not list came from
    # elsewhere and would count its requests again.
    listed = manifest.get("files")
    if isinstance(listed, dict) and manifest.get("status") != "running":
        stray = [s for s in shard_streams(path) if files[s] is not None and s not in listed]
        if stray:
            raise BundleError(f"{files[stray[0]]}: not among the manifest's files (a closed bundle "
                              "lists every request shard it wrote); move it out of the bundle")
    req = [files[s] for s in ["requests"] + shard_streams(path) if files[s] is not None]
    b.request_table = read_request_files(req, b.warnings, RECORD_FIELDS["requests"])
    b.request_files = [p.name for p in req]
    b.warnings.extend(point_coverage_warnings(b.points, b.request_table,
                                              " + ".join(b.request_files) or "requests.jsonl"))
    bad = request_time_problem(b.request_table)
    if bad:
        raise BundleError(f"{' + '.join(b.request_files)}: {bad}")
    repeated = repeated_requests(b.request_table)
    if repeated:
        raise BundleError(f"{' + '.join(b.request_files)}: {repeated} request record(s) repeat "
                          "another's point, send, first-token and end times (a line written twice); "
                          "every request would be counted again")
    return b


# How far a chunk's time may lie outside its request's send-to-end window: the kernel's receive
# stamps are put on the bundle's clock by an offset read once, good to well under a second.
CHUNK_WINDOW_SLACK_S = 1.0


def request_time_problem(table: RequestTable) -> str | None:
    """Why the request times cannot be what the client recorded, in words naming the first such
    request, or None: an ok request with no first-token time (the client marks a request ok only
    once a token arrived), a chunk outside its request's send-to-end window."""
    import numpy as np
    if not len(table):
        return None
    def which(k: int) -> str:
        rec = table[int(k)]
        return f"request i={rec.get('i')!r:.20} of point {rec.get('point')!r:.70}"
    ok, first = table.col("ok"), table.col("t_first")
    lost = np.flatnonzero(ok & np.isnan(first))
    if len(lost):
        return (f"{which(lost[0])} is ok with no first-token time; the client marks a request ok "
                "only once a token arrived")
    t, _, off = table.chunks()
    has = np.flatnonzero(np.diff(off) > 0)      # requests with chunks; per request, its extremes
    if not len(has):
        return None
    lo, hi = np.minimum.reduceat(t, off[has]), np.maximum.reduceat(t, off[has])
    send, end = table.col("t_send")[has], table.col("t_end")[has]
    outside = ((~np.isnan(send) & (lo < send - CHUNK_WINDOW_SLACK_S))
               | (~np.isnan(end) & (hi > end + CHUNK_WINDOW_SLACK_S)))
    if outside.any():
        k = int(np.flatnonzero(outside)[0])
        at = lo[k] if lo[k] < send[k] - CHUNK_WINDOW_SLACK_S else hi[k]
        return (f"{which(has[k])} has a chunk at t={float(at)!r}, outside its send-to-end window "
                f"[{float(send[k])!r}, {float(end[k])!r}]; a chunk arrives while its request streams")
    return None


def repeated_requests(table: RequestTable) -> int:
    """Records whose point, send, first-token and end times all equal an earlier record's (two
    requests never share all three to the microsecond)."""
    import numpy as np
    cols = [table.col(c) for c in ("t_send", "t_first", "t_end")]
    has = ~np.isnan(cols[0])
    if not has.any():
        return 0
    rows = np.stack([table.col("point")[has].astype(np.float64)]
                    + [np.nan_to_num(c[has], nan=-1.0) for c in cols], axis=1)
    return int(len(rows) - len(np.unique(rows, axis=0)))


MAX_MANIFEST_BYTES = 16 << 20
# An engine log is read whole; a day of vLLM's stats lines at 10 s is about 3 MB.
MAX_LOG_BYTES = 256 << 20


def read_manifest(mpath: Path) -> Any:
    """The JSON of a manifest.json: UTF-8, finite numbers, at most MAX_MANIFEST_BYTES."""
    with open(mpath, "rb") as f:
        data = f.read(MAX_MANIFEST_BYTES + 1)
    if len(data) > MAX_MANIFEST_BYTES:
        raise BundleError(f"{mpath}: over {MAX_MANIFEST_BYTES >> 20} MiB; not a manifest")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BundleError(f"{mpath}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset "
                          f"{e.start})") from None
    return loads_unique(text, str(mpath), whole_file=True)


def find_bundles(root: str | os.PathLike) -> list[Path]:
    """Every bundle directory (one holding manifest.json) below ROOT, in sorted order."""
    return sorted(p.parent for p in Path(root).rglob("manifest.json"))
