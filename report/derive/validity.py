"""Whether a point measured what it was set to measure: the signals behind its validity.

Each is a pure function named for what it returns. A point is valid when the server held
the set concurrency, the streams did not run in lockstep waves, the window covered several
request lifetimes, the server's /metrics answered, and the client's timing error stayed
small against the ITL. The thresholds are policy, stated once here and printed with every
verdict.
"""

from __future__ import annotations

import numpy as np

from bundle.request_table.table import RequestTable, as_request_table
from report.derive.series import sampler
from report.derive.series import scrapes as S
from report.ledger import Absent
from report.registry import point_quantity, round_quantity

# The server "held" the point when running + waiting averaged at least this share of C.
HELD_MIN = 0.9
# The energy counter's delta over a window against the trapezoid of the power samples: the
# counter is used within this share of the integral. The samples come once a second (NVML's
# power on Ampere and later is itself a one-second mean), so the trapezoid misses at most about
# one interval of each edge's ramp: a few per cent of a 20 s window. Past this share the counter
# is stale, counts something else or was sampled too sparsely to interpolate at the edges.
ENERGY_TOL = 0.1
# Send times within this share of the median request lifetime count as "together".
SYNC_EPS = 0.05
# Lockstep: a request's send is, on average, together with more than this share of the
# other streams' sends (uniform phases give about 2 * SYNC_EPS = 0.1; C streams in two waves
# give (C/2 - 1)/(C - 1), 0.43 at C=8).
SYNC_MAX = 0.3
# Steady state: the window covers at least this many median request lifetimes.
LIFETIMES_MIN = 3.0
# More than this share of the window's /metrics scrapes failed: the server-side numbers of
# the point rest on too few samples.
SCRAPE_FAIL_MAX = 0.2
# The client's timing error counts as distortion above this share of the ITL median.
CLIENT_ERROR_MAX = 0.1
# A window's pace (second half over first half, client and engine) counts as steady inside this.
TREND_STEADY = (0.75, 1.33)
# Relative slack for a ratio computed from floats against its threshold (3.00 lifetimes is 3).
FLOAT_SLACK = 0.01
# Open loop over capacity: the client's in-flight count grew by more than this many requests
# and this share of the window's sends, while the engine finished less than this share of
# the sends or TTFT of the last third exceeded the first third's by this factor.
GROWTH_MIN_REQUESTS = 4
GROWTH_MIN_SHARE = 0.1
FINISH_MIN = 0.9
TTFT_TREND_MAX = 2.0
# An open loop's cap throttled it: more than this share of its requests sent over LATE_SEND_MS
# after their scheduled time, with the requests in flight at the cap for most of the window.
LATE_SEND_MS = 10.0
LATE_SEND_MAX = 0.05
# A Ray worker that sent under this share of the requests planned for it fell behind its schedule.
NODE_SENT_MIN = 0.95
CAP_HELD_MIN = 0.8
# Delivery stretches the engine's decode pace by at least this factor: the API server, the
# network or the client, not the engine, set the pace the client saw.
DELIVERY_RATIO_MIN = 1.2
# A roof names the limit only when its utilisation is this many times the other's.
ROOF_DOMINANCE = 1.2
# The GPU's own counters (GPM, or a DCGM exporter's profiling fields), the second signal beside
# the modelled roofs: a bandwidth limit needs DRAM at least this share of its peak bandwidth (the
# bar MBU is held to); a compute limit needs the tensor pipes active at least this share of the
# time (activity bounds MFU from above, so its bar sits above MFU's). A GPU idling on its host or
# under too little load has both below their bars.
DRAM_BW_HIGH = 0.4
TENSOR_ACTIVE_HIGH = 0.5
# A mechanism explains a measurement when its prediction misses it by at most this share.
PREDICTION_TOL = 0.25
# A gauge at or above this share of the pool reads as full where the pool's size is unknown.
POOL_FULL_SHARE = 0.98
# The gauges' held share is stale when it misses the counters' by at least this much.
GAUGE_STALE_GAP = 0.1
# ... and as having room below this share.
POOL_ROOM_SHARE = 0.9
# The client's own loop lagging (p50) by more than this, and more than this share of the
# engine's ITL, is a client that could not keep up; the client received its first token this
# many times later than the engine produced it.
LAG_MIN_MS = 5.0
LAG_SHARE_OF_ITL = 0.5
DELIVERY_TTFT_FACTOR = 3.0      # client TTFT over the engine's
# Two rounds reproduce when output throughput at their common points differs by at most this.
REPRO_TPUT_TOL = 0.05
# Tail latency moves more between runs than throughput: the TTFT p99 difference at shared
# points within which two rounds still count as reproducing their latency (policy).
REPRO_TTFT_TOL = 0.2
# Throughput that grew less than this between the last two valid points has saturated.
SATURATION_GROWTH = 0.10
# The step model (report/derive/step.py). The roofs explain a step when the modelled step is at
# least this share of the measured one: kernels of a CUDA-graph engine reach 0.5-0.65 of the
# datasheet's roofs on a dense model (the H200 corpus: 0.52-0.62 from C=1 to C=512), while an
# engine that launches every kernel from Python (--enforce-eager) leaves 0.12-0.28: below the
# bar, most of the step is the host's.
ROOF_EXPLAINS_MIN = 0.4
# Which roof: a limit is compute when at least this share of the modelled step time is spent in
# steps whose compute term is the larger, bandwidth when at most 1 - this share is; in between,
# the steps that carry a prompt sit at the compute roof and the decode-only ones at the
# bandwidth roof, and the GPU is named without one roof.
ROOF_TERM_SHARE = 2 / 3
# A second signal confirms a roof's size when vLLM's FLOP counter per step is within this
# factor of the model's FLOPs per step.
COUNTER_AGREES = (0.8, 1.25)
# The step budget binds when the mean step carries at least this share of it.
BUDGET_FULL_SHARE = 0.8
# A step "carries the batch several times over" at this many tokens per running request, and an
# ITL tail is a prefill's step when p99 is at least this many times p50.
STEP_MIX_MIN = 2.0
# A point ran slower than the C=1 point when the clock-scaled prediction is this much longer.
CLOCK_SLOWER = 0.05
# Measured KV peaks equal C requests of whole blocks when they differ by at most this share.
KV_BLOCKS_MATCH = 0.01
# A GPU is held at its power cap when the SW power-cap bit is set in at least this share of samples.
POWER_CAP_BIT_SHARE = 0.5
# A ratio within this much of 1 (a difference within this much of 0) between server sets is "no change".
UNCHANGED = 0.05
# The client's loop lags "a tenth" of the ITL median at most before the page words its lag.
CLIENT_LAG_SHARE_LIMIT = 0.1
# From this share of chunks stamped like the one before them, the page explains the zero gaps
# and prints per-chunk ITL beside per-token ITL.
ZERO_GAP_NOTE_SHARE = 0.1
# vLLM's FLOPs counter "closes" against its own formulas within this relative difference.
FLOPS_CLOSE = 0.01
# The KV account "balances" when measured and expected usage differ by at most this many points.
KV_CLOSE_PP = 1.0
# The client's streams sit at a plateau when the window spends at least this share of its time
# with that many or more streaming at once (a count touched only between two requests is not one).
PLATEAU_SHARE = 0.1
# The engine's processes use at least (busy) or under (idle) this share of the host's cores.
ENGINE_CPU_BUSY, ENGINE_CPU_IDLE = 0.7, 0.3
# A host whose cores are this busy has no CPU to spare for anything that shares it.
HOST_SATURATED = 0.9
# NVML's utilisation (share of time a kernel ran, %): under GPU_IDLE_PCT with nothing waiting the
# load stressed nothing; under GPU_HOST_BOUND_PCT while the engine is busy the GPU waits on its
# host, which confirms a host-side verdict of the step model.
GPU_IDLE_PCT, GPU_HOST_BOUND_PCT = 50.0, 60.0
# A GPU at this share of its power limit is held at its power cap.
POWER_CAP_SHARE = 0.97
# The client's event loop waited runnable for a core at least this share of the window.
CLIENT_WAIT_SHARE = 0.1
# Lockstep waves queue at the server: at least this share of C (and one request) waiting at once.
LOCKSTEP_WAITING_SHARE = 0.25
# The step model names the engine's host side only while at most this share of C waited: a longer
# queue is the scheduler's or the pool's, not the host's.
HOST_QUEUE_SHARE = 0.25
# The read counters confirm the client's timing error when the events they count as read together
# are at least this share of the events stamped wrong.
COREAD_CONFIRMS_SHARE = 0.5
# The slowest share of a distribution a tail percentile leaves out, as that percentile (p99).
TAIL_PERCENTILE = 99.0
# Another tool's count explains a throughput gap when it brings the two within this share of
# each other; its per-event ITL median below this share of ours means its client read events
# together.
PEER_AGREE_SHARE = 0.05
PEER_READ_TOGETHER_SHARE = 0.1
# Below this peak share of the KV pool the requests' blocks are too few for the account of
# PagedAttention to test anything: the KV section is one line instead.
KV_ACCOUNT_MIN_SHARE = 0.01
# A whole number of replicas is counted after this float round-off is taken off their ratio
# (a ratio of exactly 2 computed as 2.0000000001 is two replicas).
ROUNDOFF = 1e-9


@point_quantity(unit="fraction")
def held_concurrency_fraction(steady_scrapes: list, steady_start: float, steady_end: float,
                              concurrency: int) -> float:
    """Mean over the window's scrapes of min(1, (running + waiting) / C): the share of the set concurrency the server held."""
    if not concurrency:
        raise Absent("reason.no_concurrency")
    running = S.gauge_series(steady_scrapes, steady_start, steady_end, "vllm:num_requests_running")
    waiting = dict(S.gauge_series(steady_scrapes, steady_start, steady_end, "vllm:num_requests_waiting"))
    held = [min(1.0, (r + waiting.get(t, 0.0)) / concurrency) for t, r in running]
    return float(np.mean(held))


@point_quantity(unit="fraction")
def send_synchrony(measured: RequestTable, concurrency: int) -> float:
    """Mean share of the other streams whose request was sent within ±5 % of the median request lifetime of each request's send."""
    if not concurrency or concurrency < 2:
        raise Absent("reason.single_stream")
    reqs = as_request_table(measured)
    sends = np.sort(reqs.col("t_send"))
    sends = sends[~np.isnan(sends)]
    ends = reqs.col("t_end")
    life = ends - reqs.col("t_send")
    life = life[~np.isnan(life)]
    if len(sends) < 2 * concurrency or not len(life):
        raise Absent("reason.few_requests_per_stream", n=len(sends), concurrency=concurrency)
    eps = SYNC_EPS * float(np.median(life))
    lo = np.searchsorted(sends, sends - eps)
    hi = np.searchsorted(sends, sends + eps, side="right")
    return float(np.mean(hi - lo - 1)) / (concurrency - 1)


@point_quantity(unit="s")
def random_ramp_s(settings: dict) -> float:
    """The span over which the client started its streams at random times (a closed loop's ramp), s."""
    ramp_s = settings.get("ramp_s")
    if settings.get("ramp") != "random" or not isinstance(ramp_s, (int, float)) or ramp_s <= 0:
        raise Absent("reason.no_random_ramp")
    return float(ramp_s)


@point_quantity(unit="")
def lifetimes_in_window(window_s: float, e2e_ms_p50: float) -> float:
    """How many median request lifetimes the window covers: window ÷ E2E p50."""
    if e2e_ms_p50 <= 0:
        raise Absent("reason.lifetime_zero")
    return window_s * 1e3 / e2e_ms_p50


@point_quantity(unit="fraction")
def failed_scrape_share(point_scrapes: list, t_measure: float, t_end: float) -> float:
    """Failed /metrics scrapes as a share of the scrapes attempted inside the window."""
    tried = sampler.scrape_count(point_scrapes, t_measure, t_end)
    if not tried:
        raise Absent("reason.no_scrape_attempted")
    return sampler.failed_scrape_count(point_scrapes, t_measure, t_end) / tried


@point_quantity(unit="req")
def waiting_capacity_peak(steady_waiting_capacity: list[float]) -> float:
    """Peak of the requests waiting for KV capacity (num_requests_waiting_by_reason) over the steady window."""
    return S.peak_value(steady_waiting_capacity)

# The thresholds above as round quantities without inputs, so pages print them traced
# (each cites this file; the checks read the constants, the pages these values).


@round_quantity(unit="fraction")
def rule_held_min() -> float:
    """Least share of C the server must hold on average (policy)."""
    return HELD_MIN


@round_quantity(unit="fraction")
def rule_sync_max() -> float:
    """Most send synchrony before a point counts as lockstep (policy)."""
    return SYNC_MAX


@round_quantity(unit="")
def rule_lifetimes_min() -> float:
    """Fewest request lifetimes a window must cover (policy)."""
    return LIFETIMES_MIN


@round_quantity(unit="fraction")
def rule_scrape_fail_max() -> float:
    """Largest share of failed /metrics scrapes in a window (policy)."""
    return SCRAPE_FAIL_MAX


@round_quantity(unit="fraction")
def rule_client_error_max() -> float:
    """Largest client timing error as a share of the ITL p50 (policy)."""
    return CLIENT_ERROR_MAX


@round_quantity(unit="fraction")
def rule_repro_tput_tol() -> float:
    """Largest output-throughput difference at shared points for two rounds to reproduce (policy)."""
    return REPRO_TPUT_TOL


@round_quantity(unit="fraction")
def rule_repro_ttft_tol() -> float:
    """Largest TTFT p99 difference at shared points for two rounds to reproduce their latency (policy)."""
    return REPRO_TTFT_TOL


@round_quantity(unit="fraction")
def rule_energy_tol() -> float:
    """Largest relative difference between the energy counter's delta and the power samples' integral over a window for the counter to be used (policy)."""
    return ENERGY_TOL


@round_quantity(unit="fraction")
def rule_prediction_tol() -> float:
    """Largest relative miss of a mechanism's prediction for the report to say the mechanism explains the measurement (policy)."""
    return PREDICTION_TOL


@round_quantity(unit="fraction")
def rule_saturation_growth() -> float:
    """Least throughput growth between the last two points before a sweep counts as saturated (policy)."""
    return SATURATION_GROWTH


@round_quantity(unit="ms")
def rule_late_send_ms() -> float:
    """How late against its schedule an open-loop send counts as held back (policy)."""
    return LATE_SEND_MS


@round_quantity(unit="fraction")
def rule_late_send_max() -> float:
    """Largest share of late open-loop sends before the cap counts as holding the loop back (policy)."""
    return LATE_SEND_MAX


@round_quantity(unit="×")
def rule_delivery_ratio_min() -> float:
    """Least client TPOT over engine TPOT for delivery to be the limit (policy)."""
    return DELIVERY_RATIO_MIN


@round_quantity(unit="×")
def rule_roof_dominance() -> float:
    """How many times one roof's utilisation must exceed the other's to name the limit (policy)."""
    return ROOF_DOMINANCE


@round_quantity(unit="fraction")
def rule_dram_bw_high() -> float:
    """Least measured DRAM bandwidth share (GPM/DCGM) that confirms a bandwidth limit (policy)."""
    return DRAM_BW_HIGH


@round_quantity(unit="fraction")
def rule_tensor_active_high() -> float:
    """Least measured tensor-pipe activity (GPM/DCGM) that confirms a compute limit (policy)."""
    return TENSOR_ACTIVE_HIGH


@round_quantity(unit="ms")
def rule_lag_min_ms() -> float:
    """Client event-loop lag (p50) above which the client may not keep up (policy)."""
    return LAG_MIN_MS


@round_quantity(unit="fraction")
def rule_lag_share_of_itl() -> float:
    """Share of the ITL it is read against above which the client's event-loop lag counts against the client (policy)."""
    return LAG_SHARE_OF_ITL


@round_quantity(unit="×")
def rule_trend_steady_low() -> float:
    """Lowest second-half over first-half pace of a steady window (policy)."""
    return TREND_STEADY[0]


@round_quantity(unit="×")
def rule_trend_steady_high() -> float:
    """Highest second-half over first-half pace of a steady window (policy)."""
    return TREND_STEADY[1]


# How many of the round's points were measured to the end (`measured_points`) and how many
# of those passed every check (`valid_point_ids`, known once each point is judged).
@round_quantity(unit="")
def points(measured_points: list[str]) -> int:
    """Points measured to the end"""
    return len(measured_points)


@round_quantity(unit="", over_points=True)
def valid_points(valid_point_ids: list[str]) -> int:
    """Points measured to the end that passed every validity check"""
    return len(valid_point_ids)


@round_quantity(unit="fraction")
def rule_roof_explains_min() -> float:
    """The share of the measured step the roofs must explain for the GPU to be named the limit."""
    return ROOF_EXPLAINS_MIN


@round_quantity(unit="fraction")
def rule_roof_term_share() -> float:
    """The share of the modelled step time at one roof for that roof to be named."""
    return ROOF_TERM_SHARE


@round_quantity(unit="fraction")
def rule_budget_full_share() -> float:
    """The share of the step budget the mean step carries for the budget to bind."""
    return BUDGET_FULL_SHARE


@round_quantity(unit="fraction")
def rule_plateau_share() -> float:
    """The share of the window the client's streams must hold a count for it to be their plateau."""
    return PLATEAU_SHARE


@round_quantity(unit="fraction")
def rule_host_saturated() -> float:
    """The share of the host's CPU time busy at which the host has no core to spare."""
    return HOST_SATURATED


@round_quantity(unit="×")
def rule_step_mix_min() -> float:
    """The tokens per running request a step carries, and the ITL p99 over p50, from which a step carries the batch several times over."""
    return STEP_MIX_MIN


@round_quantity(unit="fraction")
def rule_clock_slower() -> float:
    """How much longer the clock-scaled prediction must be for a point to have run slower than C=1."""
    return CLOCK_SLOWER


@round_quantity(unit="fraction")
def rule_kv_blocks_match() -> float:
    """The largest relative difference between a measured KV peak and C requests of whole blocks for the two to be equal."""
    return KV_BLOCKS_MATCH


@round_quantity(unit="fraction")
def rule_power_cap_bit_share() -> float:
    """The share of samples with the SW power-cap bit set for a GPU to be held at its power cap."""
    return POWER_CAP_BIT_SHARE


@round_quantity(unit="fraction")
def rule_unchanged() -> float:
    """The distance from 1 (a ratio) or 0 (a difference) within which two server sets show no change."""
    return UNCHANGED


@round_quantity(unit="fraction")
def rule_client_lag_share_limit() -> float:
    """The share of the ITL median the client's loop may lag before the page words its lag."""
    return CLIENT_LAG_SHARE_LIMIT


@round_quantity(unit="fraction")
def rule_zero_gap_note_share() -> float:
    """The share of chunks stamped like the one before them from which the page explains the zero gaps."""
    return ZERO_GAP_NOTE_SHARE


@round_quantity(unit="fraction")
def rule_flops_close() -> float:
    """The relative difference within which vLLM's FLOP counter closes against its own formulas."""
    return FLOPS_CLOSE


@round_quantity(unit="pp")
def rule_kv_close_pp() -> float:
    """The percentage points within which measured and expected KV usage balance."""
    return KV_CLOSE_PP


@round_quantity(unit="fraction")
def rule_node_sent_min() -> float:
    """The share of its planned requests a Ray client worker must send for its node to have kept the schedule."""
    return NODE_SENT_MIN


@round_quantity(unit="fraction")
def rule_gauge_stale_gap() -> float:
    """The difference between the gauges' held share and the counters' from which the gauges count as stale (policy)."""
    return GAUGE_STALE_GAP


@round_quantity(unit="fraction")
def rule_float_slack() -> float:
    """The relative slack a ratio computed from floats has against its threshold (policy)."""
    return FLOAT_SLACK


@round_quantity(unit="req")
def rule_growth_min_requests() -> float:
    """Fewest requests an open loop's in-flight count must grow by over the window to count as over capacity (policy)."""
    return GROWTH_MIN_REQUESTS


@round_quantity(unit="fraction")
def rule_growth_min_share() -> float:
    """Least share of the window's sends an open loop's in-flight count must grow by to count as over capacity (policy)."""
    return GROWTH_MIN_SHARE


@round_quantity(unit="fraction")
def rule_finish_min() -> float:
    """Least share of an open loop's sends the engine must finish for it to keep up (policy)."""
    return FINISH_MIN


@round_quantity(unit="×")
def rule_ttft_trend_max() -> float:
    """Largest TTFT of the last third of an open loop's sends over the first third's for the engine to keep up (policy)."""
    return TTFT_TREND_MAX


@round_quantity(unit="fraction")
def rule_cap_held_min() -> float:
    """Least share of the window an open loop's requests in flight sit at its cap for the cap to hold it back (policy)."""
    return CAP_HELD_MIN


@round_quantity(unit="fraction")
def rule_lockstep_waiting_share() -> float:
    """Least share of C waiting at once (and at least one request) for send waves to count as lockstep (policy)."""
    return LOCKSTEP_WAITING_SHARE


@round_quantity(unit="fraction")
def rule_host_queue_share() -> float:
    """Largest share of C waiting at once for the step model to name the engine's host side (policy)."""
    return HOST_QUEUE_SHARE


@round_quantity(unit="fraction")
def rule_coread_confirms_share() -> float:
    """Least share of the mistimed events the read counters must count as read together to confirm the client's timing error (policy)."""
    return COREAD_CONFIRMS_SHARE


@round_quantity(unit="")
def rule_tail_percentile() -> float:
    """The percentile the ITL tail is read at (policy)."""
    return TAIL_PERCENTILE


@round_quantity(unit="fraction")
def rule_peer_agree_share() -> float:
    """The share within which another tool's throughput and ours, counted the same way, agree (policy)."""
    return PEER_AGREE_SHARE


@round_quantity(unit="fraction")
def rule_peer_read_together_share() -> float:
    """The share of our per-event ITL median below which another tool's says its client read events together (policy)."""
    return PEER_READ_TOGETHER_SHARE


@round_quantity(unit="fraction")
def rule_kv_account_min_share() -> float:
    """The least peak share of the KV pool at which the KV account is given (policy)."""
    return KV_ACCOUNT_MIN_SHARE


@round_quantity(unit="fraction")
def rule_sync_eps() -> float:
    """The share of the median request lifetime within which two sends count as together (policy)."""
    return SYNC_EPS


@round_quantity(unit="fraction")
def rule_pool_full_share() -> float:
    """The KV usage at or above which the pool reads as full where its size is unknown (policy)."""
    return POOL_FULL_SHARE


@round_quantity(unit="fraction")
def rule_pool_room_share() -> float:
    """The KV usage below which the pool reads as having room (policy)."""
    return POOL_ROOM_SHARE


@round_quantity(unit="×")
def rule_delivery_ttft_factor() -> float:
    """How many times later than the engine's the client's first token must come for the engine to count as idle (policy)."""
    return DELIVERY_TTFT_FACTOR


@round_quantity(unit="×")
def rule_counter_agrees_low() -> float:
    """The lowest ratio of vLLM's FLOP counter per step to the model's that confirms a roof's size (policy)."""
    return COUNTER_AGREES[0]


@round_quantity(unit="×")
def rule_counter_agrees_high() -> float:
    """The highest ratio of vLLM's FLOP counter per step to the model's that confirms a roof's size (policy)."""
    return COUNTER_AGREES[1]


@round_quantity(unit="fraction")
def rule_engine_cpu_busy() -> float:
    """The share of the host's CPU the engine's processes use at or above which they are busy (policy)."""
    return ENGINE_CPU_BUSY


@round_quantity(unit="fraction")
def rule_engine_cpu_idle() -> float:
    """The share of the host's CPU the engine's processes use below which they are idle (policy)."""
    return ENGINE_CPU_IDLE


@round_quantity(unit="%")
def rule_gpu_idle_pct() -> float:
    """NVML utilisation under which, with nothing waiting, the load stressed nothing (policy)."""
    return GPU_IDLE_PCT


@round_quantity(unit="%")
def rule_gpu_host_bound_pct() -> float:
    """NVML utilisation under which, while the engine is busy, the GPU waits on its host (policy)."""
    return GPU_HOST_BOUND_PCT


@round_quantity(unit="fraction")
def rule_power_cap_share() -> float:
    """The share of its power limit at which a GPU is held at its power cap (policy)."""
    return POWER_CAP_SHARE


@round_quantity(unit="fraction")
def rule_client_wait_share() -> float:
    """The share of the window the client's event loop waited for a core from which the client is short (policy)."""
    return CLIENT_WAIT_SHARE
