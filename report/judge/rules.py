"""What limited the engine at a point: rules as data, evaluated in a declared order.

Each rule names a limit (`bottleneck`), the knob that moves it, the ledger values it reads and
its condition over them; the first rule whose condition holds gives the verdict. The queue's
limits come first (the pool, the sequence cap, the step budget: requests waited inside the
engine, so what sent them was not the limit), then the client's side (a host it shares with the
engine, the client itself), the API server, then the step model: the roofs the model of the engine step predicts
(report/derive/step.py) against the step measured. A step the roofs explain is the GPU's (the
roof the modelled time sits at); one they do not explain while the engine is busy is the host
side's. Thresholds are policy (report/derive/validity.py). vLLM's FLOP counters, NVML and the
GPU's own counters are second signals: they confirm the term the model names (the verdict's
`counters` code says which did), and a counter that contradicts it weakens the verdict to the
GPU without a roof; their absence never silences a verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from report.derive import validity as V

# Every limit a point can get; `gpu` is the GPU without one roof named (prompt-carrying steps at
# the compute roof, decode-only steps at the bandwidth roof, or a roof a counter contradicts).
BOTTLENECKS = ("gpu_compute", "gpu_bandwidth", "gpu", "kv_pool", "sequence_cap", "scheduler_budget",
               "frontend", "shared_host", "client", "engine_host", "under_driven", "unknown")
# A verdict one signal fewer may weaken to (never turn into another limit): a roof to the GPU
# without one; a host shared by client and engine to the engine's host side (the client's
# share of the story needs the host's samples).
WEAKER = {"gpu_compute": "gpu", "gpu_bandwidth": "gpu", "shared_host": "engine_host"}
# The knob each limit names: the label the findings word it with (`label.knob_<name>`).
KNOBS = {"gpu_compute": "gpu_compute", "gpu_bandwidth": "gpu_bandwidth", "gpu": "gpu",
         "kv_pool": "kv_pool", "sequence_cap": "max_num_seqs", "scheduler_budget": "max_num_batched_tokens",
         "frontend": "api_server", "shared_host": "client_cores", "client": "client_workers",
         "engine_host": "engine_host", "under_driven": "load", "unknown": ""}


@dataclass
class Signals:
    """A point's ledger values as the rules read them; every value read is kept as evidence."""

    get: Callable[[str], Any]
    k: str                               # "p.<point>."

    def __call__(self, name: str) -> Any:
        return self.get(name if name.startswith("r.") else self.k + name)


@dataclass(frozen=True)
class Rule:
    """One limit: its condition over a point's signals, the mechanism code it words, the values it cites."""

    bottleneck: str
    mechanism: Callable[["Facts"], str]
    when: Callable[["Facts"], bool]
    cites: tuple[str, ...]


@dataclass
class Facts:
    """The signals the rules share, derived once from the ledger (None where absent)."""

    s: Signals
    C: float = 0
    open_loop: bool = False
    waiting: float = 0.0
    preempt: float = 0.0
    pool_full: bool | None = None
    client_side: bool = False
    engine_idle: bool = False
    engine_busy: bool = False
    host_holds_client: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def __getattr__(self, name: str) -> Any:
        # A signal not computed above reads its ledger value (and is cited as evidence).
        if name.startswith("_") or name in ("s", "extra"):
            raise AttributeError(name)
        return self.s(name)


def _max_of(*xs: Any) -> Any:
    present = [x for x in xs if x is not None]
    return max(present) if present else None


def _ge(x: Any, bar: float) -> bool:
    return x is not None and x >= bar


def facts_of(s: Signals, pool_full: bool | None) -> Facts:
    """The shared signals of one point (see Facts)."""
    f = Facts(s=s, C=s("concurrency") or 0, open_loop=s("request_rate") is not None, pool_full=pool_full)
    f.waiting = _max_of(s("waiting_peak"), s("waiting_capacity_peak"), s("log_waiting_peak")) or 0.0
    f.preempt = s("preemptions") or 0.0
    users = s("session_users_held_fraction")
    held = users if users is not None else s("client_held_fraction")
    lag, itl = s("client_lag_ms_p50"), s("engine_itl_ms_mean")
    # The client: short of C by its own count, or its loop lagging past the engine's pace; in a
    # Ray round, also one client node's own loop lagging so (the merged samples may hide it).
    f.client_side = (held is not None and held < V.HELD_MIN) or \
        (lag is not None and lag > max(V.LAG_MIN_MS, V.LAG_SHARE_OF_ITL * (itl or 0))) or \
        bool(s("client_nodes_lagging"))
    little, engine_held = s("engine_little_held_fraction"), s("engine_held_fraction")
    delivery, engine_ttft = s("delivery_ttft_ms"), s("engine_ttft_ms_mean")
    # The engine idle: Little's law over its own counter short of C (and the engine's share of the
    # client's count), or the client's first token far behind the engine's.
    f.engine_idle = not f.waiting and (
        (little is not None and little < V.HELD_MIN and (engine_held is None or engine_held < V.HELD_MIN)) or
        (delivery is not None and engine_ttft is not None
         and delivery > (V.DELIVERY_TTFT_FACTOR - 1) * max(engine_ttft, 1.0)))
    running = s("server_running_median")
    f.engine_busy = _ge(engine_held, V.HELD_MIN) or (running is not None and bool(f.C) and running >= V.HELD_MIN * f.C)
    if engine_held is None and running is None and little is None:
        # No server-side count at all (no /metrics): the client kept C in flight on time, so the
        # server had them.
        f.engine_busy = _ge(held, V.HELD_MIN) and not f.client_side
    # The engine's processes hold the client's host (they are measured only when they share it):
    # the host saturated, and most of its busy time the engine's (not another process's).
    engine_cpu, host_cpu = s("engine_cpu_share"), s("host_cpu_busy_share")
    f.host_holds_client = _ge(host_cpu, V.HOST_SATURATED) and engine_cpu is not None and \
        engine_cpu >= V.ENGINE_CPU_BUSY * host_cpu
    return f


def _client_short(f: Facts) -> bool:
    return (f.client_side and f.engine_idle) or _ge(f.client_wait_share, V.CLIENT_WAIT_SHARE)


def _running_at_cap(f: Facts) -> bool:
    """Running held at --max-num-seqs while the client sent more: the gauge's or the log's peak at
    the cap, the client's streams at a plateau of exactly the cap (more than the cap means the
    client's own stamps are late, not a server past its cap), or, by the scheduler's admission
    rule, requests waiting while neither the pool nor the step budget was full (vLLM admits a
    waiting request unless the cap, the budget or the pool stops it)."""
    cap = f.sequence_cap
    if cap is None or not f.C > cap:
        return False
    plateau = f.client_streaming_plateau
    running = _max_of(f.running_peak, f.log_running_peak, plateau if plateau == cap else None)
    if running is not None and running >= cap:
        return True
    budget, tokens = f.step_token_budget, f.iteration_tokens_mean
    return f.waiting > 0 and f.pool_full is False and budget is not None and tokens is not None and \
        tokens < V.BUDGET_FULL_SHARE * budget


def _queue_behind_cap(f: Facts) -> bool:
    """Requests waited with the pool's room: the server's queue, else (no gauge, no log) requests
    the client sent that streamed nothing for at least one request's worth of the window."""
    if _max_of(f.waiting_peak, f.waiting_capacity_peak, f.log_waiting_peak) is not None:
        return _queue_with_room(f)
    return _ge(f.client_awaiting_mean, 1.0) and f.pool_full is not True


def _budget_full(f: Facts) -> bool:
    budget, tokens = f.step_token_budget, f.iteration_tokens_mean
    return budget is not None and tokens is not None and tokens >= V.BUDGET_FULL_SHARE * budget


def _queue_with_room(f: Facts) -> bool:
    return f.waiting > 0 and f.pool_full is not True


def _delivery_slow(f: Facts) -> bool:
    err = f.itl_error_share_p50
    return _ge(f.delivery_tpot_ratio, V.DELIVERY_RATIO_MIN) and not f.client_side and \
        (err is None or err <= V.CLIENT_ERROR_MAX)


def _modelled(f: Facts) -> bool:
    return f.step_roof_share is not None and f.step_compute_share is not None


def _roofs_explain(f: Facts) -> bool:
    return _modelled(f) and f.step_roof_share >= V.ROOF_EXPLAINS_MIN


def _cpu_engine(f: Facts) -> bool:
    """No GPU roof is known or sampled (the CPU engine, or a GPU the spec table lacks)."""
    return f.gpu_util_median_pct is None and not _modelled(f)


def _under_driven(f: Facts) -> bool:
    if f.waiting or f.pool_full or f.engine_busy:
        return False
    util, cpu = f.gpu_util_median_pct, f.engine_cpu_share
    idle = util is not None and util < V.GPU_IDLE_PCT
    cpu_idle = _cpu_engine(f) and cpu is not None and cpu < V.ENGINE_CPU_IDLE
    light = _modelled(f) and f.step_roof_share < V.ROOF_EXPLAINS_MIN
    return idle or cpu_idle or light


def _host_side(f: Facts) -> bool:
    busy = f.engine_busy or (_cpu_engine(f) and _ge(f.host_cpu_busy_share, V.HOST_SATURATED))
    if not busy or f.waiting > V.HOST_QUEUE_SHARE * f.C:
        return False
    if _modelled(f):
        return f.step_roof_share < V.ROOF_EXPLAINS_MIN
    # The CPU engine: its processes hold the host's cores while it holds the load (or the host
    # has no core left for it), with its queue seen (a gauge or the log): an engine whose queue
    # nothing shows may be waiting on its pool.
    queue_seen = _max_of(f.waiting_peak, f.waiting_capacity_peak, f.log_waiting_peak) is not None
    return _cpu_engine(f) and queue_seen and _ge(f.engine_cpu_share, V.ENGINE_CPU_BUSY)


def roof_of(f: Facts) -> str:
    """The limit the step model's roofs name: compute, bandwidth, or the GPU without one roof."""
    share = f.step_compute_share
    if share >= V.ROOF_TERM_SHARE:
        return "gpu_compute"
    if share <= 1 - V.ROOF_TERM_SHARE:
        return "gpu_bandwidth"
    return "gpu"


STEP_CITES = ("step_ms_measured", "step_ms_model", "step_roof_share", "step_compute_share", "step_prefill_share",
              "step_prefill_tokens", "step_decode_tokens", "step_prefill_chunk_tokens",
              "prefill_step_compute_ms_model", "prefill_step_memory_ms_model", "decode_step_compute_ms_model",
              "decode_step_memory_ms_model", "compute_ceiling_tflops", "step_host_ms", "kv_cache_dtype",
              "step_gflop_model", "step_gflop", "step_flops_counter_ratio", "mfu", "mbu", "gpu_util_median_pct",
              "dram_bandwidth_share", "tensor_active_share", "r.peak_bandwidth", "r.rule_roof_explains_min",
              "r.rule_roof_term_share")

# In order: the first rule whose condition holds names the limit.
RULES: tuple[Rule, ...] = (
    Rule("kv_pool", lambda f: "pool_full_and_waiting" if f.kv_usage_peak is not None else "pool_full_and_waiting_log",
         lambda f: bool(f.pool_full) and (f.waiting > 0 or f.preempt > 0),
         ("kv_usage_peak", "log_kv_usage_peak_pct", "pool_tokens_usable", "request_peak_tokens", "kv_expected_peak",
          "waiting_peak", "log_waiting_peak", "preemptions", "kv_cache_dtype")),
    Rule("sequence_cap", lambda f: "running_at_sequence_cap", lambda f: _queue_behind_cap(f) and _running_at_cap(f),
         ("sequence_cap", "running_peak", "log_running_peak", "client_streaming_plateau", "client_awaiting_mean",
          "server_running_median", "waiting_peak", "kv_usage_peak", "iteration_tokens_mean", "step_token_budget",
          "r.rule_plateau_share")),
    Rule("scheduler_budget", lambda f: "step_budget_full", lambda f: _queue_with_room(f) and _budget_full(f),
         ("iteration_tokens_mean", "step_token_budget", "waiting_peak", "kv_usage_peak", "queue_ms_mean",
          "prefill_ms_mean", "r.rule_budget_full_share")),
    Rule("shared_host", lambda f: "client_shares_engine_host", lambda f: not f.open_loop and f.host_holds_client and _client_short(f),
         ("engine_cpu_share", "host_cpu_busy_share", "client_cpu_cores", "client_wait_share", "client_lag_ms_p50",
          "client_held_fraction", "engine_held_fraction", "engine_itl_ms_mean", "r.rule_host_saturated")),
    Rule("client", lambda f: "client_node_starved" if f.client_nodes_lagging else "client_starved",
         lambda f: not f.open_loop and f.client_side and f.engine_idle,
         ("client_held_fraction", "client_lag_ms_p50", "engine_held_fraction", "engine_little_held_fraction",
          "engine_itl_ms_mean", "ttft_ms_mean", "engine_ttft_ms_mean", "client_cpu_cores", "host_cpu_busy_share",
          "waiting_peak")),
    Rule("frontend", lambda f: "delivery_slower_than_engine_scrapes_failing"
         if _ge(f.failed_scrape_share, V.SCRAPE_FAIL_MAX) else "delivery_slower_than_engine", _delivery_slow,
         ("engine_tpot_ms_mean", "client_tpot_ms_mean", "delivery_tpot_ratio", "itl_error_ms_p50", "client_lag_ms_p50",
          "failed_scrape_share", "packet_stamped_read_share", "outside_engine_share")),
    Rule("under_driven", lambda f: "cpu_engine_mostly_idle" if _cpu_engine(f) else "engine_mostly_idle", _under_driven,
         ("waiting_peak", "engine_held_fraction", "engine_cpu_share", "gpu_util_median_pct", "step_roof_share",
          "step_ms_model", "step_ms_measured")),
    Rule("engine_host", lambda f: "step_host_side" if _modelled(f) else
         ("cpu_engine_busy_queued" if f.waiting else "cpu_engine_busy"), _host_side,
         STEP_CITES + ("engine_held_fraction", "server_running_median", "engine_cpu_share", "host_cpu_busy_share",
                       "engine_steps_per_s")),
    Rule("gpu", lambda f: {"gpu_compute": "step_compute", "gpu_bandwidth": "step_bandwidth"}.get(roof_of(f), "step_both_roofs"),
         _roofs_explain, STEP_CITES + ("power_median_w", "power_limit_w", "power_cap_share", "sm_clock_load_mhz",
                                       "r.max_sm_clock_mhz")),
)


# The unknown verdicts whose signals were measured and point different ways (diagnosis.py's
# fallback and its host-side check); every other unknown verdict lacks the signals that would
# name a limit. Page 1 and the diagnosis both say which.
SIGNALS_DISAGREE = frozenset({"no_signal_agrees", "host_counters_disagree"})


def signals_disagree(att) -> bool:
    """Whether an unknown verdict (an Attribution) rests on signals that contradict one another, not on signals missing."""
    return att.bottleneck == "unknown" and att.mechanism in SIGNALS_DISAGREE
