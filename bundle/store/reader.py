"""read_bundle: a bundle read back and checked whole, its requests as one columnar table."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bundle.files import (
    BundleError,
    bundle_file,
    run_dir,
    server_log_name,
    stream_file,
)
from bundle.request_table.fileread import read_request_files
from bundle.request_table.table import RequestTable
from bundle.schema import STREAMS, manifest_problem
from bundle.store.manifest import (
    KIND,
    LIST_KEYS,
    MANIFEST_KEYS,
    OBJECT_KEYS,
    ORIGINS,
    REQUIRED_KEYS,
    SCHEMA_VERSION,
    STATUSES,
    read_manifest,
    upgrade_manifest,
)
from bundle.store.streams import (
    RECORD_FIELDS,
    SAMPLE_FILES,
    SHARD_FILE_RE,
    iter_jsonl,
    shard_streams,
    stream_names,
)

# Every stream but the requests (a columnar table) is read into a list of records under its name.
RECORD_STREAMS = tuple(s.name for s in STREAMS if s.name != "requests")


@dataclass
class Bundle:
    """A bundle read back: manifest plus raw sample lists, with any read warnings.

    Each stream bundle/schema.py declares is a list of records in `samples`, read as the
    attribute of its name (`bundle.gpu`); the requests are a columnar RequestTable
    (`request_table`, what the report reads), `requests` gives them as record dicts, built on
    first use (slow for a large round).
    """

    path: Path
    manifest: dict[str, Any]
    samples: dict[str, list[dict]] = field(
        default_factory=lambda: {name: [] for name in RECORD_STREAMS})
    warnings: list[str] = field(default_factory=list)
    request_table: RequestTable = field(default_factory=RequestTable.empty)
    request_files: list[str] = field(default_factory=list)  # read, in order
    _requests: list[dict] | None = field(default=None, repr=False, compare=False)

    def __getattr__(self, name: str) -> list[dict]:
        """A stream's records by the stream's name (`bundle.points`, `bundle.gpu`, ...)."""
        samples = self.__dict__.get("samples")
        if samples is None or name not in samples:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return samples[name]

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
            b.samples[stream].extend(rec for _, rec in numbered)
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


# An engine log is read whole; a day of vLLM's stats lines at 10 s is about 3 MB.
MAX_LOG_BYTES = 256 << 20


def find_bundles(root: str | os.PathLike) -> list[Path]:
    """Every bundle directory (one holding manifest.json) below ROOT, in sorted order."""
    return sorted(p.parent for p in Path(root).rglob("manifest.json"))
