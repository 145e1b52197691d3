"""Reading a bundle's files with limits: one file per stream, no symlink out of the bundle or in
a loop, lines of bounded length, gzip of bounded inflation, finite numbers, UTF-8 text.

Every refusal is a BundleError whose message names the file (and line) and what is wrong, so a
damaged or hostile bundle costs at most MAX_LINE_BYTES of memory per line read and stops at the
first bad line instead of being read whole.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import os
import zlib
from pathlib import Path
from typing import Any, BinaryIO, Iterator

import orjson

try:    # ISA-L's gzip decompresses a large request file 2-3x faster than zlib; same bytes
    from isal.igzip import open as gunzip_open
    from isal.isal_zlib import error as _InflateError
except ImportError:     # pragma: no cover - isal is a dependency where it installs
    gunzip_open = gzip.open
    _InflateError = zlib.error

# The longest line a stream may hold: a scrape is ~30 KB, a request of 128 k streamed tokens
# ~4 MB; a longer "line" is a damaged file (a run of zero bytes, random data).
MAX_LINE_BYTES = 64 << 20
# Recorded streams inflate 4x (requests) to 31x (an idle /metrics series); deflate reaches
# ~1000x on repeated bytes. Past this ratio, once over INFLATE_FLOOR, a .gz file is refused.
MAX_INFLATE_RATIO = 100
INFLATE_FLOOR = 16 << 20
INFLATE_ERRORS = (EOFError, gzip.BadGzipFile, zlib.error, _InflateError)


class BundleError(Exception):
    """A bundle that cannot be read; the message names the file and the fix."""


def server_log_name(k: int = 0) -> str:
    """The file server K of a round writes its log to: server 0 (the only one of most rounds)
    `server.log`, server k of a round against several `server.k.log`."""
    return "server.log" if k == 0 else f"server.{k}.log"


def bundle_dir(path: str | Path) -> Path:
    """The bundle folder PATH names: PATH/bundle where PATH is a run directory holding one, else PATH."""
    d = Path(path)
    return d / "bundle" if (d / "bundle" / "manifest.json").exists() else d


def run_dir(bundle: str | Path) -> Path:
    """The run directory of a bundle folder: its parent where it is a run's bundle/, else the folder itself."""
    d = Path(bundle)
    return d.parent if d.name == "bundle" else d


def bundle_file(directory: Path, name: str) -> Path | None:
    """DIRECTORY/NAME if it exists as a regular file inside the bundle, None if absent.

    A symlink is followed only when it resolves inside the bundle; one that loops, dangles or
    leaves the bundle is refused (a bundle is a self-contained directory of samples).
    """
    p = directory / name
    if not os.path.lexists(p):
        return None
    if p.is_symlink():
        try:
            real = p.resolve(strict=True)
        except (OSError, RuntimeError) as e:   # RuntimeError: a loop, before Python 3.13
            raise BundleError(f"{p}: a symlink that loops or leads nowhere ({e}); replace it "
                              "with the file") from None
        if not real.is_relative_to(directory.resolve()):
            raise BundleError(f"{p}: a symlink to {real}, outside the bundle; copy the file in")
    if not p.is_file():
        raise BundleError(f"{p}: not a regular file")
    return p


def stream_file(directory: Path, stream: str) -> Path | None:
    """The one file of STREAM (`STREAM.jsonl` or `STREAM.jsonl.gz`), None if neither exists."""
    plain = bundle_file(directory, f"{stream}.jsonl")
    packed = bundle_file(directory, f"{stream}.jsonl.gz")
    if plain and packed:
        raise BundleError(f"{directory}: both {plain.name} and {packed.name} are present, so "
                          f"every record would count twice; keep only the one the manifest's "
                          f"files lists")
    return plain or packed


class _ShortReads(io.RawIOBase):
    """A file read at most 64 KiB at a time, so a gzip reader does not read far ahead of what
    it inflates (the ratio of _BoundedInflate is then measured at that granularity)."""

    def __init__(self, f: BinaryIO):
        self.f = f

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        data = self.f.read(min(len(buf), 1 << 16))
        buf[:len(data)] = data
        return len(data)


class _BoundedInflate:
    """A gzip file read as bytes, refused once what it inflated so far is over MAX_INFLATE_RATIO
    times the compressed bytes read so far (past INFLATE_FLOOR): a bomb stops early."""

    def __init__(self, path: Path):
        self.path, self.raw = path, open(path, "rb")
        self.f = gunzip_open(_ShortReads(self.raw), "rb")
        self.inflated = 0

    def read(self, n: int) -> bytes:
        try:
            data = self.f.read(n)
        except INFLATE_ERRORS as e:
            raise BundleError(f"{self.path}: corrupt compressed file ({e}); restore it from "
                              "git") from None
        self.inflated += len(data)
        if self.inflated > max(INFLATE_FLOOR, MAX_INFLATE_RATIO * self.raw.tell()):
            raise BundleError(f"{self.path}: {self.raw.tell():,} compressed bytes inflate to "
                              f"over {self.inflated:,}, more than {MAX_INFLATE_RATIO} times; a "
                              "decompression bomb, not a recorded stream")
        return data

    def close(self) -> None:
        self.f.close()
        self.raw.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_stream(path: Path) -> BinaryIO | _BoundedInflate:
    """PATH opened for reading bytes; a .gz file inflated under the ratio bound."""
    return _BoundedInflate(path) if path.suffix == ".gz" else open(path, "rb")


def lines_of(path: Path, block: int = 1 << 20) -> Iterator[tuple[int, bytes, bool]]:
    """(line number, line without its newline, ended by a newline) of PATH, each line at most
    MAX_LINE_BYTES long (else BundleError), read in blocks of BLOCK bytes."""
    rest, n = b"", 0
    with open_stream(path) as f:
        while True:
            data = f.read(block)
            if not data:
                break
            parts = (rest + data).split(b"\n") if rest else data.split(b"\n")
            rest = parts.pop()
            for line in parts:
                n += 1
                yield n, line, True
            if len(rest) > MAX_LINE_BYTES:
                raise BundleError(f"{path} line {n + 1}: longer than {MAX_LINE_BYTES >> 20} MiB "
                                  "without a newline; not a line of samples")
    if rest:
        yield n + 1, rest, False


class NotFinite(ValueError):
    """A JSON number that is NaN or infinite."""


def refuse_constant(name: str) -> float:
    raise NotFinite(f"{name} is not a finite number")


def finite_float(text: str) -> float:
    x = float(text)
    if not math.isfinite(x):
        raise NotFinite(f"{text} is not a finite number")
    return x


def loads_finite(line: bytes, where: str) -> Any:
    """The JSON value of LINE, finite numbers only; BundleError naming WHERE otherwise."""
    try:
        return orjson.loads(line)   # refuses NaN, Infinity and overflowing numbers
    except orjson.JSONDecodeError:
        pass
    return _json_value(line, where)   # what orjson refuses and json reads: integers over 64 bits


def loads_unique(line: bytes | str, where: str, whole_file: bool = False) -> Any:
    """The JSON value of LINE as loads_finite reads it, refusing an object with a key twice
    (WHOLE_FILE: LINE is a file's text, and a syntax error names its line)."""
    return _json_value(line, where, _unique_keys, whole_file)


def _json_value(text: bytes | str, where: str, pairs_hook=None, whole_file: bool = False) -> Any:
    """TEXT parsed by json with finite numbers only (and PAIRS_HOOK), or BundleError naming WHERE."""
    try:
        return json.loads(text, object_pairs_hook=pairs_hook, parse_constant=refuse_constant,
                          parse_float=finite_float)
    except DuplicateKey as e:
        raise BundleError(f"{where}: {e}; which one is meant cannot be known") from None
    except NotFinite as e:
        raise BundleError(f"{where}: {e}; a bundle holds finite numbers only") from None
    except UnicodeDecodeError as e:
        raise BundleError(f"{where}: not UTF-8 text (byte 0x{text[e.start]:02x} at offset "
                          f"{e.start})") from None
    except json.JSONDecodeError as e:
        at = f" line {e.lineno}" if whole_file else ""
        raise BundleError(f"{where}{at}: not valid JSON ({e.msg})") from None
    except RecursionError:
        raise BundleError(f"{where}: JSON nested deeper than it can be read; no record of a "
                          "bundle nests past a few levels") from None


def no_newline(path: Path, size: int) -> BundleError:
    """The error for a stream file whose bytes hold no newline at all: not a truncated last line
    (a crash loses one line, never every line) but records run together, or not a stream."""
    return BundleError(f"{path} line 1: {size:,} bytes without a newline; a stream holds one JSON "
                       "record per line")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise DuplicateKey(f"the key {dup!r} appears twice in one object")
    return dict(pairs)


class DuplicateKey(ValueError):
    """A JSON object that names one key twice (a reader would keep either)."""


def check_record(rec: Any, where: str, fields: tuple[str, ...] = ()) -> dict:
    """REC if it is a JSON object holding FIELDS (a `t` a number); else BundleError naming WHERE."""
    if not isinstance(rec, dict):
        raise BundleError(f"{where}: expected a JSON object")
    for name in fields:
        if name not in rec:
            raise BundleError(f"{where}: the record has no {name!r} field")
    if "t" in fields and (not isinstance(rec["t"], (int, float)) or isinstance(rec["t"], bool)):
        raise BundleError(f"{where}: 't' is {rec['t']!r}, not a number")
    return rec
