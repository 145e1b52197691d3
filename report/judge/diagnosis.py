"""Verdicts per point: is it valid, and what limited the engine there, each with its evidence.

A verdict reads ledger values only, never raw samples, and rests on more than one signal;
its evidence is the ledger keys it read. When a signal it needs is absent the verdict says
so (a check "not made", a bottleneck `unknown`), never guesses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from report.derive import validity as V
from report.judge.rules import BOTTLENECKS, KNOBS, RULES, Signals, facts_of, roof_of  # noqa: F401 (BOTTLENECKS read here)
from report.ledger import Ledger
from report.registry import point_quantity

# Every validity check a point can fail.
VALIDITY_CODES = ("not_held", "lockstep", "not_steady", "pace_drift", "over_saturated",
                  "open_loop_capped", "schedule_missed", "node_behind", "scrapes_failed",
                  "client_distorted", "interrupted", "failed")


def val(led: Ledger, key: str) -> Any:
    """The value at KEY, or None when absent or unknown."""
    return led.value_of(key)


@dataclass
class Validity:
    """Whether a point measured what it was set to measure, and why not."""

    point: str
    valid: bool
    reasons: list[str] = field(default_factory=list)         # codes of the failed checks
    unchecked: list[str] = field(default_factory=list)       # checks whose inputs are absent
    evidence: dict[str, Any] = field(default_factory=dict)   # ledger key -> value
    # Codes of signals that disagreed with the check's verdict (each worded by the findings):
    # the check still stands on the signals that agreed.
    disagreed: list[str] = field(default_factory=list)


def _at_least(x: Any, low: float) -> bool | None:
    return None if x is None else x >= low


def held_check(get, C: int) -> tuple[bool | None, list[str]]:
    """Whether the set concurrency was held, and which signals disagreed.

    The client's own in-flight count says what the server as a whole held; the engine's view
    (running + waiting gauges, Little's law over its e2e counter) says whether the engine had
    them. Not held needs the client and the engine to agree; a gauge the counter contradicts is
    stale, and an engine short of what the client held spent the rest outside the engine.
    """
    client = _at_least(get("client_held_fraction"), V.HELD_MIN)
    gauge = _at_least(get("held_concurrency_fraction"), V.HELD_MIN)
    little = _at_least(get("engine_little_held_fraction"), V.HELD_MIN)
    engine = little if little is not None else gauge
    notes: list[str] = []
    inside = _at_least(get("engine_held_fraction"), V.HELD_MIN)
    # The gauges against the engine's share of the client's count (what they should read).
    g, e = get("held_concurrency_fraction"), get("engine_held_fraction")
    if g is not None and e is not None and abs(g - e) >= V.GAUGE_STALE_GAP:
        notes.append("gauge_stale" if g < e else "gauge_over_counter")
    if client is None:
        return engine, notes
    if engine is None:           # the client's count alone: one signal, the check is not made
        return None, notes + ([] if client else ["client_short_engine_unseen"])
    if client and inside is False:
        notes.append("held_outside_engine")
    if not client and engine:
        notes.append("engine_held_client_not")
        return None, notes
    return client if engine is None else (client or engine), notes


def steady_check(get) -> tuple[bool | None, list[str]]:
    """Whether the window covered enough request lifetimes."""
    lifetimes = get("lifetimes_in_window")
    notes: list[str] = []
    if lifetimes is None:
        return None, notes
    return lifetimes >= V.LIFETIMES_MIN * (1 - V.FLOAT_SLACK), notes


def drift_check(get) -> tuple[bool | None, list[str]]:
    """Whether the pace held through the window: not drifting outside TREND_STEADY by both the
    client's chunks and the engine's generation counter."""
    lo, hi = V.TREND_STEADY
    drift = [None if x is None else not lo <= x <= hi
             for x in (get("throughput_trend"), get("engine_throughput_trend"))]
    if drift[0] is None or drift[1] is None:
        return None, []
    return not (drift[0] and drift[1]), (["pace_drift_one_side"] if drift[0] != drift[1] else [])


def saturation_check(get) -> tuple[bool | None, list[str]]:
    """Open loop: whether arrivals outran the server, the client's in-flight count growing and
    the engine finishing fewer than were sent (or TTFT rising through the window)."""
    growth, window, sent = get("inflight_growth"), get("send_span_s"), get("send_rate")
    finish, ttft = get("finish_over_send"), get("ttft_trend")
    if growth is None or window is None or sent is None:
        return None, []
    grows = growth * window > max(V.GROWTH_MIN_REQUESTS, V.GROWTH_MIN_SHARE * sent * window)
    engine = [x for x in ((finish is not None and finish < V.FINISH_MIN),
                          (ttft is not None and ttft > V.TTFT_TREND_MAX)) if x]
    if finish is None and ttft is None:
        return None, []
    notes = ["queue_grew_engine_kept_up"] if grows and not engine else []
    return not (grows and engine), notes


def capped_check(get) -> tuple[bool | None, list[str]]:
    """Open loop: whether its concurrency cap held requests back, sends late against their
    schedule and the requests in flight at the cap, both."""
    late, at_cap = get("late_send_share"), get("cap_held_fraction")
    if late is None:
        return None, []
    if at_cap is None:           # no cap to hold anything back (or no count against it)
        return None, []
    notes = ["late_sends_below_cap"] if late > V.LATE_SEND_MAX and at_cap < V.CAP_HELD_MIN else []
    return not (late > V.LATE_SEND_MAX and at_cap >= V.CAP_HELD_MIN), notes


def schedule_check(get) -> tuple[bool | None, list[str]]:
    """Open loop: whether the client kept its schedule where no cap held it back: sends late
    against their schedule, and the requests in flight below the cap (or no cap at all)."""
    late, at_cap = get("late_send_share"), get("cap_held_fraction")
    if late is None:
        return None, []
    held_by_cap = at_cap is not None and at_cap >= V.CAP_HELD_MIN
    return not (late > V.LATE_SEND_MAX and not held_by_cap), []


def distortion_check(get) -> tuple[bool | None, list[str]]:
    """Whether the client's timing distorted its ITL. The stamps (events sharing a read while
    bytes waited in the socket) give a measured error; it counts when it exceeds the tolerance
    at p50 or p99 and a second signal agrees: the client's percentiles outside the engine's own
    ITL histogram bucket where that bucket resolves them, else the read counters showing the
    events were read together."""
    errs = [x for x in (get("itl_error_share_p50"), get("itl_error_share_p99")) if x is not None]
    if not errs:
        return None, []
    large = any(x > V.CLIENT_ERROR_MAX for x in errs)
    engine, outside = [], []
    for q in ("p50", "p99"):
        low, off = get(f"engine_itl_ms_{q}_low"), get(f"client_outside_engine_itl_{q}")
        if low is not None and low > 0 and off is not None:   # the first bucket resolves nothing
            engine.append(off > V.CLIENT_ERROR_MAX)
            if engine[-1]:
                outside.append(q)
    coread, mistimed = get("coread_share_by_counters"), get("mistimed_share")
    counters = None if coread is None or mistimed is None else coread >= V.COREAD_CONFIRMS_SHARE * mistimed
    if not large:
        # the sentence names the percentile that lies outside the engine's bucket, p50 first
        return True, ([] if not outside else ["client_apart_error_small" if outside[0] == "p50"
                                              else "client_apart_error_small_p99"])
    if engine:
        return (False, []) if any(engine) else (True, ["client_error_engine_agrees"])
    if counters is None:
        return None, ["client_error_unconfirmed"]
    return (False, []) if counters else (True, ["client_error_counters_disagree"])


def not_held_check(get, at: "At") -> tuple[bool | None, list[str]]:
    """Whether a closed loop held its C: a sessions workload's users busy (C counts users, who
    think between turns), else the client's and the engine's counts (held_check)."""
    users = get("session_users_held_fraction")
    if users is not None:
        return users >= V.HELD_MIN, []
    return held_check(get, at.C)


def node_check(get) -> tuple[bool | None, list[str]]:
    """A Ray round: whether every client node kept its part of the schedule (the late ones are named)."""
    behind = get("client_nodes_behind")
    return None if behind is None else not behind, []


def scrapes_check(get) -> tuple[bool | None, list[str]]:
    """Whether /metrics answered. The API server answers it too: scrapes that fail while it
    delivers tokens slower than the engine makes them are its overload (the frontend verdict),
    not a sampling fault; the client's own measurements stand."""
    scrapes = get("failed_scrape_share")
    ratio = get("delivery_tpot_ratio")
    if scrapes is not None and scrapes > V.SCRAPE_FAIL_MAX and ratio is not None and ratio >= V.DELIVERY_RATIO_MIN:
        return True, ["scrapes_failed_frontend"]
    return None if scrapes is None else scrapes <= V.SCRAPE_FAIL_MAX, []


def lockstep_check(get, at: "At") -> tuple[bool | None, list[str]]:
    """Whether the streams ran in waves: the client sent together and the server saw the wave
    queue, both. Waves that formed after a random ramp are the server's (requests finishing in
    the same step are sent again together), which the point measures as it is."""
    sync, waiting = get("send_synchrony"), get("waiting_peak")
    waves = None if sync is None or waiting is None else \
        sync > V.SYNC_MAX and waiting >= max(1.0, V.LOCKSTEP_WAITING_SHARE * at.C)
    if waves and get("random_ramp_s") is not None:
        return True, ["waves_from_server"]
    return None if waves is None else not waves, []


@dataclass(frozen=True)
class At:
    """What a point was set to do, as the checks read it: its concurrency and whether its loop was open."""

    C: int
    open_loop: bool


@dataclass(frozen=True)
class Check:
    """One validity check: the code it fails with, where it applies, its condition over a point's
    signals (passed, or None where its inputs are absent, and the codes of signals that disagreed),
    the signals it reads, the rule values it cites, the plan setting that remedies it ("section.key")."""

    code: str
    where: Callable[[At], bool]
    test: Callable[[Callable[[str], Any], At], tuple[bool | None, list[str]]]
    reads: tuple[str, ...]
    cites: tuple[str, ...]
    remedy: str = ""
    # Signals read as evidence at every point, where the check applies or not.
    shown: tuple[str, ...] = ()


def _open(at: At) -> bool:
    return at.open_loop


def _closed(at: At) -> bool:
    return not at.open_loop


def _every(at: At) -> bool:
    return True


def _streams(at: At) -> bool:
    """A closed loop of several streams: a single stream is never called lockstep."""
    return not at.open_loop and at.C >= 2


HELD_READS = ("session_users_held_fraction", "client_held_fraction", "held_concurrency_fraction",
              "engine_little_held_fraction", "engine_held_fraction")

# In order: each check that applies at a point is made; a failed one adds its code to the
# point's reasons, one whose inputs are absent to its unchecked (the order the findings list them).
CHECKS: tuple[Check, ...] = (
    Check("over_saturated", _open, lambda get, at: saturation_check(get),
          ("inflight_growth", "send_span_s", "send_rate", "finish_over_send", "ttft_trend"),
          ("r.rule_growth_min_requests", "r.rule_growth_min_share", "r.rule_finish_min", "r.rule_ttft_trend_max"),
          "sweep.request_rate"),
    Check("open_loop_capped", _open, lambda get, at: capped_check(get), ("late_send_share", "cap_held_fraction"),
          ("r.rule_late_send_ms", "r.rule_late_send_max", "r.rule_cap_held_min"), "sweep.concurrency"),
    Check("schedule_missed", _open, lambda get, at: schedule_check(get), ("late_send_share", "cap_held_fraction"),
          ("r.rule_late_send_ms", "r.rule_late_send_max", "r.rule_cap_held_min"), "client.workers"),
    Check("not_held", _closed, not_held_check, HELD_READS, ("r.rule_held_min", "r.rule_gauge_stale_gap"),
          "client.workers"),
    Check("node_behind", _every, lambda get, at: node_check(get), ("client_nodes_behind",), ("r.rule_node_sent_min",),
          "client.nodes"),
    Check("not_steady", _every, lambda get, at: steady_check(get), ("lifetimes_in_window",),
          ("r.rule_lifetimes_min", "r.rule_float_slack"), "sweep.duration_s"),
    Check("pace_drift", _every, lambda get, at: drift_check(get), ("throughput_trend", "engine_throughput_trend"),
          ("r.rule_trend_steady_low", "r.rule_trend_steady_high"), "sweep.duration_s"),
    Check("scrapes_failed", _every, lambda get, at: scrapes_check(get), ("failed_scrape_share", "delivery_tpot_ratio"),
          ("r.rule_scrape_fail_max", "r.rule_delivery_ratio_min"), "sampler.metrics_interval_s"),
    Check("client_distorted", _every, lambda get, at: distortion_check(get),
          ("itl_error_share_p50", "itl_error_share_p99", "engine_itl_ms_p50_low", "client_outside_engine_itl_p50",
           "engine_itl_ms_p99_low", "client_outside_engine_itl_p99", "coread_share_by_counters", "mistimed_share"),
          ("r.rule_client_error_max", "r.rule_coread_confirms_share"), "client.workers"),
    Check("lockstep", _streams, lockstep_check, ("send_synchrony", "waiting_peak", "random_ramp_s"),
          ("r.rule_sync_max", "r.rule_lockstep_waiting_share"), "sweep.ramp_s", shown=("send_synchrony", "waiting_peak")),
)


def point_validity(led: Ledger, pid: str, status: str = "ok") -> Validity:
    """The validity checks of one point: CHECKS in their declared order (thresholds in
    report.derive.validity)."""
    k = f"p.{pid}."
    ev: dict[str, Any] = {}

    def get(name: str) -> Any:
        ev[k + name] = val(led, k + name)
        return ev[k + name]

    out = Validity(point=pid, valid=True, evidence=ev)
    if status != "ok":
        out.reasons.append("interrupted" if status == "interrupted" else "failed")
    at = At(C=get("concurrency") or 0, open_loop=get("request_rate") is not None)
    for check in CHECKS:
        for name in check.shown:
            get(name)
        if not check.where(at):
            continue
        passed, notes = check.test(get, at)
        out.disagreed.extend(notes)
        if passed is None:
            out.unchecked.append(check.code)
        elif not passed:
            out.reasons.append(check.code)
    out.valid = not out.reasons
    return out


@point_quantity(unit="", key="valid")
def passed_every_check(failed_checks: tuple[str, ...]) -> bool:
    """Whether the point passed every validity check (none failed)."""
    return not failed_checks


@dataclass
class Attribution:
    """What limited the engine at one point, and the ledger values that say so."""

    point: str
    bottleneck: str
    mechanism: str                                           # a code the templates word
    evidence: dict[str, Any] = field(default_factory=dict)
    # What the GPU's own counters said of a GPU verdict (a `finding.counters_<code>` sentence):
    # "" where the verdict rests on its own rule's signals, "model_only" where no second signal was recorded.
    counters: str = ""
    # Codes of signals that disagreed with the verdict the others pointed to (each worded by the
    # findings as `finding.disagree_<code>`).
    disagreed: list[str] = field(default_factory=list)
    # The knob the limit names (rules.KNOBS), worded as `label.knob_<knob>`.
    knob: str = ""
    # The limits whose rules hold too, later in the declared order: what binds next once this
    # limit is relieved (a GPU rule's as the roof the model names).
    also: tuple[str, ...] = ()

    @property
    def confidence(self) -> str:
        """How the verdict stands: confirmed by a second signal, on the model alone, or on its own rule's signals."""
        if self.counters in ("compute_agrees", "bandwidth_agrees", "flops_agree", "nvml_waits"):
            return "confirmed"
        return "model_only" if self.counters in ("model_only", "shown") else "signals"


def kv_pool_full(led: Ledger, pid: str) -> bool | None:
    """Whether the pool's free tokens at its peak fell short of one more request's blocks
    (the /metrics gauge's peak, else the server log's stats lines)."""
    k = f"p.{pid}."
    # A round of several server sets has each point's own pool (its set's).
    pool_key = k + "pool_tokens_usable" if k + "pool_tokens_usable" in led else "r.pool_tokens_usable"
    peak, pool, need = (val(led, k + "kv_usage_peak"), val(led, pool_key),
                        val(led, k + "request_peak_tokens"))
    if peak is None and val(led, k + "log_kv_usage_peak_pct") is not None:
        peak = val(led, k + "log_kv_usage_peak_pct") / 100.0
    if peak is None:
        return None
    if pool is None or need is None:
        # Without the pool's size: a gauge that reads it full, or far from full.
        return True if peak >= V.POOL_FULL_SHARE else False if peak < V.POOL_ROOM_SHARE else None
    return (1.0 - peak) * pool < need


@dataclass(frozen=True)
class GpuCounters:
    """The GPU's own counters at a point (GPM or DCGM): DRAM bandwidth and tensor-pipe activity, shares 0..1."""

    dram: float
    tensor: float

    def near_a_roof(self) -> bool:
        """Whether either counter reached its roof's bar (the GPU was not waiting, nor idle)."""
        return self.dram >= V.DRAM_BW_HIGH or self.tensor >= V.TENSOR_ACTIVE_HIGH


def gpu_counters(get, k: str) -> GpuCounters | None:
    """The point's measured DRAM share and tensor activity, None unless both were sampled."""
    dram, tensor = get(k + "dram_bandwidth_share"), get(k + "tensor_active_share")
    return None if dram is None or tensor is None else GpuCounters(dram, tensor)


def point_bottleneck(led: Ledger, pid: str) -> Attribution:
    """The first limit whose rule holds (report/judge/rules.py, in its declared order), with the
    second signals that confirmed or contradicted it; unknown where no rule holds."""
    k = f"p.{pid}."
    ev: dict[str, Any] = {}

    def get(key: str) -> Any:
        if key not in ev:
            ev[key] = val(led, key)
        return ev[key]

    f = facts_of(Signals(get, k), kv_pool_full(led, pid))
    for i, rule in enumerate(RULES):
        if rule.when(f):
            keys = [c if c.startswith("r.") else k + c for c in rule.cites]
            for key in keys:
                get(key)
            att = Attribution(pid, rule.bottleneck, rule.mechanism(f), {key: ev[key] for key in keys})
            if rule.bottleneck == "gpu":
                _gpu_signals(att, f, get, k)
            elif rule.bottleneck == "engine_host" and att.mechanism == "step_host_side":
                _host_signals(att, f, get, k)
            # The CPU engine's host side is its cores, not kernel launches.
            att.knob = "cpu_engine" if att.mechanism.startswith("cpu_engine_busy") else KNOBS[att.bottleneck]
            att.also = _also_holding(f, RULES[i + 1:])
            return att
    keys = [k + c for c in ("waiting_peak", "delivery_tpot_ratio", "engine_cpu_share", "step_roof_share",
                            "step_ms_model", "step_ms_measured", "mfu", "mbu", "gpu_util_median_pct",
                            "kv_usage_peak", "concurrency")]
    for key in keys:
        get(key)
    modelled = ev[k + "step_roof_share"] is not None
    # Without a GPU signal, a queue beside a busy engine and a pool with room: neither the host
    # side (it allows a queue of a quarter of C at most) nor the pool explains it, and no roof is known.
    queued = (ev[k + "waiting_peak"] or 0) > 0 and ev[k + "engine_cpu_share"] is not None \
        and ev[k + "kv_usage_peak"] is not None
    return Attribution(pid, "unknown", "no_signal_agrees" if modelled or ev[k + "gpu_util_median_pct"] is not None
                       else "no_gpu_signals_queued" if queued else "no_gpu_signals", {key: ev[key] for key in keys})


def _also_holding(f, rules) -> tuple[str, ...]:
    """The limits of RULES whose conditions hold as well, in order (the GPU rule as its roof)."""
    return tuple(roof_of(f) if r.bottleneck == "gpu" else r.bottleneck for r in rules if r.when(f))


def _flops_agree(get, k: str) -> bool | None:
    """Whether vLLM's FLOP counter per step matches the model's FLOPs per step (None: no counter)."""
    ratio = get(k + "step_flops_counter_ratio")
    if ratio is None:
        return None
    lo, hi = V.COUNTER_AGREES
    return lo <= ratio <= hi


def _gpu_signals(att: Attribution, f, get, k: str) -> None:
    """A GPU verdict: the roof the model names, confirmed or weakened by the second signals."""
    att.bottleneck = roof_of(f)
    meas = gpu_counters(get, k)
    if att.bottleneck == "gpu_compute" and _power_capped(get, k):
        att.mechanism = "step_compute_power_capped"
    if meas is not None:
        if att.bottleneck == "gpu_compute" and meas.tensor < V.TENSOR_ACTIVE_HIGH:
            att.bottleneck, att.disagreed = "gpu", ["tensor_short_of_model"]
        elif att.bottleneck == "gpu_bandwidth" and meas.dram < V.DRAM_BW_HIGH:
            att.bottleneck, att.disagreed = "gpu", ["dram_short_of_model"]
        att.counters = {"gpu_compute": "compute_agrees", "gpu_bandwidth": "bandwidth_agrees"}.get(att.bottleneck, "shown")
        return
    agree = _flops_agree(get, k)
    att.counters = "flops_agree" if agree else "model_only"
    if agree is False:
        att.disagreed = ["flop_counter_off_model"]


def _host_signals(att: Attribution, f, get, k: str) -> None:
    """A host-side verdict by the step model: the GPU's own counters must not see it at a roof."""
    meas = gpu_counters(get, k)
    if meas is not None and meas.near_a_roof():
        att.bottleneck, att.mechanism, att.disagreed = "unknown", "host_counters_disagree", ["counters_gpu_not_waiting"]
        return
    util = f.gpu_util_median_pct
    att.counters = ("nvml_waits" if util is not None and util < V.GPU_HOST_BOUND_PCT else
                    "shown" if meas is not None else "model_only")


def _power_capped(get, k: str) -> bool:
    """A compute-bound point held at the power limit: power at POWER_CAP_SHARE of it or the SW
    power-cap bit set in POWER_CAP_BIT_SHARE of the samples, with the SM clock below its maximum."""
    power, limit, share = get(k + "power_median_w"), get(k + "power_limit_w"), get(k + "power_cap_share")
    clock, top = get(k + "sm_clock_load_mhz"), get("r.max_sm_clock_mhz")
    at_cap = (power is not None and limit and power >= V.POWER_CAP_SHARE * limit) or \
        (share is not None and share >= V.POWER_CAP_BIT_SHARE)
    return bool(at_cap and clock is not None and top and clock < top)
