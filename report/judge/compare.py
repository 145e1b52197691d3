"""Cross-round quantities (docs/analyses.md items 9, 14, 20, 21), after checking the rounds compare.

Never pool incompatible data: before any comparison the two rounds' model, hardware,
engine version and workload keys are checked, and each differing key is named.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Iterator

from report.derive import arith as A
from report.derive.load.engines import plan_endpoints
from report.derive.prefilltail import rate_reference_point
from report.derive.round.raw import prefill_tail_raw
from report.derive.round.read import RoundData, ok_points
from report.ledger import Absent, Ledger, Reason, Source, Value
from report.phases import Phase, resolve_selected
from report.registry import RawSources, cross_quantity
from report.words import LANGS, Named, round_name

# Workload settings that must match for two points to count as "the same point".
POINT_KEYS = ("concurrency", "input_len", "output_len", "request_rate", "arrival")


def _engine_flags(manifest: dict) -> list[str]:
    """Server flags that shape performance (the MFU-counter flag only adds counters)."""
    plan = manifest.get("plan") or {}
    flags = list((plan.get("engine") or {}).get("flags") or [])
    return [f for f in flags if f != "--enable-mfu-metrics"]


def comparability_keys(manifest: dict) -> dict[str, Any]:
    """The facts two rounds must share to be compared, from a bundle manifest."""
    model = manifest.get("model") or {}
    host = manifest.get("host") or {}
    eng = manifest.get("engine") or {}
    plan = manifest.get("plan") or {}
    wl = plan.get("workload") or {}
    # Keys are codes (`label.differs_<key>` words them).
    return {
        "model_config": json.dumps(model.get("config"), sort_keys=True),
        "gpu": ", ".join(g.get("name", "?") for g in manifest.get("gpus") or []) or "none",
        "cpu": host.get("cpu_model"),
        "engine_version": eng.get("vllm_version"),
        "engine_mode": eng.get("mode"),
        # Two servers behind one client are another deployment than one server, never a repeat of it.
        "endpoints": len(plan_endpoints(manifest)),
        "server_flags": " ".join(_engine_flags(manifest)),
        "workload_kind": wl.get("kind"),
        "api": wl.get("api"),
        "output_len": wl.get("output_len"),
        "ignore_eos": wl.get("ignore_eos"),
    }


def differing_keys(a: dict, b: dict) -> list[str]:
    """Names of the comparability keys on which two manifests differ."""
    ka, kb = comparability_keys(a), comparability_keys(b)
    return [k for k in ka if ka[k] != kb[k]]


def same_point(sa: dict, sb: dict) -> bool:
    """Whether two points ran with the same workload settings."""
    return all(sa.get(k) == sb.get(k) for k in POINT_KEYS)


def import_value(led: Ledger, key: str, v: Value, round_name: str) -> Value:
    """Bring a value of another round into this ledger, keeping its provenance: the raw input
    of a cross-round quantity, its sources named after the round they came from."""
    return led.derive(key, A.identity_of, unit=v.unit,
                      sources=tuple(dataclasses.replace(s, file=f"{round_name}: {s.file}") if isinstance(s, Source)
                                    else f"{round_name}: {s}" for s in v.sources) or (f"{round_name}: {v.key}",),
                      value=v)


# The cross-round quantities (report/registry.py `cross_quantity`), by group: each group is
# resolved once the round selects its inputs (a shared point, a reference point); a parameter
# reads those inputs, else the ledger's `x.<param>`.
REPRO = {"output_tok_s": "tput", "ttft_ms_p99": "ttft_p99"}     # a point's quantity -> `x.repro_<name>_*`
for _qty, _name in REPRO.items():
    # Each shared point (key `x.<point>.<qty>_diff`) against the previous round's.
    cross_quantity(f"{_qty}_diff", A.relative_difference, unit="fraction", per="pair",
                   new=_qty, old=f"prev_{_qty}")
    # The spread of those differences, over the shared points where both are present.
    cross_quantity(f"repro_{_name}_min", A.minimum, unit="fraction", per=f"repro_{_name}", values=f"{_qty}_diffs")
    cross_quantity(f"repro_{_name}_max", A.maximum, unit="fraction", per=f"repro_{_name}", values=f"{_qty}_diffs")
cross_quantity("prefill_tflops_s", A.tera, unit="TFLOP/s", per="prefill_rate", value="prefill_flop_rate")
cross_quantity("prefill_c1_ms", A.identity_of, unit="ms", per="prefill_c1", value="prev_prefill_ms_mean")
cross_quantity("prefill_under_concurrency_ratio", A.ratio, unit="×", per="prefill_c1",
               numerator="prefill_ms_mean", denominator="prefill_c1_ms")
cross_quantity("prefill_extra_ms", A.difference, unit="ms", per="prefill_c1", a="prefill_ms_mean",
               b="prev_prefill_ms_mean")
cross_quantity("prev_tput_at_occupancy", A.interpolate, unit="tok/s", per="occupancy", x="kv_occupancy",
               xs="prev_kv_occupancies", ys="prev_output_tok_s_by_occupancy")
cross_quantity("occupancy_tput_ratio", A.ratio, unit="×", per="occupancy",
               numerator="prev_tput_at_occupancy", denominator="output_tok_s")


def cross_round_ledger(led: Ledger, rd: RoundData, prev_led: Ledger, prev: RoundData) -> dict[str, Any]:
    """Comparisons of this round with the previous one, each behind a comparability check; the
    facts the narrative needs of it (which round, what differs, which points are shared)."""
    facts: dict[str, Any] = {}
    diff = differing_keys(rd.bundle.manifest, prev.bundle.manifest)
    # The previous round as each language names it ("Round 11", 第 11 轮), never its id alone.
    facts["prev_round"] = Named({lang: round_name(prev.round_id or prev.name, lang) for lang in LANGS})
    facts["prev_differs"] = diff
    pts, prev_pts = ok_points(rd), ok_points(prev)
    # Reproducibility: every point present in both rounds with identical settings (item 9).
    common = [(p, q) for p in pts for q in prev_pts if same_point(p.settings, q.settings)]
    facts["common_points"] = [p.pid for p, _ in common]
    if diff:
        facts["comparable"] = False
        return facts
    facts["comparable"] = True
    # What this round confirms and corrects of the previous one's verdicts, point by shared point
    # (both valid), and which limits it finds that the previous round named nowhere.
    now_v, prev_v = rd.verdicts.validity, prev.verdicts.validity
    now_a, prev_a = rd.verdicts.attribution, prev.verdicts.attribution
    both = [(p.pid, q.pid) for p, q in common
            if p.pid in now_v and now_v[p.pid].valid and q.pid in prev_v and prev_v[q.pid].valid]
    facts["verdicts_confirmed"] = [(a, now_a[a].bottleneck) for a, b in both
                                   if now_a[a].bottleneck == prev_a[b].bottleneck]
    facts["verdicts_corrected"] = [(a, prev_a[b].bottleneck, now_a[a].bottleneck) for a, b in both
                                   if now_a[a].bottleneck != prev_a[b].bottleneck]
    seen = {prev_a[q].bottleneck for q in prev_a if q in prev_v and prev_v[q].valid}
    facts["verdicts_new"] = list(dict.fromkeys(
        now_a[p].bottleneck for p in now_a if p in now_v and now_v[p].valid
        and now_a[p].bottleneck not in seen and now_a[p].bottleneck not in ("unknown", "under_driven")))
    selected = _Selection(led, rd, prev_led, prev, common, facts)
    resolve_selected(led, "cross", selected.inputs)
    return facts


@dataclass
class _Selection:
    """The inputs of each cross-round group, selected once the groups before it are resolved
    (report/phases.py `resolve_selected`); the facts naming what each selected."""

    led: Ledger
    rd: RoundData
    prev_led: Ledger
    prev: RoundData
    common: list
    facts: dict[str, Any]
    rate: Value | None = None

    def inputs(self, phase: Phase, group: str | None) -> Iterator[tuple[str, RawSources]]:
        """Where and from what PHASE's GROUP is resolved: its selector's (each a generator)."""
        yield from getattr(self, f"_{group or 'prefill_tail'}")()

    def _pair(self) -> Iterator[tuple[str, RawSources]]:
        """Each shared point against the previous round's."""
        led, prev_led = self.led, self.prev_led
        for p, q in self.common:
            raw = RawSources()
            for qty in REPRO:
                raw.add(qty, led[f"p.{p.pid}.{qty}"])
                raw.add(f"prev_{qty}", import_value(led, f"x.prev.{q.pid}.{qty}", prev_led[f"p.{q.pid}.{qty}"],
                                                    self.prev.name))
            yield f"x.{p.pid}.", raw

    def _diffs(self, qty: str) -> list[Value]:
        """The shared points' differences of QTY where present."""
        return [v for p, _ in self.common if (v := self.led[f"x.{p.pid}.{qty}_diff"]).present]

    def _repro(self, qty: str) -> Iterator[tuple[str, RawSources]]:
        """The spread of QTY's differences over the shared points where present."""
        vals = self._diffs(qty)
        if vals:
            raw = RawSources()
            raw.add(f"{qty}_diffs", [v.value for v in vals], tuple(v.key for v in vals))
            yield "x.", raw

    def _repro_tput(self) -> Iterator[tuple[str, RawSources]]:
        self.facts["repro_points"] = len(self._diffs("output_tok_s"))
        yield from self._repro("output_tok_s")

    def _repro_ttft_p99(self) -> Iterator[tuple[str, RawSources]]:
        yield from self._repro("ttft_ms_p99")

    def _prefill_rate(self) -> Iterator[tuple[str, RawSources]]:
        """The prefill step behind the ITL tail, for a round without a C=1 point of its own: the
        previous round's prefill rate measured alone stands for it (same model, GPU, engine and
        flags: the comparability check), with the clock it ran at."""
        rate_prev = self.prev_led.get("r.prefill_flop_rate")
        own = self.led.get("r.prefill_flop_rate")
        if ((own is None or not own.present) and rate_prev is not None and rate_prev.present
                and self.rd.config is not None):
            self.rate = import_value(self.led, "x.prefill_flop_rate", rate_prev, self.prev.name)
            yield "x.", RawSources()

    def _prefill_tail(self) -> Iterator[tuple[str, RawSources]]:
        """Each point's prefill tail at the borrowed rate, at the clock of the previous round's reference point."""
        if self.rate is None:
            return
        ref = rate_reference_point(self.prev_led["r.prefill_flop_rate"])
        clock_key = f"x.prev.{ref}.sm_clock_load_mhz"
        # The power module derives every point's SM clock, so the reference point has one.
        clock = import_value(self.led, clock_key, self.prev_led[f"p.{ref}.sm_clock_load_mhz"], self.prev.name)
        self.facts["prefill_ref_clock"] = clock_key
        for p in ok_points(self.rd):
            yield p.pid, prefill_tail_raw(self.led, self.rd, p, self.rate, clock)

    def _prefill_c1(self) -> Iterator[tuple[str, RawSources]]:
        """Prefill under concurrency (item 14): the same prompt length at C=1 in the previous round.
        The highest-concurrency point of this round whose prompt length the previous round
        measured alone, with its prefill known on both sides."""
        led, prev_led = self.led, self.prev_led
        prev_pts = ok_points(self.prev)
        for p in sorted(ok_points(self.rd), key=lambda p: -(p.settings.get("concurrency") or 0)):
            ref = next((q for q in prev_pts if q.settings.get("concurrency") == 1
                        and q.settings.get("input_len") == p.settings.get("input_len")
                        and q.settings.get("output_len") == p.settings.get("output_len")), None)
            if (ref is None or p.settings.get("concurrency") == 1
                    or not prev_led[f"p.{ref.pid}.prefill_ms_mean"].present
                    or not led[f"p.{p.pid}.prefill_ms_mean"].present):
                continue
            raw = RawSources()
            raw.add("prefill_ms_mean", led[f"p.{p.pid}.prefill_ms_mean"])
            raw.add("prev_prefill_ms_mean", import_value(led, f"x.prev.{ref.pid}.prefill_ms_mean",
                                                         prev_led[f"p.{ref.pid}.prefill_ms_mean"], self.prev.name))
            yield "x.", raw
            self.facts["prefill_ref_point"] = p.pid
            return

    def _occupancy(self) -> Iterator[tuple[str, RawSources]]:
        """Same KV occupancy (item 20): this round's output throughput against the previous
        round's, interpolated at the same occupancy C·(L+out)/pool."""
        led, prev_led = self.led, self.prev_led
        prev_occ = [(prev_led[f"p.{q.pid}.kv_occupancy"], prev_led[f"p.{q.pid}.output_tok_s"])
                    for q in ok_points(self.prev)]
        prev_occ = sorted((o.value, t.value) for o, t in prev_occ if o.present and t.present)
        best = None
        for p in ok_points(self.rd):
            o, t = led[f"p.{p.pid}.kv_occupancy"], led[f"p.{p.pid}.output_tok_s"]
            if o.present and t.present and len(prev_occ) >= 2 and prev_occ[0][0] <= o.value <= prev_occ[-1][0]:
                best = p  # the highest occupancy inside the previous round's range
        if best is not None:
            cites = (f"{self.prev.name}: p.*.kv_occupancy, p.*.output_tok_s",)
            raw = RawSources()
            raw.add("kv_occupancy", led[f"p.{best.pid}.kv_occupancy"])
            raw.add("prev_kv_occupancies", [a for a, _ in prev_occ], cites)
            raw.add("prev_output_tok_s_by_occupancy", [b for _, b in prev_occ], cites)
            raw.add("output_tok_s", led[f"p.{best.pid}.output_tok_s"])
            yield "x.", raw
            self.facts["occupancy_point"] = best.pid


def require(v: Value) -> Any:
    if not v.present:
        raise Absent.because(v.missing or Reason.of("reason.no_reason"))
    return v.value
