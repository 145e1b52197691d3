"""Verdicts per point: is it valid, and what limited the engine there, each with its evidence.

A verdict reads ledger values only, never raw samples, and rests on more than one signal;
its evidence is the ledger keys it read. When a signal it needs is absent the verdict says
so (a check "not made", a bottleneck `unknown`), never guesses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from serving_ledger.report import validity as V
from serving_ledger.report.ledger import Ledger

BOTTLENECKS = ("gpu_compute", "gpu_bandwidth", "kv_pool", "scheduler_budget", "frontend",
               "client", "under_driven", "unknown")
# Delivery stretches the engine's decode pace by at least this factor: the API server, the
# network or the client, not the engine, set the pace the client saw.
DELIVERY_RATIO_MIN = 1.2
# The GPU counts as busy above this NVML utilisation median (%).
GPU_BUSY_PCT = 90.0
# vLLM's FLOP estimate against the dense peak at or above which compute is the limit, when
# the GPU is also busy and the point sits near or past the ridge; MBU likewise for memory
# bandwidth below the ridge.
MFU_HIGH = 0.3
MBU_HIGH = 0.4
# Below both of these, with no queue and a GPU mostly idle, the load did not stress anything.
MFU_LOW, MBU_LOW, GPU_IDLE_PCT = 0.1, 0.2, 50.0


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


def point_validity(led: Ledger, pid: str, status: str = "ok") -> Validity:
    """The validity checks of one point (thresholds in report.validity)."""
    k = f"p.{pid}."
    ev: dict[str, Any] = {}

    def get(name: str) -> Any:
        ev[k + name] = val(led, k + name)
        return ev[k + name]

    out = Validity(point=pid, valid=True, evidence=ev)
    if status != "ok":
        out.reasons.append("interrupted" if status == "interrupted" else "failed")
    C = get("concurrency") or 0
    checks = {
        "not_held": (get("held_concurrency_fraction"), lambda x: x < V.HELD_MIN),
        "not_steady": (get("lifetimes_in_window"), lambda x: x < V.LIFETIMES_MIN),
        "scrapes_failed": (get("failed_scrape_share"), lambda x: x > V.SCRAPE_FAIL_MAX),
        "client_distorted": (get("client_lag_share_of_itl"), lambda x: x > V.CLIENT_ERROR_MAX),
    }
    # Lockstep needs both sides: the client sent together, and the server saw the wave queue.
    sync, waiting = get("send_synchrony"), get("waiting_peak")
    if C >= 2:
        checks["lockstep"] = (None if sync is None or waiting is None else (sync, waiting),
                              lambda x: x[0] > V.SYNC_MAX and x[1] >= max(1.0, C / 4))
    for code, (x, fails) in checks.items():
        if x is None:
            out.unchecked.append(code)
        elif fails(x):
            out.reasons.append(code)
    out.valid = not out.reasons
    return out


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


def kv_pool_full(led: Ledger, pid: str) -> bool | None:
    """Whether the pool's free tokens at its peak fell short of one more request's blocks."""
    k = f"p.{pid}."
    peak, pool, need = (val(led, k + "kv_usage_peak"), val(led, "r.pool_tokens_usable"),
                        val(led, k + "request_peak_tokens"))
    if peak is None or pool is None or need is None:
        return None
    return (1.0 - peak) * pool < need


def point_bottleneck(led: Ledger, pid: str) -> Attribution:
    """The first limit whose signals all agree, in order: client, KV pool, frontend,
    scheduler budget, GPU compute, GPU bandwidth, too little load; else unknown."""
    k = f"p.{pid}."
    ev: dict[str, Any] = {}

    def get(key: str) -> Any:
        ev[key] = val(led, key)
        return ev[key]

    def verdict(kind: str, mechanism: str, keys: list[str]) -> Attribution:
        return Attribution(pid, kind, mechanism, {key: ev.get(key, val(led, key)) for key in keys})

    lag = get(k + "client_lag_share_of_itl")
    if lag is not None and lag > V.CLIENT_ERROR_MAX:
        return verdict("client", "client_lag", [k + "client_lag_share_of_itl",
                                                k + "client_timing_error_ms", k + "itl_ms_p50"])
    full = kv_pool_full(led, pid)
    waiting, preempt = get(k + "waiting_peak"), get(k + "preemptions")
    if full and ((waiting or 0) > 0 or (preempt or 0) > 0):
        return verdict("kv_pool", "pool_full_and_waiting",
                       [k + "kv_usage_peak", "r.pool_tokens_usable", k + "request_peak_tokens",
                        k + "waiting_peak", k + "preemptions"])
    ratio = get(k + "delivery_tpot_ratio")
    if ratio is not None and ratio >= DELIVERY_RATIO_MIN and lag is not None:
        return verdict("frontend", "delivery_slower_than_engine",
                       [k + "engine_tpot_ms_mean", k + "client_tpot_ms_mean",
                        k + "delivery_tpot_ratio", k + "client_lag_share_of_itl",
                        k + "packet_stamped_read_share", k + "gpu_util_median_pct"])
    q, pf = get(k + "queue_ms_mean"), get(k + "prefill_ms_mean")
    wcap = get(k + "waiting_capacity_peak")
    queued = wcap if wcap is not None else waiting
    if full is False and (queued or 0) > 0 and q is not None and pf is not None and q > pf:
        return verdict("scheduler_budget", "queue_with_free_kv",
                       [k + "waiting_capacity_peak", k + "waiting_peak", k + "kv_usage_peak",
                        k + "queue_ms_mean", k + "prefill_ms_mean", k + "iteration_tokens_mean",
                        "r.max_num_batched_tokens"])
    mfu, mbu, util = get(k + "mfu"), get(k + "mbu"), get(k + "gpu_util_median_pct")
    busy = util is not None and util >= GPU_BUSY_PCT
    intensity, ridge = get(k + "intensity"), get("r.ridge")
    gpu_keys = [k + "mfu", k + "mbu", k + "intensity", "r.ridge", k + "gpu_util_median_pct",
                k + "power_median_w", k + "power_limit_w"]
    # The roofline places the point (its FLOPs per byte against the ridge); the utilisation
    # of that roof says whether the GPU ran near it.
    if busy and intensity is not None and ridge:
        if intensity >= ridge / 2 and (mfu or 0) >= MFU_HIGH:
            return verdict("gpu_compute", "compute_bound", gpu_keys)
        if intensity < ridge and (mbu or 0) >= MBU_HIGH:
            return verdict("gpu_bandwidth", "bandwidth_bound", gpu_keys)
    idle = util is not None and util < GPU_IDLE_PCT
    light = mfu is not None and mbu is not None and mfu < MFU_LOW and mbu < MBU_LOW
    if (idle or light) and not (waiting or 0) and not full:
        return verdict("under_driven", "gpu_mostly_idle", gpu_keys + [k + "waiting_peak"])
    return verdict("unknown", "no_signal_agrees" if util is not None or mfu is not None
                   else "no_gpu_signals", gpu_keys + [k + "waiting_peak", k + "delivery_tpot_ratio"])

