"""One writer per bundle: a second writer is refused naming the holder's pid, a lock whose
process is gone is taken over, each tried with two real processes."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from bundle.files import BundleError
from bundle.lock import LOCK_NAME, BundleLock
from tests.conftest import ROOT

# A second process that takes the lock, says so, and holds it until its stdin closes.
HOLDER = ("import sys; from bundle.lock import BundleLock; lock = BundleLock(sys.argv[1]).acquire(); "
          "print('held', flush=True); sys.stdin.read(); lock.release()")


def hold(path):
    p = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], cwd=ROOT, text=True,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert p.stdout.readline().strip() == "held"
    return p


def test_a_second_writer_is_refused_naming_the_holder_and_may_write_once_it_ends(tmp_path):
    out = tmp_path / "b"
    holder = hold(out)
    try:
        assert (out / LOCK_NAME).read_text().strip() == str(holder.pid)
        with pytest.raises(BundleError, match=rf"process {holder.pid} is writing this bundle"):
            BundleLock(out).acquire()
    finally:
        holder.stdin.close()
        assert holder.wait(10) == 0
    assert (out / LOCK_NAME).read_text() == ""      # a clean end leaves no pid behind
    with BundleLock(out) as lock:
        assert lock.took_over is None


def test_serving_ledger_run_on_a_held_bundle_exits_2_with_one_line(tmp_path):
    out = tmp_path / "b"
    holder = hold(out)
    try:
        # Refused before anything is contacted: the endpoint (the discard port) is never asked.
        r = subprocess.run([sys.executable, "-m", "serving_ledger", "run", "--out", str(out),
                            "--resume", "--endpoint", "http://127.0.0.1:9", "--concurrency", "1"],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
    finally:
        holder.stdin.close()
        holder.wait(10)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and f"process {holder.pid} is writing this bundle" in lines[0]
    assert not (out / "manifest.json").exists()


def test_a_lock_whose_process_was_killed_is_taken_over_and_said(tmp_path):
    out = tmp_path / "b"
    holder = hold(out)
    holder.send_signal(signal.SIGKILL)
    holder.wait(10)
    assert (out / LOCK_NAME).read_text().strip() == str(holder.pid)    # stale: its pid is left
    with BundleLock(out) as lock:
        assert lock.took_over == holder.pid
        assert (out / LOCK_NAME).read_text().strip() != str(holder.pid)


def test_a_lock_file_that_is_a_symlink_is_refused(tmp_path):
    out = tmp_path / "b"
    out.mkdir()
    (out / LOCK_NAME).symlink_to(tmp_path / "elsewhere")
    with pytest.raises(BundleError, match="cannot open it"):
        BundleLock(out).acquire()
    assert not (tmp_path / "elsewhere").exists()
