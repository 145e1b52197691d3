"""Build the static site: every round's pages in both languages plus an index of rounds.

    site/index.html
    site/<round>/index.zh.html  index.en.html  report.zh.pdf  report.en.pdf
                 audit.zh.pdf  audit.en.pdf  round.json

`round.json` lets the index list rounds built earlier without rebuilding them. Only the
directories of the rounds being built are replaced (staged, then swapped in), so a
failing build leaves the previous pages of that round in place.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import re
import shutil
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import jinja2
from markupsafe import Markup

from report.publish.document import RoundReport
from report.publish.render.assembly import csp_hash
from report.publish.render.output import Timing, files_of, page_name, render_round
from report.publish.render.templating import TEMPLATES_DIR, static_file
from report.words import LANGS, word

log = logging.getLogger(__name__)

ROUND_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
# The index's link text per page, each page named in its own language: `label.file_<format>`.
FILE_LABEL = {(lang, fmt): word(f"label.file_{fmt}", lang) for lang in LANGS for fmt in ("html", "pdf", "audit")}


class Built(list):
    """The paths written (a list), with per-stage timings attached."""

    def __init__(self, paths=(), timings=()):
        super().__init__(paths)
        self.timings: list[Timing] = list(timings)

    def stage_totals(self) -> dict[str, float]:
        """Seconds per stage, summed over rounds and languages."""
        out: dict[str, float] = {}
        for t in self.timings:
            out[t.stage] = out.get(t.stage, 0.0) + t.seconds
        return out

    def summary(self) -> str:
        """One line per round, language and stage, for a benchmark script to print."""
        return "\n".join(f"{t.round_id:<24} {t.lang:<3} {t.stage:<9} {t.seconds * 1000:9.1f} ms"
                         for t in self.timings)


def _natural(s: str) -> list:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", s)]


def _manifest(report: RoundReport, formats: tuple[str, ...], key: str | None) -> dict:
    return {
        "build_key": key,
        "round_id": report.round_id,
        "title": {lang: report.title.get(lang, report.round_id) for lang in LANGS},
        "files": [{"lang": lang, "format": fmt, "name": page_name(lang, fmt)}
                  for fmt in files_of(formats) for lang in LANGS],
    }


def build_index(out_dir: Path, templates_dir: Path = TEMPLATES_DIR) -> Path:
    """Write site/index.html from every round.json under OUT_DIR."""
    rounds = []
    for m in sorted(out_dir.glob("*/round.json"), key=lambda p: _natural(p.parent.name)):
        data = json.loads(m.read_text(encoding="utf-8"))
        files = [dict(f, label=FILE_LABEL.get((f["lang"], f["format"]), f["name"]))
                 for f in data["files"] if (m.parent / f["name"]).exists()]
        rounds.append(dict(data, files=files))
    css = static_file(templates_dir, "report.css")
    csp = "; ".join(["default-src 'none'", "style-src " + csp_hash(css), "base-uri 'none'",
                     "form-action 'none'"])
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir)), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True,
                             lstrip_blocks=True)
    html = env.get_template("index.html.j2").render(rounds=rounds, css=Markup(css), csp=csp)
    path = out_dir / "index.html"
    path.write_text(html, encoding="utf-8")
    return path


def default_workers() -> int:
    """Processes for rendering: the cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def _render_document(report: RoundReport, lang: str, stage: Path, formats: tuple[str, ...],
                     templates_dir: Path):
    return render_round(report, stage, formats, langs=(lang,), templates_dir=templates_dir)


def _render_documents(jobs, stages, formats, templates_dir, workers):
    """Render every (report, lang) job, in WORKERS processes when there is more than one job."""
    args = [(report, lang, stages[report.round_id], formats, templates_dir) for report, lang in jobs]
    workers = min(workers or default_workers(), len(args))
    if workers <= 1:
        return [_render_document(*a) for a in args]
    # Longest first (a document's size follows its ledger), so no core is left with a long
    # one at the end; results come back in the jobs' order.
    order = sorted(range(len(args)), key=lambda i: -len(args[i][0].ledger.values))
    # spawn, not fork: the parent may already hold the chart renderer's threads
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {i: pool.submit(_render_document, *args[i]) for i in order}
        return [futures[i].result() for i in range(len(args))]


def build_site(reports: list[RoundReport], out_dir: Path, formats=("html", "pdf"),
               templates_dir: Path = TEMPLATES_DIR, keys: dict[str, str] | None = None,
               workers: int | None = None) -> Built:
    """Render every report into OUT_DIR/<round>/ (documents in parallel across WORKERS
    processes, default: the usable cores) and rewrite OUT_DIR/index.html."""
    out_dir = Path(out_dir)
    formats = tuple(formats)
    ids = [r.round_id for r in reports]
    for rid in ids:
        if not ROUND_ID.match(rid):
            raise ValueError(f"round id {rid!r} is not a safe directory name")
    if len(set(ids)) != len(ids):
        raise ValueError(f"duplicate round ids: {ids}")
    out_dir.mkdir(parents=True, exist_ok=True)
    built = Built()
    stages = {}
    for report in reports:
        stage = out_dir / f".{report.round_id}.building"
        if stage.exists():
            shutil.rmtree(stage)
        stage.mkdir()
        stages[report.round_id] = stage
    # One document (a round in one language) per job; the rounds' directories are swapped
    # in only after every document of the round was written.
    jobs = [(report, lang) for report in reports for lang in LANGS]
    try:
        outs = _render_documents(jobs, stages, formats, templates_dir, workers)
        for report in reports:
            stage = stages[report.round_id]
            manifest = _manifest(report, formats, (keys or {}).get(report.round_id))
            (stage / "round.json").write_text(
                json.dumps(manifest, ensure_ascii=False, indent=2, sort_keys=True) + "\n",
                encoding="utf-8")
    except BaseException:
        for stage in stages.values():
            shutil.rmtree(stage, ignore_errors=True)
        raise
    for report in reports:
        final, stage = out_dir / report.round_id, stages[report.round_id]
        if final.exists():
            shutil.rmtree(final)
        stage.rename(final)
        for (r, _lang), out in zip(jobs, outs):
            if r is report:
                built.extend(final / p.name for p in out.paths)
                built.timings.extend(out.timings)
        built.append(final / "round.json")
    t0 = time.perf_counter()
    built.append(build_index(out_dir, templates_dir))
    built.timings.append(Timing("*", "*", "index", time.perf_counter() - t0))
    for t in built.timings:
        log.info("render %s %s %s %.3f s", t.round_id, t.lang, t.stage, t.seconds)
    return built
