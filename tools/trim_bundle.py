"""Copy a recorded bundle keeping only some points: a small real fixture for tests.

    python tools/trim_bundle.py SRC DST POINT [POINT ...]

Keeps every file kind: the kept points' events and requests, the samples of /metrics, NVML,
the client and the host that fall between their start and the cool-down after their end, the server
events, the manifest and the server log whole. Nothing is recomputed or altered.
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path


def lines(path: Path) -> list[dict]:
    """The JSON lines of PATH or PATH.gz."""
    gz = path.with_suffix(path.suffix + ".gz")
    if gz.exists():
        with gzip.open(gz, "rt", encoding="utf-8") as f:
            return [json.loads(x) for x in f if x.strip()]
    if path.exists():
        return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    return []


def write(path: Path, recs: list[dict], compress: bool) -> None:
    text = "".join(json.dumps(r, separators=(",", ":"), ensure_ascii=False) + "\n" for r in recs)
    if compress:
        with gzip.open(path.with_suffix(path.suffix + ".gz"), "wt", encoding="utf-8", compresslevel=9) as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")


def main(argv: list[str]) -> int:
    src, dst, keep = Path(argv[0]), Path(argv[1]), set(argv[2:])
    dst.mkdir(parents=True, exist_ok=False)
    points = lines(src / "points.jsonl")
    kept = [e for e in points if e.get("point") is None or e.get("point") in keep]
    spans = []
    for pid in keep:
        ts = [e["t"] for e in points if e.get("point") == pid]
        if not ts:
            raise SystemExit(f"no point {pid} in {src}")
        spans.append((min(ts) - 2.0, max(ts) + 2.0))

    def inside(t: float) -> bool:
        return any(a <= t <= b for a, b in spans)

    write(dst / "points.jsonl", kept, False)
    write(dst / "requests.jsonl", [r for r in lines(src / "requests.jsonl") if r.get("point") in keep], True)
    for stream in ("metrics", "gpu", "client", "host"):
        recs = [r for r in lines(src / f"{stream}.jsonl") if inside(r["t"])]
        if recs:
            write(dst / f"{stream}.jsonl", recs, stream == "metrics")
    for name in ("manifest.json", "server.log"):
        if (src / name).exists():
            shutil.copy(src / name, dst / name)
    manifest = json.loads((dst / "manifest.json").read_text())
    files = manifest.get("files") or {}
    for stream in ("requests", "metrics"):
        if stream in files:
            files[stream] = f"{stream}.jsonl.gz"
    (dst / "manifest.json").write_text(json.dumps(manifest, indent=2, ensure_ascii=False, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
