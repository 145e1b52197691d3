"""When a round's pages are already up to date: a key over everything its pages are made from.

A round's pages depend on its bundle, the previous round's bundle (the comparison), the
code that reads and reports (bench/, report/), the templates, the formats and other tools'
results read beside it (its external/ folder, `--compare-with`). The key is a
SHA-256 over all of them; `report build` skips a round whose round.json carries the same key
and whose pages all exist.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from bundle.slo import slo_file_text

ROOT = Path(__file__).resolve().parents[2]      # the checkout (or site-packages, installed)
CODE_DIRS = ("bundle", "bench", "report", "templates")
CODE_SUFFIXES = {".py", ".c", ".j2", ".css", ".toml", ".js"}


def _hash_files(h, files: list[Path], base: Path) -> None:
    for f in sorted(files):
        h.update(str(f.relative_to(base)).encode() + b"\0")
        h.update(hashlib.sha256(f.read_bytes()).digest())


def code_digest(root: Path = ROOT) -> str:
    """SHA-256 over the tool's own sources and templates (wherever they are installed)."""
    from report.publish.render.templating import TEMPLATES_DIR
    h = hashlib.sha256()
    for d in [root / name for name in CODE_DIRS[:-1]] + [TEMPLATES_DIR]:
        _hash_files(h, [p for p in d.rglob("*") if p.is_file()
                        and p.suffix in CODE_SUFFIXES and "__pycache__" not in p.parts], d.parent)
    return h.hexdigest()


def bundle_digest(bundle: Path) -> str:
    """SHA-256 over every file of one bundle."""
    h = hashlib.sha256()
    _hash_files(h, [p for p in Path(bundle).iterdir() if p.is_file()], Path(bundle))
    return h.hexdigest()


def round_key(bundle: Path, prev_bundle: Path | None, code: str, formats: tuple[str, ...],
              slo_text: str | None = None, cost_text: str | None = None,
              compare_with: tuple[str, ...] = ()) -> str:
    """The key of one round's pages (its SLO too: the --slo given, or its slo.toml; the cost
    flags given; and the other tools' results read beside it: its external/ folder's and COMPARE_WITH)."""
    from bundle.peers import round_peer_files
    from report.derive.round.read import slo_file_of
    slo_file = slo_file_of(Path(bundle))
    # Read as the ledger reads it (bounded, a regular file): SloError for one it would refuse.
    slo = slo_text or (hashlib.sha256(slo_file_text(slo_file).encode()).hexdigest()
                       if os.path.lexists(slo_file) else "-")
    parts = [bundle_digest(bundle), bundle_digest(prev_bundle) if prev_bundle else "-", code,
             ",".join(formats), slo, peers_digest(round_peer_files(bundle, tuple(compare_with)))] + \
        ([cost_text] if cost_text else [])
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def up_to_date(out_dir: Path, round_id: str, key: str) -> bool:
    """Whether OUT_DIR/ROUND_ID was built with KEY and still has every page it listed."""
    manifest = Path(out_dir) / round_id / "round.json"
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return data.get("build_key") == key and all(
        (manifest.parent / f["name"]).exists() for f in data.get("files", []))


def peers_digest(files: list[str]) -> str:
    """SHA-256 over other tools' result files, by name and content ("-" for none)."""
    if not files:
        return "-"
    from bundle.peers import MAX_BYTES, PeerFileError
    from bundle.textfile import read_text_file
    h = hashlib.sha256()
    for f in files:
        # Read as the report reads it (bounded, a regular file): a FIFO is refused, never waited on.
        text = read_text_file(f, f, MAX_BYTES, PeerFileError)
        h.update(Path(f).name.encode() + b"\0" + hashlib.sha256(text.encode()).digest())
    return h.hexdigest()
