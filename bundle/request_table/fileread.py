"""Request files read in blocks: plain or gzip, in parallel processes where they are large."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator, Sequence

from bundle.allocator import keep_freed_memory
from bundle.files import (
    INFLATE_ERRORS,
    MAX_INFLATE_RATIO,
    MAX_LINE_BYTES,
    BundleError,
    open_stream,
)
from bundle.request_table.blockparse import fast_block, slow_block
from bundle.request_table.columns import Block, Builder
from bundle.request_table.table import RequestTable

BLOCK_BYTES = 32 << 20
PARALLEL_BYTES = 256 << 20      # request files of more text than this are parsed in parallel
MAX_PARSE_WORKERS = 8

try:    # ISA-L's gzip decompresses a large request file 2-3x faster than zlib; same bytes
    from isal.isal_zlib import decompressobj
except ImportError:     # pragma: no cover - isal is a dependency where it installs
    from zlib import decompressobj


def line_blocks(path: Path, size: int | None = None) -> Iterator[tuple[bytes, int, bool]]:
    """(whole lines, their count, False) blocks of about SIZE bytes (BLOCK_BYTES) of PATH
    (plain or gzip), then (the unterminated rest, 1, True) if the file does not end in a newline."""
    rest, lines = b"", 0
    with open_stream(path) as f:
        while True:
            raw = f.read(size or BLOCK_BYTES)
            if not raw:
                break
            data = rest + raw if rest else raw
            cut = data.rfind(b"\n") + 1
            if cut == 0:
                rest = data
                if len(rest) > MAX_LINE_BYTES:
                    raise BundleError(f"{path} line {lines + 1}: longer than "
                                      f"{MAX_LINE_BYTES >> 20} MiB without a newline; not a "
                                      "line of samples")
                continue
            rest = data[cut:]
            block = data[:cut] if cut < len(data) else data
            del data
            lines += block.count(b"\n")
            yield block, block.count(b"\n"), False
    if rest:
        yield rest, 1, True


def _read_file(path: Path, warnings: list[str], b: Builder, fields: tuple[str, ...]) -> None:
    # A plain file's size bounds its records' chunks and heads; a compressed one grows as read.
    size = path.stat().st_size
    b.reserve(size * (1 if path.suffix != ".gz" else 4))
    workers = parse_workers(size if path.suffix != ".gz" else size * 4)
    lineno = 1
    for get_block, nlines, tail, blk in _parsed_blocks(path, workers):
        if blk is None:
            block = get_block()
            if not tail and block and not block.endswith(b"\n"):
                # A gzip member holding the file's unterminated last line after whole ones.
                cut = block.rfind(b"\n") + 1
                if cut:
                    b.add(slow_block(block[:cut].split(b"\n")[:-1], lineno, path, False,
                                      warnings, fields))
                blk = slow_block([block[cut:]], lineno + block.count(b"\n", 0, cut), path, True,
                                  warnings, fields)
            else:
                blk = slow_block(block.split(b"\n")[:-1] if not tail else [block], lineno, path,
                                  tail, warnings, fields)
        b.add(blk)
        lineno += nlines


def parse_workers(text_bytes: int) -> int:
    """Processes to parse a request file of TEXT_BYTES with: 1 (in this process) below
    PARALLEL_BYTES, else one per core this process may use, up to MAX_PARSE_WORKERS."""
    if text_bytes < PARALLEL_BYTES:
        return 1
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:      # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_PARSE_WORKERS))


def _parse(block: bytes) -> tuple[Block | None, int]:
    """A worker's task: BLOCK parsed in bulk (None when it must be read line by line)."""
    return fast_block(block)


def _parse_range(path: str, start: int, end: int) -> tuple[Block | None, int]:
    """A worker's task: the whole lines at bytes [START, END) of PATH parsed in bulk."""
    return fast_block(_read_range(path, start, end))


def _parse_member(path: str, start: int, end: int) -> tuple[Block | None, int]:
    """A worker's task: the gzip member at bytes [START, END) of PATH inflated and parsed in
    bulk (None when it is not whole lines of the usual shape)."""
    block = _inflate_range(path, start, end)
    if not block.endswith(b"\n"):
        return None, block.count(b"\n") + 1
    return fast_block(block)


def _inflate_range(path: str | Path, start: int, end: int) -> bytes:
    """The gzip member at bytes [START, END) of PATH inflated, refused past the bound every
    compressed stream has (the member's size trailer is not trusted: it can lie)."""
    member = _read_range(path, start, end)
    limit = max(MAX_LINE_BYTES, MAX_INFLATE_RATIO * len(member))
    try:
        d = decompressobj(wbits=31)
        data = d.decompress(member, limit + 1)
    except INFLATE_ERRORS as e:
        raise BundleError(f"{path}: corrupt compressed file ({e}); restore it from git") from None
    if len(data) > limit:
        raise BundleError(f"{path}: a gzip member of {len(member):,} bytes inflates to over "
                          f"{limit:,}, more than {MAX_INFLATE_RATIO} times its size; a "
                          "decompression bomb, not a recorded stream")
    if not d.eof:
        raise BundleError(f"{path}: corrupt compressed file (a gzip member ends early); restore "
                          "it from git")
    return data


# A member header as gzip.compress(..., mtime=0) writes it: no flags, no time. In compressed
# data the 8 bytes stand by chance about once in 2^64 positions.
_MEMBER_HEAD = b"\x1f\x8b\x08\x00\x00\x00\x00\x00"


def _gzip_members(path: Path) -> list[tuple[int, int]]:
    """Byte ranges of the gzip members of PATH when it starts with one of the kind
    BundleWriter writes (else [], and the file is inflated in one stream)."""
    size = path.stat().st_size
    starts: list[int] = []
    keep = len(_MEMBER_HEAD) - 1
    with open(path, "rb") as f:
        base, carry = 0, b""
        while True:
            part = f.read(BLOCK_BYTES)
            if not part:
                break
            data = carry + part
            at = data.find(_MEMBER_HEAD)
            while at >= 0:
                starts.append(base - len(carry) + at)
                at = data.find(_MEMBER_HEAD, at + 1)
            carry = data[-keep:]
            base += len(part)
            if not starts:
                return []       # not a file of independent members from its first bytes on
    if not starts or starts[0] != 0:
        return []
    starts = sorted(set(starts))
    return list(zip(starts, starts[1:] + [size]))


def _read_range(path: str | Path, start: int, end: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(start)
        return f.read(end - start)


def _line_ranges(path: Path) -> tuple[list[tuple[int, int]], tuple[int, int] | None]:
    """Byte ranges of whole lines of a plain PATH, about BLOCK_BYTES each, and the range of an
    unterminated last line (None when the file ends with a newline)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        tail = None
        if size:
            back = min(size, 1 << 20)
            f.seek(size - back)
            end_part = f.read(back)
            if not end_part.endswith(b"\n"):
                cut = end_part.rfind(b"\n")
                if cut < 0 and back < size:
                    raise ValueError("last line over 1 MiB")
                whole = size - back + cut + 1
                tail, size = (whole, path.stat().st_size), whole
        ranges, start = [], 0
        while start < size:
            end = start + BLOCK_BYTES
            if end >= size:
                end = size
            else:
                f.seek(end)
                while True:
                    part = f.read(1 << 16)
                    if not part:
                        end = size
                        break
                    i = part.find(b"\n")
                    if i >= 0:
                        end = min(end + i + 1, size)
                        break
                    end += len(part)
            ranges.append((start, end))
            start = end
    return ranges, tail


def _parsed_blocks(path: Path, workers: int) -> Iterator[tuple[Any, int, bool, Block | None]]:
    """(a function returning the block's bytes, its line count, is the unterminated tail, its
    bulk parse or None) for each block of PATH, in order. With WORKERS > 1 the bulk parses run
    in that many processes, a few blocks ahead (a plain file's workers read their own byte
    ranges); a block whose parse failed is read line by line by the caller."""
    if workers <= 1:
        for block, nlines, tail in line_blocks(path):
            yield (lambda block=block: block), nlines, tail, None if tail else fast_block(block)[0]
        return
    import multiprocessing as mp
    from collections import deque
    from concurrent.futures import ProcessPoolExecutor
    ahead: deque = deque()
    with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"),
                             initializer=keep_freed_memory) as pool:
        members = _gzip_members(path) if path.suffix == ".gz" else []
        try:
            ranges, tail = _line_ranges(path) if path.suffix != ".gz" else (None, None)
        except ValueError:      # an unterminated last line too long to find: read as .gz is
            ranges = None
        if len(members) > 1:
            # Independent gzip members (as BundleWriter.close() writes them): each worker
            # inflates and parses its own; the line count of a member is known once read.
            items = [((lambda a=a, z=z: _inflate_range(path, a, z)), False,
                      lambda a=a, z=z: pool.submit(_parse_member, str(path), a, z))
                     for a, z in members]
        elif ranges is not None:
            items = [((lambda a=a, z=z: _read_range(path, a, z)), False,
                      lambda a=a, z=z: pool.submit(_parse_range, str(path), a, z)) for a, z in ranges]
            if tail:
                items.append(((lambda t=tail: _read_range(path, *t)), True, None))
        else:
            items = (((lambda block=block: block), tail,
                      None if tail else (lambda block=block: pool.submit(_parse, block)))
                     for block, _nlines, tail in line_blocks(path))
        for get_block, tail, submit in items:
            ahead.append((get_block, tail, submit() if submit else None))
            while len(ahead) > 2 * workers:
                yield _resolved(ahead.popleft())
        while ahead:
            yield _resolved(ahead.popleft())


def _resolved(item: tuple) -> tuple[Any, int, bool, Block | None]:
    get_block, tail, fut = item
    if fut is None:
        return get_block, 1, tail, None
    blk, nlines = fut.result()
    return get_block, nlines, tail, blk


def read_request_files(paths: Sequence[Path], warnings: list[str],
                       fields: tuple[str, ...] = ("point",)) -> RequestTable:
    """The requests of PATHS (requests.jsonl and its shards, plain or .gz), in order, as one table."""
    keep_freed_memory()     # the table and every statistic over it are large arrays
    b = Builder()
    for p in paths:
        _read_file(Path(p), warnings, b, fields)
    return RequestTable(b.store())
