"""The one reader of the text files a user names (plans, slo.toml, traces, datasets, prompts,
model configs): a regular file, at most a bounded size, strictly UTF-8, and for TOML, nested
no deeper than MAX_DEPTH. Every refusal is one exception (the caller's class) whose message
starts with where the file was named."""

from __future__ import annotations

import os
import stat
import tomllib
from pathlib import Path
from typing import Any

# Deeper than this, a TOML value is no plan or SLO this tool writes (theirs nest 3 deep).
MAX_DEPTH = 16


class TextFileError(ValueError):
    """A text file that cannot be read; the message names it."""


def read_text_file(path: str | Path, where: str, limit: int,
                   error: type[Exception] = TextFileError) -> str:
    """The UTF-8 text of PATH, up to LIMIT bytes; ERROR led by WHERE for anything else."""
    try:
        # Opened without blocking and checked before any read: a FIFO would wait for a writer
        # forever, a device (/dev/zero) never end.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise error(f"{where}: does not exist") from None
    except OSError as e:
        raise error(f"{where}: {e.strerror or e}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise error(f"{where}: not a regular file (a pipe, a device or a directory)")
        os.set_blocking(fd, True)
        with open(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise error(f"{where}: {e.strerror or e}") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise error(f"{where}: over {_size(limit)}; not a file this tool reads")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(f"{where}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset "
                    f"{e.start})") from None


def read_toml_file(path: str | Path, where: str, limit: int,
                   error: type[Exception] = TextFileError) -> dict[str, Any]:
    """The TOML table of PATH, read as read_text_file reads it and nested at most MAX_DEPTH deep."""
    text = read_text_file(path, where, limit, error)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise error(f"{where}: not TOML: {e}") from None
    except RecursionError:
        raise error(f"{where}: nested deeper than {MAX_DEPTH} levels; not a file this tool "
                    "reads") from None
    deep = _deeper_than(data, MAX_DEPTH)
    if deep is not None:
        raise error(f"{where}: {deep or 'a value'} is nested deeper than {MAX_DEPTH} levels; "
                    "not a file this tool reads")
    return data


def _deeper_than(value: Any, depth: int, key: str = "") -> str | None:
    """The key of the first table or list of VALUE nested more than DEPTH levels, None if none is."""
    if not isinstance(value, (dict, list)):
        return None
    if depth == 0:
        return key
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for k, v in items:
        sub = f"{key}.{k}" if isinstance(value, dict) and key else (
            str(k) if isinstance(value, dict) else f"{key}[{k}]")
        found = _deeper_than(v, depth - 1, sub)
        if found is not None:
            return found
    return None


def _size(n: int) -> str:
    return f"{n >> 30} GiB" if n >= 1 << 30 else f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"
