"""Benchmark the report build: seconds per stage for the committed rounds, and the ledger at scale.

    .venv/bin/python tools/bench_report.py                 # `make report` clean, then unchanged
    .venv/bin/python tools/bench_report.py --stages        # seconds per stage, one process
    .venv/bin/python tools/bench_report.py --scale 1000,10000,100000,1000000

`make report` is run as a user runs it, into an empty site directory and then again with
nothing changed. Baselines: under 60 s for every committed round from a clean site and under
5 s with nothing changed, on a 2-core machine; the ledger over a 1M-request bundle under 30 s
and 4 GB. Stages (--stages): ledger (read bundles, derive every value), figures (Altair
specs, then SVG for the PDF), sections/html/pdf (rendering), summed over the documents.

The scale test writes a bundle of N requests by repeating the request records of a real
recorded bundle inside its own points; it is written to a temporary directory, labelled as a
hand-built fixture and never published.
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bundle.store.reader import find_bundles, read_bundle  # noqa: E402
from bundle.store.streams import SAMPLE_FILES  # noqa: E402
from bundle.store.writer import compress_in_members  # noqa: E402
from report.derive.round.read import read_round  # noqa: E402
from report.judge.verdicts import build_ledger  # noqa: E402

TARGET_REPORT_S = 60.0
TARGET_UNCHANGED_S = 5.0
TARGET_LEDGER_S = 30.0
TARGET_LEDGER_GB = 4.0


def stages(runs: Path, out: Path) -> float:
    from report.judge.result import round_id_for
    from report.publish.compose import compose_rounds
    from report.publish.site import build_site
    pairs = [(b, round_id_for(b)) for b in find_bundles(runs)]
    if not pairs:
        print(f"no bundles under {runs}")
        return 0.0
    t0 = time.perf_counter()
    reports = compose_rounds(pairs)
    t_ledger = time.perf_counter() - t0
    built = build_site(reports, out)
    total = time.perf_counter() - t0
    per = built.stage_totals()
    print(f"report build over {len(pairs)} rounds ({', '.join(r for _, r in pairs)}):")
    print(f"  {'ledger + figure specs':<24} {t_ledger:8.2f} s")
    for stage, secs in per.items():
        print(f"  {stage:<24} {secs:8.2f} s")
    print(f"  {'total':<24} {total:8.2f} s   (target < {TARGET_REPORT_S:.0f} s: "
          f"{total / TARGET_REPORT_S:.2f} of the budget)")
    print()
    print(built.summary())
    return total


def make_report(site: Path) -> None:
    """`make report` into SITE from empty, then again unchanged: wall seconds against the targets."""
    import os
    shutil.rmtree(site, ignore_errors=True)
    cores = len(os.sched_getaffinity(0))
    print(f"make report, {cores} cores, site {site}:")
    for label, target in (("clean site", TARGET_REPORT_S), ("nothing changed", TARGET_UNCHANGED_S)):
        t0 = time.perf_counter()
        proc = subprocess.run(["make", "-s", "report", f"SITE={site}"], cwd=ROOT,
                              capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if proc.returncode:
            print(proc.stdout[-2000:], proc.stderr[-2000:])
            raise SystemExit(f"make report failed with {proc.returncode}")
        said = next((ln for ln in proc.stderr.splitlines() if ln.startswith("rebuilt ")), "")
        print(f"  {label:<16} {wall:7.2f} s   target < {target:.0f} s: {wall / target:.2f} of the "
              f"budget\n    {said}")


def synth_bundle(src: Path, n: int, dst: Path, gz: bool = False) -> None:
    """A bundle of N requests: SRC's points and scrapes, each request record repeated (hand-built, for timing).

    GZ: requests.jsonl.gz in independent members, as BundleWriter.close() leaves a large stream
    (compression level 1 here, to write it quickly; inflating runs at about the same speed at
    any level)."""
    b = read_bundle(src)
    manifest = dict(b.manifest)
    manifest["origin"] = "hand-built-fixture"
    dst.mkdir(parents=True)
    # The records as SRC holds them (one JSON line each), repeated in order.
    lines = [json.dumps(r, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
             for r in b.requests]
    target = dst / "requests.jsonl"
    with open(target, "wb", buffering=1 << 22) as f:
        whole, part = divmod(n, len(lines))
        cycle = b"".join(lines)
        for _ in range(whole):
            f.write(cycle)
        f.write(b"".join(lines[:part]))
    if gz:      # in independent members, as BundleWriter.close() compresses a large stream
        compress_in_members(target, target.with_suffix(".jsonl.gz"), level=1)
        target.unlink()
        target = target.with_suffix(".jsonl.gz")
    for stream in ("points", "metrics", "client"):
        with open(dst / f"{stream}.jsonl", "w") as f:
            for rec in getattr(b, stream):
                f.write(json.dumps(rec, separators=(",", ":")) + "\n")
    manifest["files"] = {s: f"{s}.jsonl" for s in SAMPLE_FILES if (dst / f"{s}.jsonl").exists()}
    manifest["files"]["requests"] = target.name
    (dst / "manifest.json").write_text(json.dumps(manifest))


def measure_one(bundle: Path) -> dict:
    """Seconds to read BUNDLE and to build its ledger, and this process's peak RSS (run in a fresh
    process, so the peak is this bundle's)."""
    t0 = time.perf_counter()
    b = read_bundle(bundle)
    t1 = time.perf_counter()
    build_ledger(read_round(b))
    t2 = time.perf_counter()
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"requests": len(b.request_table), "read_s": t1 - t0, "ledger_s": t2 - t1,
            "rss_gb": own / 2**20}


def scale(src: Path, sizes: list[int], gz: bool = False) -> bool:
    """The ledger over bundles of each size, each measured in a fresh process; True if all met the targets."""
    print(f"ledger at scale (source bundle {src}, requests replicated; hand-built, not published)"
          f"{'; requests.jsonl.gz' if gz else '; requests.jsonl uncompressed'}:")
    print(f"  {'requests':>10} {'read s':>8} {'ledger s':>9} {'total s':>8} {'peak RSS GB':>12}  target")
    ok = True
    for n in sizes:
        d = Path(tempfile.mkdtemp()) / "b"
        try:
            synth_bundle(src, n, d, gz)
            gc.collect()
            out = subprocess.run([sys.executable, __file__, "--measure", str(d)], check=True,
                                 capture_output=True, text=True).stdout
            m = json.loads(out.strip().splitlines()[-1])
            total = m["read_s"] + m["ledger_s"]
            rss = m["rss_gb"]
            met = total < TARGET_LEDGER_S and rss < TARGET_LEDGER_GB
            ok &= met
            print(f"  {n:>10,} {m['read_s']:8.2f} {m['ledger_s']:9.2f} {total:8.2f} {rss:12.2f}  "
                  f"{'pass' if met else 'FAIL'}", flush=True)
        finally:
            shutil.rmtree(d.parent, ignore_errors=True)
    print(f"  targets: read + ledger under {TARGET_LEDGER_S:.0f} s and peak RSS under "
          f"{TARGET_LEDGER_GB:.0f} GB at every size (1M requests included)")
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", default=str(ROOT / "runs"))
    ap.add_argument("--out", default=None, help="site directory (default: a temporary one)")
    ap.add_argument("--stages", action="store_true", help="seconds per stage, in one process")
    ap.add_argument("--scale", default="", help="comma list of request counts for the ledger test")
    ap.add_argument("--source", default=None, help="bundle to replicate for --scale")
    ap.add_argument("--gz", action="store_true", help="--scale bundles with requests.jsonl.gz")
    ap.add_argument("--measure", default=None, help=argparse.SUPPRESS)  # one size, in a fresh process
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure_one(Path(args.measure))))
        return 0
    if args.scale:
        src = Path(args.source) if args.source else next(iter(find_bundles(args.runs)), None)
        if src is None:
            print("no bundle to replicate")
            return 2
        return 0 if scale(src, [int(x) for x in args.scale.split(",")], args.gz) else 1
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp()) / "site"
    if args.stages:
        stages(Path(args.runs), out)
    else:
        make_report(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
