"""Verdicts per point: is it valid, and what limited the engine there, each with its evidence.

A verdict reads ledger values only, never raw samples, and rests on more than one signal;
its evidence is the ledger keys it read. When a signal it needs is absent the verdict says
so (a check "not made", a bottleneck `unknown`), never guesses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from report.derive import validity as V
from report.ledger import Ledger
from report.registry import point_quantity

BOTTLENECKS = ("gpu_compute", "gpu_bandwidth", "kv_pool", "scheduler_budget", "frontend",
               "client", "engine_host", "under_driven", "unknown")
# Every validity check a point can fail.
VALIDITY_CODES = ("not_held", "lockstep", "not_steady", "pace_drift", "over_saturated",
                  "open_loop_capped", "schedule_missed", "scrapes_failed", "client_distorted",
                  "interrupted", "failed")
# A kernel was running at least this share of the time (NVML utilisation median, %): the gate of
# every GPU roof verdict, never evidence of which roof.
GPU_BUSY_PCT = 90.0
# vLLM's FLOP estimate against the dense peak at or above which compute is the limit, when
# the GPU is also busy and the point sits near or past the ridge; MBU likewise for memory
# bandwidth below the ridge.
MFU_HIGH = 0.3
MBU_HIGH = 0.4
# Below both of these, with no queue and a GPU mostly idle, the load did not stress anything.
MFU_LOW, MBU_LOW, GPU_IDLE_PCT = 0.1, 0.2, 50.0
# The GPU waits on the engine's host side below this NVML utilisation (with MFU and MBU low).
GPU_HOST_BOUND_PCT = 60.0
# The CPU engine's processes use at least (busy) or under (idle) this share of the host's cores.
ENGINE_CPU_BUSY, ENGINE_CPU_IDLE = 0.7, 0.3
# A host whose cores are this busy has no CPU to spare for anything the engine is waiting on.
HOST_SATURATED = 0.9
# A GPU at this share of its power limit is held at its power cap.
POWER_CAP_SHARE = 0.97


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
    engine = []
    for q in (50, 99):
        low, off = get(f"engine_itl_ms_p{q}_low"), get(f"client_outside_engine_itl_p{q}")
        if low is not None and low > 0 and off is not None:   # the first bucket resolves nothing
            engine.append(off > V.CLIENT_ERROR_MAX)
    coread, mistimed = get("coread_share_by_counters"), get("mistimed_share")
    counters = None if coread is None or mistimed is None else coread >= mistimed / 2
    if not large:
        return True, (["client_apart_error_small"] if any(engine) else [])
    if engine:
        return (False, []) if any(engine) else (True, ["client_error_engine_agrees"])
    if counters is None:
        return None, ["client_error_unconfirmed"]
    return (False, []) if counters else (True, ["client_error_counters_disagree"])


def point_validity(led: Ledger, pid: str, status: str = "ok") -> Validity:
    """The validity checks of one point (thresholds in report.derive.validity)."""
    k = f"p.{pid}."
    ev: dict[str, Any] = {}

    def get(name: str) -> Any:
        ev[k + name] = val(led, k + name)
        return ev[k + name]

    out = Validity(point=pid, valid=True, evidence=ev)
    if status != "ok":
        out.reasons.append("interrupted" if status == "interrupted" else "failed")
    C = get("concurrency") or 0
    open_loop = get("request_rate") is not None
    checks: dict[str, tuple[bool | None, list[str]]] = {}
    if open_loop:
        checks["over_saturated"] = saturation_check(get)
        checks["open_loop_capped"] = capped_check(get)
        checks["schedule_missed"] = schedule_check(get)
    elif (users := get("session_users_held_fraction")) is not None:
        # A sessions workload: C counts users, who think between turns; held is users busy.
        checks["not_held"] = (users >= V.HELD_MIN, [])
    else:
        checks["not_held"] = held_check(get, C)
    checks["not_steady"] = steady_check(get)
    checks["pace_drift"] = drift_check(get)
    scrapes = get("failed_scrape_share")
    checks["scrapes_failed"] = (None if scrapes is None else scrapes <= V.SCRAPE_FAIL_MAX, [])
    checks["client_distorted"] = distortion_check(get)
    # Lockstep needs both sides: the client sent together, and the server saw the wave queue.
    sync, waiting = get("send_synchrony"), get("waiting_peak")
    if C >= 2 and not open_loop:
        checks["lockstep"] = (None if sync is None or waiting is None else
                              not (sync > V.SYNC_MAX and waiting >= max(1.0, C / 4)), [])
    for code, (passed, notes) in checks.items():
        out.disagreed.extend(notes)
        if passed is None:
            out.unchecked.append(code)
        elif not passed:
            out.reasons.append(code)
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
    # "" where the verdict is not the GPU's, "absent" where none was sampled.
    counters: str = ""
    # Codes of signals that disagreed with the verdict the others pointed to (each worded by the
    # findings as `finding.disagree_<code>`).
    disagreed: list[str] = field(default_factory=list)


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


def _max_of(*xs: Any) -> Any:
    present = [x for x in xs if x is not None]
    return max(present) if present else None


def point_bottleneck(led: Ledger, pid: str) -> Attribution:
    """The first limit whose signals all agree, in order: client, KV pool, scheduler budget,
    frontend, engine host, GPU compute, GPU bandwidth, too little load; else unknown."""
    k = f"p.{pid}."
    ev: dict[str, Any] = {}

    def get(key: str) -> Any:
        ev[key] = val(led, key)
        return ev[key]

    def verdict(kind: str, mechanism: str, keys: list[str], counters: str = "",
                disagreed: tuple[str, ...] = ()) -> Attribution:
        return Attribution(pid, kind, mechanism, {key: ev.get(key, val(led, key)) for key in keys},
                           counters, list(disagreed))

    C = get(k + "concurrency") or 0
    open_loop = get(k + "request_rate") is not None
    waiting = _max_of(get(k + "waiting_peak"), get(k + "waiting_capacity_peak"),
                      get(k + "log_waiting_peak"))
    preempt = get(k + "preemptions")

    # The client: it could not keep C requests in flight (its own count, late sends or a
    # lagging loop) while the engine idled with nothing waiting for it.
    client_held, engine_held = get(k + "client_held_fraction"), get(k + "engine_held_fraction")
    little = get(k + "engine_little_held_fraction")
    lag, itl = get(k + "client_lag_ms_p50"), get(k + "engine_itl_ms_mean")
    # A sessions workload's users think between turns: what the client held is its users busy.
    users = get(k + "session_users_held_fraction")
    held = users if users is not None else client_held
    client_side = (held is not None and held < V.HELD_MIN) or \
        (lag is not None and lag > max(V.LAG_MIN_MS, V.LAG_SHARE_OF_ITL * (itl or 0)))
    # The engine idle: Little's law over its own counter short of C and, where known, the
    # engine's share of the client's count too (Little's window takes in idle time around a
    # short point); or the client's first token over DELIVERY_TTFT_FACTOR times the engine's.
    engine_idle = not (waiting or 0) and (
        (little is not None and little < V.HELD_MIN
         and (engine_held is None or engine_held < V.HELD_MIN)) or
        (get(k + "delivery_ttft_ms") is not None and get(k + "engine_ttft_ms_mean") is not None
         and ev[k + "delivery_ttft_ms"] > (V.DELIVERY_TTFT_FACTOR - 1) * max(ev[k + "engine_ttft_ms_mean"], 1.0)))
    if not open_loop and client_side and engine_idle:
        return verdict("client", "client_starved",
                       [k + "client_held_fraction", k + "client_lag_ms_p50", k + "engine_held_fraction",
                        k + "engine_little_held_fraction",
                        k + "engine_itl_ms_mean", k + "ttft_ms_mean", k + "engine_ttft_ms_mean",
                        k + "client_cpu_cores", k + "host_cpu_busy_share", k + "waiting_peak"])
    # The KV pool: full at its peak (gauge or log), and requests waited or were preempted.
    full = kv_pool_full(led, pid)
    if full and ((waiting or 0) > 0 or (preempt or 0) > 0):
        return verdict("kv_pool", "pool_full_and_waiting" if ev.get(k + "kv_usage_peak", val(led, k + "kv_usage_peak")) is not None
                       else "pool_full_and_waiting_log",
                       [k + "kv_usage_peak", k + "log_kv_usage_peak_pct",
                        k + "pool_tokens_usable" if k + "pool_tokens_usable" in led else "r.pool_tokens_usable",
                        k + "request_peak_tokens", k + "kv_expected_peak", k + "waiting_peak",
                        k + "log_waiting_peak", k + "preemptions"])
    # The scheduler: requests queued with room in the pool, and queueing outweighed prefill.
    q, pf = get(k + "queue_ms_mean"), get(k + "prefill_ms_mean")
    if full is False and (waiting or 0) > 0 and q is not None and pf is not None and q > pf:
        lagged = (get(k + "delivery_tpot_ratio") or 0) >= V.DELIVERY_RATIO_MIN
        return verdict("scheduler_budget", "queue_with_free_kv_and_delivery" if lagged else "queue_with_free_kv",
                       [k + "waiting_capacity_peak", k + "waiting_peak", k + "kv_usage_peak",
                        k + "queue_ms_mean", k + "prefill_ms_mean", k + "iteration_tokens_mean",
                        "r.max_num_batched_tokens", k + "queue_share", k + "delivery_tpot_ratio",
                        k + "engine_tpot_ms_mean", k + "client_tpot_ms_mean"])
    # Delivery: the client received tokens slower than the engine core made them, while the
    # client itself kept up (its loop on time, its timing error measured small).
    ratio = get(k + "delivery_tpot_ratio")
    err = get(k + "itl_error_share_p50")
    if ratio is not None and ratio >= V.DELIVERY_RATIO_MIN and not client_side and \
            (err is None or err <= V.CLIENT_ERROR_MAX):
        return verdict("frontend", "delivery_slower_than_engine",
                       [k + "engine_tpot_ms_mean", k + "client_tpot_ms_mean",
                        k + "delivery_tpot_ratio", k + "itl_error_ms_p50", k + "client_lag_ms_p50",
                        k + "packet_stamped_read_share", k + "outside_engine_share"])
    mfu, mbu, util = get(k + "mfu"), get(k + "mbu"), get(k + "gpu_util_median_pct")
    engine_busy = (engine_held is not None and engine_held >= V.HELD_MIN) or \
        (get(k + "server_running_median") is not None and C and ev[k + "server_running_median"] >= V.HELD_MIN * C)
    gpu_keys = [k + "mfu", k + "mbu", k + "intensity", k + "decode_intensity", k + "prefill_intensity",
                "r.ridge", k + "gpu_util_median_pct", k + "power_median_w", k + "power_limit_w",
                k + "dram_bandwidth_share", k + "tensor_active_share", k + "sm_active_share",
                "r.rule_dram_bw_high", "r.rule_tensor_active_high"]
    # The GPU's own counters, the second signal beside each modelled roof where sampled. NVML's
    # utilisation says only that a kernel was running: a gate (the GPU was not idle), never
    # evidence of which roof.
    meas = gpu_counters(get, k)
    said = "absent" if meas is None else "shown"
    # The roofline by phase: compute is the limit only where the prefill is past the ridge, memory
    # bandwidth only where a decode step is below it (a phase not modelled does not veto).
    ridge, dec, pre = get("r.ridge"), get(k + "decode_intensity"), get(k + "prefill_intensity")
    # Compute is never named below the ridge: the prefill's intensity where the phases are
    # modelled, else the window's time-averaged one, and a ridge that is known.
    past = pre if pre is not None else get(k + "intensity")
    prefill_past = ridge is not None and past is not None and past >= ridge
    decode_below = ridge is None or dec is None or dec < ridge
    # The engine's host side: every slot busy while the GPU mostly waits (NVML idle and the
    # roofline far from either roof), or the CPU engine's own processes using the host.
    gpu_waits = util is not None and util < GPU_HOST_BOUND_PCT and \
        mfu is not None and mbu is not None and mfu < MFU_LOW * 2 and mbu < MBU_LOW * 1.5
    cpu_share = get(k + "engine_cpu_share")
    host_keys = [k + "engine_held_fraction", k + "server_running_median", k + "gpu_util_median_pct",
                 k + "mfu", k + "mbu", k + "engine_itl_ms_mean", k + "engine_steps_per_s",
                 k + "engine_cpu_share", k + "dram_bandwidth_share", k + "tensor_active_share",
                 k + "sm_active_share"]
    if engine_busy and (waiting or 0) <= C / 4 and gpu_waits:
        if meas is not None and meas.near_a_roof():
            # The counters saw DRAM or the tensor pipes at a roof's bar: the GPU was not waiting.
            return verdict("unknown", "host_counters_disagree", host_keys + gpu_keys, "",
                           ("counters_gpu_not_waiting",))
        return verdict("engine_host", "gpu_waits_on_host" if not (waiting or 0) else "gpu_waits_on_host_queued",
                       host_keys, said)
    host_busy = get(k + "host_cpu_busy_share")
    if util is None and mfu is None and cpu_share is not None and cpu_share >= ENGINE_CPU_BUSY \
            and (waiting or 0) <= C / 4 \
            and (engine_busy or (host_busy is not None and host_busy >= HOST_SATURATED)):
        return verdict("engine_host", "cpu_engine_busy" if not (waiting or 0) else "cpu_engine_busy_queued",
                       [k + "engine_cpu_share", k + "engine_held_fraction", k + "engine_steps_per_s",
                        k + "engine_itl_ms_mean", k + "host_cpu_busy_share"])
    # The GPU roofline: the larger of vLLM's FLOP and byte rates against their peaks, when it
    # clearly dominates the other (each is the share of time its phase would take at its roof).
    busy = util is not None and util >= GPU_BUSY_PCT
    if busy and mfu is not None and mbu is not None:
        if mfu >= MFU_HIGH and mfu >= V.ROOF_DOMINANCE * mbu and prefill_past:
            capped_keys = gpu_keys + [k + "power_cap_share", k + "sm_clock_load_mhz", "r.max_sm_clock_mhz"]
            if meas is not None and meas.tensor < V.TENSOR_ACTIVE_HIGH:
                return verdict("unknown", "compute_counter_disagrees", capped_keys, "", ("tensor_short_of_mfu",))
            capped = _power_capped(get, k)
            return verdict("gpu_compute", "compute_bound_power_capped" if capped else "compute_bound",
                           capped_keys, "absent" if meas is None else "compute_agrees")
        if mbu >= MBU_HIGH and mbu >= V.ROOF_DOMINANCE * mfu and decode_below:
            if meas is not None and meas.dram < V.DRAM_BW_HIGH:
                return verdict("unknown", "bandwidth_counter_disagrees", gpu_keys, "", ("dram_short_of_mbu",))
            return verdict("gpu_bandwidth", "bandwidth_bound", gpu_keys,
                           "absent" if meas is None else "bandwidth_agrees")
        if mfu >= MFU_HIGH * 0.8 and mbu >= MBU_HIGH * 0.8 * 0.75 and \
                max(mfu, mbu) < V.ROOF_DOMINANCE * min(mfu, mbu):
            return verdict("unknown", "roofs_balanced", gpu_keys, said)
    idle = util is not None and util < GPU_IDLE_PCT
    light = mfu is not None and mbu is not None and mfu < MFU_LOW and mbu < MBU_LOW
    cpu_idle = util is None and cpu_share is not None and cpu_share < ENGINE_CPU_IDLE
    if (idle or light or cpu_idle) and not (waiting or 0) and not full and not engine_busy:
        idle_keys = gpu_keys + [k + "waiting_peak", k + "engine_held_fraction", k + "engine_cpu_share"]
        if meas is not None and meas.near_a_roof():
            # The counters saw DRAM or the tensor pipes at a roof's bar: the load did stress the GPU.
            return verdict("unknown", "idle_counters_disagree", idle_keys, "", ("counters_gpu_stressed",))
        return verdict("under_driven", "cpu_engine_mostly_idle" if cpu_idle else "engine_mostly_idle",
                       idle_keys, "" if cpu_idle else said)
    return verdict("unknown", "no_signal_agrees" if util is not None or mfu is not None
                   else "no_gpu_signals", gpu_keys + [k + "waiting_peak", k + "delivery_tpot_ratio",
                                                      k + "engine_cpu_share"],
                   "" if util is None and mfu is None else said)


def _power_capped(get, k: str) -> bool:
    """A compute-bound point held at the power limit: power at 97 % of it or the SW power-cap
    bit set in most samples, with the SM clock below its maximum."""
    power, limit, share = get(k + "power_median_w"), get(k + "power_limit_w"), get(k + "power_cap_share")
    clock, top = get(k + "sm_clock_load_mhz"), get("r.max_sm_clock_mhz")
    at_cap = (power is not None and limit and power >= POWER_CAP_SHARE * limit) or \
        (share is not None and share >= 0.5)
    return bool(at_cap and clock is not None and top and clock < top)
