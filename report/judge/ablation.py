"""Each verdict re-judged with one optional source taken away: what a user without it would get.

A bundle recorded with every instrument is read again as if one had been off: the client's GPU
sampling (NVML and GPM, as for a client on another host, the GPU then named as that user would
name it with `--gpu`), vLLM's `estimated_*` FLOP and byte counters (a server without
`--enable-mfu-metrics`), the GPU's hardware counters alone (GPM, DCGM's profiling fields), the
server log, or /metrics altogether. A verdict must stay the same limit or weaken to a named weaker
one (`rules.WEAKER`: a roof to the GPU without one roof); it must never turn into another limit.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from bundle.gpu_fields import GPM_FIELDS
from bundle.store.reader import Bundle, read_bundle
from report.derive.round.read import read_round
from report.judge.rules import WEAKER
from report.judge.verdicts import build_ledger

ESTIMATED = "vllm:estimated_"
SOURCES = ("gpu_samples", "mfu_counters", "gpu_counters", "server_log", "metrics")


def _without_estimated(scrape: dict) -> dict:
    samples = scrape.get("samples")
    if not isinstance(samples, dict):
        return scrape
    return {**scrape, "samples": {k: v for k, v in samples.items() if not k.startswith(ESTIMATED)}}


class _NoLog(Bundle):
    """A bundle read as if its server log had not been kept."""

    def server_log(self) -> str:
        return ""

    def other_server_logs(self) -> list:
        return []


def without(bundle: Bundle, source: str) -> tuple[Bundle, str]:
    """BUNDLE as if SOURCE had not been recorded, and the GPU name a user would give with `--gpu`."""
    gpus = bundle.manifest.get("gpus") or []
    name = gpus[0].get("name", "") if gpus else ""
    if source == "gpu_samples":
        manifest = {k: v for k, v in bundle.manifest.items() if k != "gpu_absent_reason"} | {"gpus": []}
        return replace(bundle, samples={**bundle.samples, "gpu": [], "dcgm": []}, manifest=manifest), name
    if source == "mfu_counters":
        return replace(bundle, samples={**bundle.samples,
                                         "metrics": [_without_estimated(s) for s in bundle.metrics]}), ""
    if source == "gpu_counters":
        gpu = [{k: v for k, v in s.items() if k not in GPM_FIELDS} for s in bundle.gpu]
        return replace(bundle, samples={**bundle.samples, "gpu": gpu, "dcgm": []}), ""
    if source == "server_log":
        fields = {f: getattr(bundle, f) for f in bundle.__dataclass_fields__}
        return _NoLog(**fields), ""
    if source == "metrics":
        manifest = {**bundle.manifest, "plan": {**(bundle.manifest.get("plan") or {}),
                                                "sampler": {**((bundle.manifest.get("plan") or {}).get("sampler") or {}),
                                                            "metrics": False}}}
        return replace(bundle, samples={**bundle.samples, "metrics": []}, manifest=manifest), ""
    raise ValueError(f"unknown source {source!r}; known: {', '.join(SOURCES)}")


def verdicts_of(bundle: Bundle, gpu_name: str = "") -> dict[str, tuple[str, bool, tuple[str, ...]]]:
    """Each point's bottleneck, whether it passed every check, and the limits that hold after it, by point id."""
    rd = read_round(bundle, gpu_name=gpu_name)
    build_ledger(rd)
    return {pid: (a.bottleneck, rd.verdicts.validity[pid].valid, a.also)
            for pid, a in rd.verdicts.attribution.items()}


def relation(full: str, reduced: str, also: tuple[str, ...] = ()) -> str:
    """How a verdict without a source stands to the verdict with every source: the same limit, a
    weaker form of it, a sharper one (the source removed had contradicted the model), the next
    limit the full evidence holds (the source removed was the only witness of the first, and the
    second binds as well), silent (`unknown`: what the source alone showed is gone), or another
    limit."""
    if reduced == full:
        return "same"
    if WEAKER.get(full) == reduced:
        return "weaker"
    if WEAKER.get(reduced) == full or full == "unknown":
        return "sharper"      # the source removed was what contradicted the model, or kept it silent
    if reduced == "unknown":
        return "silent"
    if reduced in also or any(WEAKER.get(a) == reduced for a in also):
        return "next"
    return "other"


@dataclass(frozen=True)
class Cell:
    """One point's verdict with one source taken away, against its verdict with all of them."""

    bundle: str
    point: str
    source: str
    full: str
    reduced: str
    valid: bool          # whether the point passed every check with every source
    also: tuple[str, ...] = ()   # the limits that hold after the full verdict's

    @property
    def relation(self) -> str:
        return relation(self.full, self.reduced, self.also)


def ablate(path: Path, sources: tuple[str, ...] = SOURCES) -> list[Cell]:
    """Every point of the bundle at PATH judged without each of SOURCES in turn."""
    bundle = read_bundle(path)
    full = verdicts_of(bundle)
    cells = []
    for source in sources:
        reduced, gpu = without(bundle, source)
        got = verdicts_of(reduced, gpu)
        cells += [Cell(path.parent.name, pid, source, full[pid][0], got[pid][0], full[pid][1], full[pid][2]) for pid in full]
    return cells


def ablation_table(cells: list[Cell]) -> str:
    """One row per bundle and point: the verdict with every source, then each source's column."""
    sources = list(dict.fromkeys(c.source for c in cells))
    rows: dict[tuple[str, str], dict[str, Cell]] = {}
    for c in cells:
        rows.setdefault((c.bundle, c.point), {})[c.source] = c
    head = ["bundle", "point", "valid", "all sources", *(f"no {s}" for s in sources)]
    lines = [head]
    for (b, p), by in rows.items():
        first = next(iter(by.values()))
        lines.append([b, p, "yes" if first.valid else "no", first.full, *(("=" if by[s].relation == "same" else
                                            f"{by[s].reduced} ({by[s].relation})") if s in by else ""
                                           for s in sources)])
    widths = [max(len(r[i]) for r in lines) for i in range(len(head))]
    return "\n".join("  ".join(x.ljust(w) for x, w in zip(r, widths)).rstrip() for r in lines)
