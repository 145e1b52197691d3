"""Hostile bundles against the real command line (issue 16): each case exits 0 or 2, never with
a traceback, with one line naming the file; large files are read in bounded memory and time.

Every bundle is the recorded round-1 bundle (runs/round-1) damaged here, by hand, the way a
careless copy, a bad disk or a hostile tester would.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

from tests.conftest import ROOT

ROUND = ROOT / "runs" / "round-1" / "bundle"
PEAK_RSS_LIMIT = 400 << 20     # a reader refusing a 1-2 GB file stays under this (was 3-5 GB)
TIME_LIMIT_S = 30


# Runs `python -m serving_ledger` and, at its exit, writes the process's peak resident memory (VmHWM,
# counted from its exec, unlike a forked child's ru_maxrss which starts at pytest's own).
_MEASURED = """
import atexit, runpy, sys
PEAK_FILE = sys.argv[1]
def peak():
    with open(PEAK_FILE, "w") as out:
        out.write(next(x for x in open("/proc/self/status") if x.startswith("VmHWM")).split()[1])
atexit.register(peak)
sys.argv = ["serving_ledger"] + sys.argv[2:]
runpy.run_module("serving_ledger", run_name="__main__")
"""


def run_measured(tmp: Path, *args: str) -> tuple[int, str, int, float]:
    """(exit status, stderr, peak RSS in bytes, seconds) of `python -m serving_ledger ARGS`."""
    peak = tmp / "peak_kib"
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _MEASURED, str(peak), *args], cwd=ROOT,
                          capture_output=True, timeout=300)
    seconds = time.perf_counter() - t0
    return (proc.returncode, proc.stderr.decode("utf-8", "replace"),
            int(peak.read_text()) * 1024, seconds)


def refused(tmp: Path, bundle: Path, *needles: str) -> tuple[str, int, float]:
    """`report summary` refuses BUNDLE: exit 2, one line, no traceback, naming NEEDLES."""
    code, err, rss, seconds = run_measured(tmp, "summary", str(bundle))
    assert "Traceback" not in err, err[-3000:]
    assert code == 2, (code, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0], rss, seconds


@pytest.fixture
def bundle(tmp_path) -> Path:
    """A copy of round 1's recorded bundle, to damage."""
    return Path(shutil.copytree(ROUND, tmp_path / "b"))


def plain_requests(bundle: Path) -> Path:
    """Round 1's requests uncompressed into requests.jsonl (the .gz removed)."""
    gz = bundle / "requests.jsonl.gz"
    p = bundle / "requests.jsonl"
    p.write_bytes(gzip.decompress(gz.read_bytes()))
    gz.unlink()
    return p


def test_both_forms_of_a_stream_are_refused_not_counted_twice(bundle, tmp_path):
    (bundle / "requests.jsonl").write_bytes(gzip.decompress((bundle / "requests.jsonl.gz").read_bytes()))
    refused(tmp_path, bundle, "both requests.jsonl and requests.jsonl.gz are present",
            "count twice")


def test_both_forms_of_a_shard_are_refused(bundle, tmp_path):
    p = plain_requests(bundle)
    p.rename(bundle / "requests.w0.jsonl")
    shutil.copy(bundle / "requests.w0.jsonl", bundle / "requests.w0.jsonl.gz.src")
    with gzip.open(bundle / "requests.w0.jsonl.gz", "wb") as f:
        f.write((bundle / "requests.w0.jsonl.gz.src").read_bytes())
    (bundle / "requests.w0.jsonl.gz.src").unlink()
    refused(tmp_path, bundle, "requests.w0.jsonl and requests.w0.jsonl.gz")


def test_symlink_loop_is_refused_not_read_as_no_requests(bundle, tmp_path):
    (bundle / "requests.jsonl.gz").unlink()
    os.symlink("requests.jsonl.gz", bundle / "requests.jsonl")
    os.symlink("requests.jsonl", bundle / "requests.jsonl.gz")
    refused(tmp_path, bundle, "a symlink that loops or leads nowhere")


def test_symlink_leaving_the_bundle_is_refused(bundle, tmp_path):
    outside = tmp_path / "elsewhere.jsonl"
    outside.write_text('{"t": 1.0, "loop_lag_s": 0.0}\n')
    (bundle / "client.jsonl").unlink()
    os.symlink(outside, bundle / "client.jsonl")
    refused(tmp_path, bundle, "client.jsonl: a symlink to", "outside the bundle")


def test_symlink_inside_the_bundle_is_read(bundle, tmp_path):
    (bundle / "client.jsonl").rename(bundle / "client.real")
    os.symlink("client.real", bundle / "client.jsonl")
    code, err, _, _ = run_measured(tmp_path, "summary", str(bundle))
    assert code == 0, err


@pytest.mark.parametrize("stream, old, new, needle", [
    ("points.jsonl", '"t":', '"t":NaN,"x":', "NaN is not a finite number"),
    ("client.jsonl", '"t":', '"t":Infinity,"x":', "Infinity is not a finite number"),
    ("points.jsonl", '"t":', '"t":1e400,"x":', "1e400 is not a finite number"),
])
def test_non_finite_numbers_are_refused(bundle, tmp_path, stream, old, new, needle):
    p = bundle / stream
    lines = p.read_text().splitlines(keepends=True)
    lines[2] = lines[2].replace(old, new, 1)
    p.write_text("".join(lines))
    refused(tmp_path, bundle, f"{stream} line 3", needle)


@pytest.mark.parametrize("old, new, needle", [
    ('"t_end":', '"t_end":Infinity,"x":', "Infinity is not a finite number"),
    ('"chunks":[[', '"chunks":[[1e999,1],[', "1e999 is not a finite number"),
    ('"t_send":', '"t_send":NaN,"x":', "NaN is not a finite number"),
])
def test_non_finite_numbers_in_requests_are_refused(bundle, tmp_path, old, new, needle):
    p = plain_requests(bundle)
    lines = p.read_text().splitlines(keepends=True)
    assert old in lines[4]
    lines[4] = lines[4].replace(old, new, 1)
    p.write_text("".join(lines))
    refused(tmp_path, bundle, "requests.jsonl line 5", needle)


def test_random_bytes_in_a_stream_name_the_line(bundle, tmp_path):
    p = bundle / "client.jsonl"
    lines = p.read_bytes().splitlines(keepends=True)
    lines[6] = bytes(range(128, 256)) + b"\n"   # not UTF-8
    p.write_bytes(b"".join(lines))
    refused(tmp_path, bundle, "client.jsonl line 7", "not UTF-8 text (byte 0x80 at offset 0)")


def test_random_bytes_in_requests_name_the_line(bundle, tmp_path):
    p = plain_requests(bundle)
    lines = p.read_bytes().splitlines(keepends=True)
    lines[9] = b'{"point": "\xff\xfe"}\n'
    p.write_bytes(b"".join(lines))
    refused(tmp_path, bundle, "requests.jsonl line 10", "not UTF-8 text")


@pytest.mark.parametrize("stream", ["client.jsonl", "requests.jsonl"])
def test_a_gigabyte_of_zero_bytes_is_refused_in_bounded_memory_and_time(bundle, tmp_path, stream):
    p = bundle / stream
    if stream == "requests.jsonl":
        (bundle / "requests.jsonl.gz").unlink()
    with open(p, "wb") as f:
        f.truncate(1 << 30)     # 1 GiB of zero bytes (sparse: no disk used)
    line, rss, seconds = refused(tmp_path, bundle, f"{stream} line 1",
                                 "longer than 64 MiB without a newline")
    assert rss < PEAK_RSS_LIMIT and seconds < TIME_LIMIT_S, (rss >> 20, seconds)
    print(f"\n{stream} 1 GiB zeros: peak {rss >> 20} MiB, {seconds:.1f} s: {line}")


def gzip_bomb(path: Path, line: bytes, inflated: int) -> None:
    """PATH: a gzip stream of LINE repeated to INFLATED bytes (compressed about 1000:1)."""
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = line * ((1 << 20) // len(line))
    with open(path, "wb") as f:
        for _ in range(inflated // len(block)):
            f.write(z.compress(block))
        f.write(z.flush())


@pytest.mark.parametrize("stream, line", [
    ("metrics.jsonl.gz", b'{"t":1.0,"dt":0.01,"ok":false,"error":"x"}\n'),
    ("requests.jsonl.gz", b"\n"),
])
def test_decompression_bomb_is_refused_in_bounded_memory_and_time(bundle, tmp_path, stream, line):
    bomb = bundle / stream
    if bomb.exists():
        bomb.unlink()
    gzip_bomb(bomb, line, 2 << 30)
    assert bomb.stat().st_size < 12 << 20       # 2 GiB inflated, a few MB on disk
    msg, rss, seconds = refused(tmp_path, bundle, stream, "a decompression bomb")
    assert rss < PEAK_RSS_LIMIT and seconds < TIME_LIMIT_S, (rss >> 20, seconds)
    print(f"\n{stream} bomb of {bomb.stat().st_size >> 20} MiB -> 2 GiB: peak {rss >> 20} MiB, "
          f"{seconds:.1f} s: {msg}")


def test_manifest_with_nan_is_refused(bundle, tmp_path):
    p = bundle / "manifest.json"
    m = json.loads(p.read_text())
    m["clock"]["t0_wall_unix"] = float("nan")
    p.write_text(json.dumps(m))
    refused(tmp_path, bundle, "manifest.json", "NaN is not a finite number")
