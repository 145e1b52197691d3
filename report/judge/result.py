"""One round judged, from its bundle to what every view of it shows: the pipeline's one path.

read → ledger → verdicts (report.judge.verdicts.build_ledger) → against the previous round
(report.judge.compare) → findings → next steps. The pages (report.publish.compose), `ledger
--json` and `findings --json` are views of one RoundResult: none of them judges again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bundle.files import BundleError, bundle_dir, run_dir
from bundle.server_flags import LAUNCHER_WORDS, command_words, set_names, switch_state
from bundle.slo import SloError
from bundle.store.reader import read_bundle
from report.derive.round.read import RoundData, ok_points, read_round
from report.derive.stats.requests import INTERRUPTED
from report.judge.compare import cross_round_ledger
from report.judge.findings.finding import Finding
from report.judge.findings.round import round_findings
from report.judge.next_steps import next_steps
from report.judge.verdicts import build_ledger
from report.ledger import Ledger
from report.words import LANGS, Named, has, word


@dataclass
class RoundResult:
    """One round as judged: its data, its ledger (the comparison with the previous round
    included), the facts the narrative reads, its findings and its next steps."""

    bundle_path: Path
    round_id: str
    rd: RoundData
    led: Ledger
    facts: dict[str, Any]
    findings: list[Finding] = field(default_factory=list)
    prev: tuple[RoundData, Ledger] | None = None


def source_facts(ws) -> dict:
    """The facts of a replayed trace or dataset (the manifest's workload_source), none without."""
    if not isinstance(ws, dict) or ws.get("kind") not in ("trace", "sharegpt"):
        return {}
    dropped = ws.get("dropped") if isinstance(ws.get("dropped"), dict) else {}
    return {"source_kind": ws["kind"], "source_path": Path(str(ws.get("path") or "")).name or None,
            "source_format": str(ws.get("format") or ws["kind"]),
            # Reasons the catalogue names, in order (a reason of a later collector is left out).
            "source_drop_reasons": sorted(r for r, k in dropped.items()
                                          if k and all(has(f"label.replay_drop_{r}", lang) for lang in LANGS))}


def facts_of(rd: RoundData) -> dict:
    """Non-numeric facts for the narrative: engine, model, hardware, status (escaped on render)."""
    m = rd.bundle.manifest
    eng, host, model = m.get("engine") or {}, m.get("host") or {}, m.get("model") or {}
    gpus = rd.gpus
    return {
        "bundle": rd.name,
        "status": m.get("status"),
        "status_reason": m.get("status_reason"),
        "origin": m.get("origin"),
        "engine_mode": eng.get("mode"),
        "engine_mode_text": {lang: word(f"label.engine_mode_{eng.get('mode')}", lang)
                             if has(f"label.engine_mode_{eng.get('mode')}", lang) else str(eng.get("mode"))
                             for lang in LANGS},
        "vllm_version": eng.get("vllm_version"),
        "model": model.get("served_name") or model.get("name"),
        "model_desc": model.get("name"),
        "random_weights": model.get("load_format") == "dummy" or
        ((rd.log.non_default_args or {}).get("load_format") == "dummy" if rd.log else False),
        "cpu": host.get("cpu_model"),
        "gpu": ", ".join(g.get("name", "?") for g in gpus) if gpus else None,
        "gpu_absent_reason": m.get("gpu_absent_reason"),
        "kv_pool_device": rd.log.kv_pool_device if rd.log else None,
        "axis": rd.axis,
        "created": m.get("created_utc"),
        "tool_version": (m.get("tool") or {}).get("version"),
        "git_revision": (m.get("tool") or {}).get("git_revision"),
        "server_flags": " ".join((eng.get("command") or [])[LAUNCHER_WORDS:]) if eng.get("command") else None,
        # What the server log's non-default arguments say of two switches: True, False, or
        # None where the log does not say (vLLM's default, which depends on its version).
        "prefix_caching": (rd.log.non_default_args or {}).get("enable_prefix_caching") if rd.log else None,
        "cuda_graphs": (False if (rd.log.non_default_args or {}).get("enforce_eager") else None) if rd.log else None,
        # Off only where every server set ran with it off (the last of its switches decides): a
        # round that also ran it on has tried it.
        "prefix_caching_off": bool(eng.get("server_sets")) and all(
            switch_state(command_words(c), "enable-prefix-caching") is False
            for c in (eng.get("server_sets") or {}).values()),
        "mfu_enabled": any("--enable-mfu-metrics" in " ".join(c or [])
                           for c in (eng.get("server_sets") or {}).values()),
        "points": [p.pid for p in rd.points],
        "failed_points": [p.pid for p in rd.points if p.window.status not in ("ok", INTERRUPTED)],
        "interrupted_points": [p.pid for p in rd.points if p.window.status == INTERRUPTED],
        "warnings": list(rd.bundle.warnings),
        **source_facts(rd.bundle.manifest.get("workload_source")),
    }


# How a setting that varies across a round's points names a point: C=128, L=8192, 4 req/s,
# and a server set in words of the page's language (`label.point_set`: set 1, 配置 1).
LABEL_PARTS = (("server_set", None), ("input_len", "L={}"), ("concurrency", "C={}"),
               ("request_rate", "{} req/s"))


def point_labels(points) -> dict[str, str]:
    """Each point's name by the settings that vary across the round (its id where none does),
    a Named with its form in each language."""
    varying = [(k, fmt) for k, fmt in LABEL_PARTS
               if len({str(p.settings.get(k)) for p in points}) > 1]
    # A server set is named by the flag values that set it apart ("--max-num-seqs 8"), its
    # number only where its flags say nothing the others do not.
    sets = set_names({p.settings.get("server_set") or 0: p.settings.get("server_flags") or [] for p in points})

    def set_part(p, lang: str) -> str:
        n = p.settings.get("server_set") or 0
        if sets.get(n):
            return sets[n]
        # The one set that adds no flag is "no added flags"; sets whose flags name none apart, by number.
        alone = [m for m, name in sets.items() if not name] == [n] and not p.settings.get("server_flags")
        return word("label.point_set_defaults" if alone else "label.point_set", lang, n=n)

    def name(p, lang: str) -> str:
        vals = [f"{p.settings.get(k):g}" if isinstance(p.settings.get(k), float) else p.settings.get(k)
                for k, _ in varying]
        parts = [set_part(p, lang) if fmt is None else fmt.format(v)
                 for (_, fmt), v in zip(varying, vals)]
        return word("label.point_parts_sep", lang).join(parts) if parts else p.pid
    return {p.pid: Named({lang: name(p, lang) for lang in LANGS}) for p in points}


def previous_round_id(rid: str) -> str | None:
    """`round-3` -> `round-2`; other ids have no previous round."""
    head, _, num = rid.rpartition("-")
    return f"{head}-{int(num) - 1}" if head and num.isdigit() and int(num) > 1 else None


def refusal_text(e: Exception) -> str:
    """Why a round was not built, in one line: a refusal's own message (BundleError, SloError),
    else the exception's type and message (a fault of this tool, named so it can be reported)."""
    text = str(e) if isinstance(e, (BundleError, SloError)) else f"{type(e).__name__}: {e}"
    return " ".join(text.split()) or type(e).__name__




def judge_rounds(pairs: list[tuple[str | Path, str]], refused: list[str] | None = None,
                 slo=None, gpu_name: str = "", judge_last_only: bool = False, cost=None,
                 compare_with: dict[str, tuple[str, ...]] | None = None) -> list[RoundResult]:
    """Every round of PAIRS (bundle path, round id) judged, each against the round before it
    (by round id). With REFUSED, a round that cannot be read or judged is left out and its error
    appended there (the others go on); without it, the error stops. SLO, a (Slo, where stated)
    pair, overrides every round's own; GPU_NAME names the server's GPU where a bundle sampled none;
    JUDGE_LAST_ONLY: the rounds before the last are read only as its previous round; COST, a
    (Cost, where stated) pair, overrides the keys it gives; COMPARE_WITH names other tools'
    result files to read beside a round (by round id), besides its external/ folder's."""
    read = []
    for path, rid in pairs:
        try:
            rd = read_round(read_bundle(path), slo, rid, gpu_name=gpu_name, cost=cost,
                            compare_with=(compare_with or {}).get(rid, ()))
            read.append((Path(path), rid, rd, build_ledger(rd)))
        except Exception as e:  # noqa: BLE001 - with REFUSED, one round stops no other
            if refused is None:
                raise
            refused.append(f"{rid}: {refusal_text(e)}")
    by_id = {rid: (rd, led) for _, rid, rd, led in read}
    out = []
    wanted = {rid for _, rid in pairs[-1:]} if judge_last_only else None
    for path, rid, rd, led in read:
        if wanted is not None and rid not in wanted:
            continue
        try:
            out.append(judge(path, rid, rd, led, by_id.get(previous_round_id(rid))))
        except Exception as e:  # noqa: BLE001
            if refused is None:
                raise
            refused.append(f"{rid}: {refusal_text(e)}")
    return out


def judge(bundle_path: Path, round_id: str, rd: RoundData, led: Ledger,
          prev: tuple[RoundData, Ledger] | None) -> RoundResult:
    """One round's ledger (built) judged against PREV: the cross-round values, the narrative's
    facts, the findings and the next steps."""
    facts = facts_of(rd)
    pids = [p.pid for p in ok_points(rd)]
    facts["ok_points"] = pids
    # Points whose C requests at their peak would need more than the pool: the table's demand
    # column passes 100 % there, and the page says why.
    facts["demand_over_pool"] = [pid for pid in pids if (led.get(f"p.{pid}.kv_expected_peak") is not None
                                 and led[f"p.{pid}.kv_expected_peak"].present
                                 and led[f"p.{pid}.kv_expected_peak"].value > 1)]
    facts["sweep_axis"] = rd.axis
    validity = rd.verdicts.validity
    if len([pid for pid in pids if validity[pid].valid]) < 2:
        # Fewer than two valid points (a round cut short, points that failed their checks):
        # no sweep to narrate; the diagnosis says why.
        facts["axis"] = "single"
    # Cross-round facts are "not available" (RoundFacts' defaults) unless a previous round compares.
    if prev is not None:
        facts.update(cross_round_ledger(led, rd, prev[1], prev[0]))
    facts["has_prev"] = prev is not None
    attribution = rd.verdicts.attribution
    valid = [pid for pid in pids if validity[pid].valid]
    facts["valid_points"] = valid
    # The one point the narrative's "at C=…" sentences speak of, in every section: the last
    # valid point (else the last that ran), and the first likewise; each named by its settings.
    shown = valid or pids
    facts["headline_point"] = shown[-1] if shown else None
    facts["first_point"] = shown[0] if shown else None
    # The crossover's power laws run between the two highest valid points; its sentences name both.
    facts["crossover_from"] = valid[-2] if len(valid) > 1 else None
    facts["point_labels"] = point_labels(rd.points)
    facts["invalid_points"] = {pid: validity[pid].reasons for pid in pids if not validity[pid].valid}
    facts["bottlenecks"] = {pid: attribution[pid].bottleneck for pid in pids}
    comparisons = facts["set_comparisons"] = list(rd.verdicts.set_comparisons)
    found = round_findings(led, validity, attribution, valid, facts)
    facts["set_comparisons"] = [{"point": c.point, "base": c.base, "question": c.question,
                                 "verdict": c.verdict} for c in comparisons]
    facts["slo_source"] = rd.slo_source
    facts["next_steps"] = next_steps(led, rd, facts)
    found += peer_facts(led, rd, facts)
    return RoundResult(bundle_path, round_id, rd, led, facts, found, prev)


def peer_facts(led: Ledger, rd: RoundData, facts: dict) -> list[Finding]:
    """Other tools' results into FACTS, each beside the point it ran, and those no point ran;
    the findings of the reasons they differ (kind "peers")."""
    from report.derive.round.read import peer_file
    from report.judge.peer_gaps import matches, round_peer_findings, tool_name, unmatched
    labels = facts["point_labels"]
    facts["peer_matches"] = [{"point": m.point, "item": m.item, "tool": m.tool, "file": peer_file(rd, m.result),
                              "format": m.result.tool, "at": labels.get(m.point, m.point)} for m in matches(rd)]
    facts["peers_unmatched"] = [{"tool": tool_name(r.tool), "format": r.tool, "file": peer_file(rd, r)}
                                for r in unmatched(rd)]
    return list(round_peer_findings(led, rd, labels))


def round_id_for(bundle: Path) -> str:
    """`runs/round-2/bundle` -> `round-2`; any other bundle directory -> its own name."""
    return run_dir(bundle).name


def judge_bundle(path: str | Path, slo=None, gpu_name: str = "", cost=None) -> RoundResult:
    """The bundle at PATH (a run directory or its bundle/) judged as `build` judges it: against
    the previous round where one sits beside it (`runs/round-3` beside `runs/round-4`)."""
    d = bundle_dir(path)
    rid = round_id_for(d)
    pairs = [(d, rid)]
    prev = previous_round_id(rid)
    if prev and d.name == "bundle" and (d.parent.parent / prev / "bundle" / "manifest.json").exists():
        pairs.insert(0, (d.parent.parent / prev / "bundle", prev))
    return judge_rounds(pairs, slo=slo, gpu_name=gpu_name, judge_last_only=True, cost=cost)[-1]
