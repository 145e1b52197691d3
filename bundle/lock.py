"""One writer per bundle: a lock held for the writer's whole life, with its holder's pid.

The lock is an flock on `writer.lock` inside the bundle directory, which holds the pid of the
process holding it. The kernel drops an flock when its process ends however it ends (SIGKILL
included), so a lock that can be taken while the file still names a pid is stale: its holder
is gone, and the new writer takes it over and says so. A writer that ends cleanly empties the
file. The file is never removed: a writer that unlinked it could leave a second writer holding
a lock on a file no one else opens.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from bundle.files import BundleError

LOCK_NAME = "writer.lock"


class BundleLock:
    """The lock of bundle directory PATH, taken on entry (BundleError when another process
    holds it) and released on exit; `took_over` names the pid of a stale lock taken over."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.fd: int | None = None
        self.took_over: int | None = None

    def acquire(self) -> "BundleLock":
        self.path.mkdir(parents=True, exist_ok=True)
        lock = self.path / LOCK_NAME
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as e:
            raise BundleError(f"{lock}: cannot open it ({e.strerror or e}); a bundle's lock is "
                              "a regular file") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _pid_in(fd)
            os.close(fd)
            who = f"process {holder}" if holder else "another process"
            raise BundleError(f"{self.path}: {who} is writing this bundle ({lock} is locked); "
                              "wait for it to end or stop it, then --resume") from None
        except OSError as e:
            os.close(fd)
            raise BundleError(f"{lock}: cannot lock it ({e.strerror or e})") from None
        old = _pid_in(fd)
        if old and old != os.getpid():
            self.took_over = old
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        os.fsync(fd)
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is None:
            return
        os.ftruncate(self.fd, 0)    # an empty lock file: no writer, nothing stale
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
        self.fd = None

    def __enter__(self) -> "BundleLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _pid_in(fd: int) -> int | None:
    """The pid the lock file FD names, None when it is empty or holds no pid."""
    text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    return int(text) if text.isdigit() and 0 < int(text) <= 1 << 22 else None
