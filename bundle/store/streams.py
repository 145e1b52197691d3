"""A bundle's sample streams: their files, the request shards, and their lines read strictly."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

from bundle.files import (
    BundleError,
    check_record,
    lines_of,
    loads_finite,
    loads_unique,
    no_newline,
)
from bundle.schema import STREAMS, record_problem

# The sample streams, as bundle/schema.py declares them (STREAMS), in their order.
SAMPLE_FILES = tuple(s.name for s in STREAMS)
# Fields every record of a stream must carry (the report reads them unguarded); "t" a number.
RECORD_FIELDS = {s.name: s.required for s in STREAMS}
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
