"""The report's conclusions: each a mechanism stated with its evidence, in both languages.

A finding's text holds its numbers as `[[ledger.key]]` or `[[ledger.key|pct]]`; the page
prints each through the ledger (traced), the JSON through the same formatter. A finding is
made only from valid points, and only when every key it cites is present.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from report.judge.diagnosis import Attribution, Validity, val
from report.ledger import Ledger
from report.words import PLACEHOLDER

# A step "carries the batch several times over" at this many tokens per running request.
STEP_MIX_MIN = 2.0

REASON_WORDS = {
    "not_held": ("the client kept only [[p.{p}.client_held_fraction|pct]] of the set concurrency in flight, and the engine no more (at least [[r.rule_held_min|pct]] needed)",
                 "客户端只维持了设定并发的 [[p.{p}.client_held_fraction|pct]] 在途，引擎那边也不多（至少需要 [[r.rule_held_min|pct]]）"),
    "pace_drift": ("the pace drifted through the window: its second half ran at [[p.{p}.throughput_trend]] of the first by the client's chunks and [[p.{p}.engine_throughput_trend]] by the engine's generation counter (steady: [[r.rule_trend_steady_low]]–[[r.rule_trend_steady_high]])",
                   "窗口内节奏漂移：按客户端 chunk 计，后半段是前半段的 [[p.{p}.throughput_trend]]，按引擎生成计数器计为 [[p.{p}.engine_throughput_trend]]（稳态范围 [[r.rule_trend_steady_low]]–[[r.rule_trend_steady_high]]）"),
    "lockstep": ("the streams ran in lockstep waves (each send was together with [[p.{p}.send_synchrony|pct]] of the other streams', and up to [[p.{p}.waiting_peak|int]] requests queued at once)",
                 "各路请求成波次同步运行（每次发送平均与 [[p.{p}.send_synchrony|pct]] 的其他流同时，最多 [[p.{p}.waiting_peak|int]] 个请求同时排队）"),
    "not_steady": ("the window covered only [[p.{p}.lifetimes_in_window]] request lifetimes ([[r.rule_lifetimes_min|int]] needed)",
                   "窗口只覆盖了 [[p.{p}.lifetimes_in_window]] 个请求生命周期（至少需要 [[r.rule_lifetimes_min|int]] 个）"),
    "scrapes_failed": ("[[p.{p}.failed_scrape_share|pct]] of its /metrics scrapes failed",
                       "窗口内 [[p.{p}.failed_scrape_share|pct]] 的 /metrics 抓取失败"),
    "client_distorted": ("[[p.{p}.mistimed_share|pct]] of its events shared a read with a later one while bytes waited in the socket, which puts ITL p50 off by up to [[p.{p}.itl_error_ms_p50]] and p99 by up to [[p.{p}.itl_error_ms_p99]], and a second signal agrees (the engine's own ITL histogram, or the read counters where it cannot resolve the percentile)",
                         "[[p.{p}.mistimed_share|pct]] 的事件与后一个事件同次读取、且字节在套接字中等待过，使 ITL p50 最多偏差 [[p.{p}.itl_error_ms_p50]]、p99 最多偏差 [[p.{p}.itl_error_ms_p99]]，且第二个信号印证了这一点（引擎自身的 ITL 直方图；直方图分辨不出该百分位时用读计数器）"),
    "over_saturated": ("arrivals outran the server: the client's requests in flight grew by [[p.{p}.inflight_growth]] of sending, and the server finished [[p.{p}.finish_over_send|pct]] of what was sent while TTFT went [[p.{p}.ttft_trend]] from the first third of the sends to the last, so no steady state exists to measure",
                       "到达速率超过了服务能力：发送期间客户端在途请求每秒增加 [[p.{p}.inflight_growth]]，服务端完成了发送量的 [[p.{p}.finish_over_send|pct]]，TTFT 从前三分之一的发送到后三分之一变为 [[p.{p}.ttft_trend]]，不存在可测的稳态"),
    "open_loop_capped": ("its concurrency cap of [[p.{p}.concurrency|int]] held the open loop back: [[p.{p}.late_send_share|pct]] of the requests were sent over [[r.rule_late_send_ms]] after their scheduled time (the slot wait p99 was [[p.{p}.slot_wait_ms_p99]]) with the requests in flight at [[p.{p}.cap_held_fraction|pct]] of the cap, so the offered rate was not the rate sent",
                         "并发上限 [[p.{p}.concurrency|int]] 拖住了开环：[[p.{p}.late_send_share|pct]] 的请求比计划时刻晚 [[r.rule_late_send_ms]] 以上才发出（等待槽位的 p99 为 [[p.{p}.slot_wait_ms_p99]]），在途请求达到上限的 [[p.{p}.cap_held_fraction|pct]]，实际发送速率并非设定的到达速率"),
    "schedule_missed": ("the client missed the open loop's schedule: [[p.{p}.late_send_share|pct]] of the requests were sent over [[r.rule_late_send_ms]] after their scheduled time with no cap holding them (TTFT p99 from the schedule [[p.{p}.ttft_sched_ms_p99]] against [[p.{p}.ttft_ms_p99]] from the send), so the offered rate was not the rate sent",
                        "客户端没有跟上开环的发送计划：[[p.{p}.late_send_share|pct]] 的请求比计划时刻晚 [[r.rule_late_send_ms]] 以上才发出，且并非并发上限所致（从计划时刻算的 TTFT p99 为 [[p.{p}.ttft_sched_ms_p99]]，从发送算为 [[p.{p}.ttft_ms_p99]]），实际发送速率并非设定的到达速率"),
    "interrupted": ("the point was interrupted", "该点被中断"),
    "failed": ("the point failed", "该点失败"),
}

MECHANISMS = {
    "bandwidth_bound": (
        "At {p} the engine was bound by memory bandwidth: vLLM's byte counter read [[p.{p}.mbu|pct]] of the peak bandwidth while its FLOP counter reached [[p.{p}.mfu|pct]] of the dense peak, at [[p.{p}.intensity]] — below the ridge of [[r.ridge]]. Each decode step rereads the weights for a batch too small to reuse them. NVML's utilisation read [[p.{p}.gpu_util_median_pct]], which says only that a kernel was running, not how much of the GPU it used.",
        "{p} 点受显存带宽限制：vLLM 的读字节计数达到峰值带宽的 [[p.{p}.mbu|pct]]，而 FLOP 计数只有稠密峰值的 [[p.{p}.mfu|pct]]；算术强度 [[p.{p}.intensity]]，低于屋脊 [[r.ridge]]。每个 decode 步都要重读一遍权重，而批太小，摊不薄这次读取。NVML 利用率中位数为 [[p.{p}.gpu_util_median_pct]]，它只说明有内核在运行，不说明用了 GPU 的多少。"),
    "compute_bound": (
        "At {p} the engine was bound by compute: vLLM's FLOP counter reached [[p.{p}.mfu|pct]] of the dense peak against [[p.{p}.mbu|pct]] of the bandwidth roof, at a median [[p.{p}.power_median_w]] of its [[p.{p}.power_limit_w]] limit.",
        "{p} 点受算力限制：vLLM 的 FLOP 计数达到稠密峰值的 [[p.{p}.mfu|pct]]，带宽只用到 [[p.{p}.mbu|pct]]；功耗中位数 [[p.{p}.power_median_w]]（上限 [[p.{p}.power_limit_w]]）。"),
    "delivery_slower_than_engine": (
        "At {p} delivery, not the engine, set the pace: the engine core produced each request's tokens every [[p.{p}.engine_tpot_ms_mean]] (vLLM's per-request TPOT), but the client received them every [[p.{p}.client_tpot_ms_mean]] ([[p.{p}.delivery_tpot_ratio]]). The client kept up (its loop [[p.{p}.client_lag_ms_p50]] late at the median) and its measured timing error left ITL p50 uncertain by at most [[p.{p}.itl_error_ms_p50]], so the delay arose upstream of it: in the API server, which detokenises and streams every request from one process.",
        "{p} 点的节奏由下发环节而非引擎决定：引擎核心每 [[p.{p}.engine_tpot_ms_mean]] 产出一个 token（vLLM 的逐请求 TPOT），客户端却每 [[p.{p}.client_tpot_ms_mean]] 才收到一个（[[p.{p}.delivery_tpot_ratio]]）。客户端跟得上（事件循环延迟中位数 [[p.{p}.client_lag_ms_p50]]），实测计时误差使 ITL p50 的不确定度至多 [[p.{p}.itl_error_ms_p50]]，所以延迟发生在它的上游：API 服务进程在一个进程里为所有请求做反分词和流式下发。"),
    "pool_full_and_waiting": (
        "At {p} the KV pool limited the engine: at its peak it was [[p.{p}.kv_usage_peak|pct]] full, leaving fewer free tokens than one more request holds ([[p.{p}.request_peak_tokens]]), while up to [[p.{p}.waiting_peak|int]] requests waited and the server preempted [[p.{p}.preemptions]].",
        "{p} 点受 KV 池限制：峰值时池已用 [[p.{p}.kv_usage_peak|pct]]，剩余容量不足再容纳一个请求（[[p.{p}.request_peak_tokens]]），同时最多 [[p.{p}.waiting_peak|int]] 个请求在等待，服务端抢占 [[p.{p}.preemptions|int]] 次。"),
    "queue_with_free_kv": (
        "At {p} requests queued with memory to spare: up to [[p.{p}.waiting_peak|int]] waited and the mean queue time ([[p.{p}.queue_ms_mean]]) exceeded prefill ([[p.{p}.prefill_ms_mean]]) while the KV pool peaked at only [[p.{p}.kv_usage_peak|pct]]. The scheduler's per-step token budget, not memory, admitted them: a step carried [[p.{p}.iteration_tokens_mean]] on average.",
        "{p} 点在显存充裕时仍有排队：最多 [[p.{p}.waiting_peak|int]] 个请求等待，平均排队 [[p.{p}.queue_ms_mean]] 超过 prefill 的 [[p.{p}.prefill_ms_mean]]，而 KV 池峰值只用了 [[p.{p}.kv_usage_peak|pct]]。限制准入的是调度器每步的 token 预算而不是显存：每步平均 [[p.{p}.iteration_tokens_mean]]。"),
    "queue_with_free_kv_and_delivery": (
        "At {p} requests queued with memory to spare: up to [[p.{p}.waiting_peak|int]] waited and the mean queue time ([[p.{p}.queue_ms_mean]]) exceeded prefill ([[p.{p}.prefill_ms_mean]]) while the KV pool peaked at only [[p.{p}.kv_usage_peak|pct]]. The scheduler's per-step token budget, not memory, admitted them: a step carried [[p.{p}.iteration_tokens_mean]] on average, and the queue was [[p.{p}.queue_share|pct]] of the client's mean TTFT. Delivery lagged too, the smaller part: the client received tokens every [[p.{p}.client_tpot_ms_mean]] against the engine core's [[p.{p}.engine_tpot_ms_mean]] ([[p.{p}.delivery_tpot_ratio]]).",
        "{p} 点在显存充裕时仍有排队：最多 [[p.{p}.waiting_peak|int]] 个请求等待，平均排队 [[p.{p}.queue_ms_mean]] 超过 prefill 的 [[p.{p}.prefill_ms_mean]]，而 KV 池峰值只用了 [[p.{p}.kv_usage_peak|pct]]。限制准入的是调度器每步的 token 预算而不是显存：每步平均 [[p.{p}.iteration_tokens_mean]]，排队占客户端平均 TTFT 的 [[p.{p}.queue_share|pct]]。下发环节也有滞后，但占比较小：客户端每 [[p.{p}.client_tpot_ms_mean]] 收到一个 token，引擎核心为 [[p.{p}.engine_tpot_ms_mean]]（[[p.{p}.delivery_tpot_ratio]]）。"),
    "client_starved": (
        "At {p} the client was the limit: its own event loop ran [[p.{p}.client_lag_ms_p50]] late at the median and by its own count it had [[p.{p}.client_held_fraction|pct]] of C=[[p.{p}.concurrency|int]] in flight, while the engine held only [[p.{p}.engine_held_fraction|pct]] of C with nothing waiting: the rest of each request's life went by in the client (late sends, late reads). The client saw a mean TTFT of [[p.{p}.ttft_ms_mean]] against the engine's [[p.{p}.engine_ttft_ms_mean]]; the engine could have served more.",
        "{p} 点的瓶颈是客户端：其自身事件循环延迟中位数为 [[p.{p}.client_lag_ms_p50]]，按它自己的统计有 C=[[p.{p}.concurrency|int]] 的 [[p.{p}.client_held_fraction|pct]] 在途，而引擎只持有 C 的 [[p.{p}.engine_held_fraction|pct]]、没有排队：每个请求其余的时间耗在客户端（发送晚、读取晚）。客户端的平均 TTFT 为 [[p.{p}.ttft_ms_mean]]，引擎自报 [[p.{p}.engine_ttft_ms_mean]]；引擎本可以服务更多请求。"),
    "pool_full_and_waiting_log": (
        "At {p} the KV pool limited the engine: the server log's stats lines put it at [[p.{p}.log_kv_usage_peak_pct]] full, with up to [[p.{p}.log_waiting_peak|int]] requests waiting; C=[[p.{p}.concurrency|int]] requests of [[p.{p}.request_peak_tokens]] each would need [[p.{p}.kv_expected_peak|pct]] of the pool.",
        "{p} 点受 KV 池限制：服务端日志的统计行显示池已用 [[p.{p}.log_kv_usage_peak_pct]]，最多 [[p.{p}.log_waiting_peak|int]] 个请求等待；C=[[p.{p}.concurrency|int]] 个各需 [[p.{p}.request_peak_tokens]] 的请求需要池容量的 [[p.{p}.kv_expected_peak|pct]]。"),
    "gpu_waits_on_host": (
        "At {p} the engine's host side was the limit: the engine held [[p.{p}.engine_held_fraction|pct]] of C with nothing waiting, yet NVML saw a kernel running only [[p.{p}.gpu_util_median_pct]] of the time and the steps reached [[p.{p}.mfu|pct]] of the compute roof and [[p.{p}.mbu|pct]] of the bandwidth roof ([[p.{p}.engine_steps_per_s]], [[p.{p}.engine_itl_ms_mean]] per token): between kernels the GPU waited on the host (kernel launches without CUDA graphs, the Python scheduler).",
        "{p} 点的瓶颈在引擎的主机侧：引擎持有 C 的 [[p.{p}.engine_held_fraction|pct]]、没有排队，但 NVML 只在 [[p.{p}.gpu_util_median_pct]] 的时间看到内核在运行，每步只达到算力屋顶的 [[p.{p}.mfu|pct]]、带宽屋顶的 [[p.{p}.mbu|pct]]（[[p.{p}.engine_steps_per_s]]，每 token [[p.{p}.engine_itl_ms_mean]]）：内核之间 GPU 在等主机（没有 CUDA graph 的内核启动、Python 调度器）。"),
    "cpu_engine_busy": (
        "At {p} the CPU engine was the limit: its processes used [[p.{p}.engine_cpu_share|pct]] of the host's cores (the host was [[p.{p}.host_cpu_busy_share|pct]] busy) with nothing waiting, at [[p.{p}.engine_steps_per_s]] and [[p.{p}.engine_itl_ms_mean]] per token; a faster host, not more load, would raise its throughput.",
        "{p} 点的瓶颈是 CPU 引擎本身：其进程占用了主机 [[p.{p}.engine_cpu_share|pct]] 的 CPU（主机整体忙碌 [[p.{p}.host_cpu_busy_share|pct]]），没有排队，[[p.{p}.engine_steps_per_s]]，每 token [[p.{p}.engine_itl_ms_mean]]；要提高吞吐需要更快的主机，而不是更多负载。"),
    "cpu_engine_mostly_idle": (
        "At {p} the load stressed nothing: no request waited and the CPU engine's processes used only [[p.{p}.engine_cpu_share|pct]] of the host's cores; a higher concurrency would find the limit.",
        "{p} 点的负载没有触及任何瓶颈：无请求排队，CPU 引擎的进程只占用了主机 [[p.{p}.engine_cpu_share|pct]] 的 CPU；需要更高并发才能找到上限。"),
    "gpu_waits_on_host_queued": (
        "At {p} the engine's host side was the limit: the engine held [[p.{p}.engine_held_fraction|pct]] of C with at most [[p.{p}.waiting_peak|int]] waiting, yet NVML saw a kernel running only [[p.{p}.gpu_util_median_pct]] of the time and the steps reached [[p.{p}.mfu|pct]] of the compute roof and [[p.{p}.mbu|pct]] of the bandwidth roof ([[p.{p}.engine_steps_per_s]], [[p.{p}.engine_itl_ms_mean]] per token): between kernels the GPU waited on the host (kernel launches without CUDA graphs, the Python scheduler).",
        "{p} 点的瓶颈在引擎的主机侧：引擎持有 C 的 [[p.{p}.engine_held_fraction|pct]]、最多 [[p.{p}.waiting_peak|int]] 个请求等待，但 NVML 只在 [[p.{p}.gpu_util_median_pct]] 的时间看到内核在运行，每步只达到算力屋顶的 [[p.{p}.mfu|pct]]、带宽屋顶的 [[p.{p}.mbu|pct]]（[[p.{p}.engine_steps_per_s]]，每 token [[p.{p}.engine_itl_ms_mean]]）：内核之间 GPU 在等主机（没有 CUDA graph 的内核启动、Python 调度器）。"),
    "cpu_engine_busy_queued": (
        "At {p} the CPU engine was the limit: its processes used [[p.{p}.engine_cpu_share|pct]] of the host's cores (the host was [[p.{p}.host_cpu_busy_share|pct]] busy) with at most [[p.{p}.waiting_peak|int]] requests waiting, at [[p.{p}.engine_steps_per_s]] and [[p.{p}.engine_itl_ms_mean]] per token; a faster host, not more load, would raise its throughput.",
        "{p} 点的瓶颈是 CPU 引擎本身：其进程占用了主机 [[p.{p}.engine_cpu_share|pct]] 的 CPU（主机整体忙碌 [[p.{p}.host_cpu_busy_share|pct]]），最多 [[p.{p}.waiting_peak|int]] 个请求等待，[[p.{p}.engine_steps_per_s]]，每 token [[p.{p}.engine_itl_ms_mean]]；要提高吞吐需要更快的主机，而不是更多负载。"),
    "compute_bound_power_capped": (
        "At {p} the engine was bound by compute at the power cap: vLLM's FLOP counter reached [[p.{p}.mfu|pct]] of the dense peak against [[p.{p}.mbu|pct]] of the bandwidth roof, at a median [[p.{p}.power_median_w]] of the [[p.{p}.power_limit_w]] limit (the SW power cap held the clocks in [[p.{p}.power_cap_share|pct]] of the samples), the SM clock at [[p.{p}.sm_clock_load_mhz]] against its [[r.max_sm_clock_mhz]] maximum: the compute ceiling is the power-capped clock's, [[p.{p}.peak_tflops_at_clock]] rather than the datasheet's [[r.peak_tflops]], and the counter reached [[p.{p}.mfu_at_clock|pct]] of it.",
        "{p} 点在功耗上限处受算力限制：vLLM 的 FLOP 计数达到稠密峰值的 [[p.{p}.mfu|pct]]，带宽只用到 [[p.{p}.mbu|pct]]；功耗中位数 [[p.{p}.power_median_w]]，上限 [[p.{p}.power_limit_w]]（[[p.{p}.power_cap_share|pct]] 的采样中软件功耗上限压住了频率），SM 频率 [[p.{p}.sm_clock_load_mhz]]，最高 [[r.max_sm_clock_mhz]]：算力上限是功耗封顶后频率下的 [[p.{p}.peak_tflops_at_clock]]，而不是规格书上的 [[r.peak_tflops]]，FLOP 计数达到了它的 [[p.{p}.mfu_at_clock|pct]]。"),
    "roofs_balanced": (
        "At {p} neither roof names the limit: the FLOP counter reached [[p.{p}.mfu|pct]] of the compute peak and the byte counter [[p.{p}.mbu|pct]] of the bandwidth peak, within [[r.rule_roof_dominance]] of each other — prefill's compute and decode's weight reads each take a similar share of the time, so the time-averaged intensity ([[p.{p}.intensity]] against the ridge of [[r.ridge]]) describes neither phase.",
        "{p} 点两个屋顶都不能单独说明瓶颈：FLOP 计数达到算力峰值的 [[p.{p}.mfu|pct]]，字节计数达到带宽峰值的 [[p.{p}.mbu|pct]]，两者相差不到 [[r.rule_roof_dominance]] 倍——prefill 的计算与 decode 的权重读取各占相近的时间，时间平均的算术强度（[[p.{p}.intensity]]，屋脊 [[r.ridge]]）不能代表任何一个阶段。"),
    "engine_mostly_idle": (
        "At {p} the load stressed nothing: no request waited and the engine held only [[p.{p}.engine_held_fraction|pct]] of C, the GPU was busy [[p.{p}.gpu_util_median_pct]] of the time, MFU [[p.{p}.mfu|pct]] and MBU [[p.{p}.mbu|pct]]; a higher concurrency would find the limit.",
        "{p} 点的负载没有触及任何瓶颈：无请求排队，引擎只持有 C 的 [[p.{p}.engine_held_fraction|pct]]，GPU 忙碌时间中位数 [[p.{p}.gpu_util_median_pct]]，MFU [[p.{p}.mfu|pct]]，MBU [[p.{p}.mbu|pct]]；需要更高并发才能找到上限。"),
    "no_signal_agrees": (
        "At {p} no limit is named: the signals do not agree on one (MFU [[p.{p}.mfu|pct]], MBU [[p.{p}.mbu|pct]], GPU busy [[p.{p}.gpu_util_median_pct]], up to [[p.{p}.waiting_peak|int]] waiting).",
        "{p} 点无法判定瓶颈：各项信号不一致（MFU [[p.{p}.mfu|pct]]，MBU [[p.{p}.mbu|pct]]，GPU 忙碌 [[p.{p}.gpu_util_median_pct]]，最多 [[p.{p}.waiting_peak|int]] 个请求等待）。"),
    "no_gpu_signals": (
        "At {p} no limit is named: without GPU telemetry or FLOP counters against a known peak, and with no full pool, queue or delivery gap, the data do not single one out.",
        "{p} 点无法判定瓶颈：没有 GPU 遥测，也没有相对已知峰值的 FLOP 计数，KV 池未满、没有排队、也没有下发延迟，数据不足以指认某一项。"),
}


@dataclass
class Finding:
    """One conclusion: its kind, its sentence in each language, the ledger keys it rests on."""

    id: str
    kind: str
    en: str
    zh: str
    evidence: list[str] = field(default_factory=list)

    def keys(self) -> list[str]:
        """The ledger keys its sentences print."""
        return list(dict.fromkeys(m.group(1) for m in PLACEHOLDER.finditer(self.en + self.zh)))


def _make(led: Ledger, fid: str, kind: str, en: str, zh: str, evidence: list[str],
          **fill: Any) -> Finding | None:
    """A finding whose cited keys are all present, or None."""
    f = Finding(fid, kind, en.format(**fill), zh.format(**fill), evidence)
    keys = f.keys()
    if not all(k in led and led[k].present for k in keys):
        return None
    f.evidence = list(dict.fromkeys(evidence + keys))
    return f


def invalid_points_finding(led: Ledger, validity: dict[str, Validity]) -> Finding | None:
    """Which points are left out of fits and verdicts, and why."""
    bad = [v for v in validity.values() if not v.valid]
    if not bad:
        return None
    en, zh = [], []
    for v in bad:
        en.append(f"{v.point}: " + "; ".join(REASON_WORDS[r][0].format(p=v.point) for r in v.reasons))
        zh.append(f"{v.point}：" + "；".join(REASON_WORDS[r][1].format(p=v.point) for r in v.reasons))
    return Finding("invalid_points", "validity",
                   "These points are drawn apart and left out of fits and verdicts — " + ". ".join(en) + ".",
                   "以下测量点单独标出，不参与拟合与结论。" + "。".join(zh) + "。",
                   [f"p.{v.point}.{k}" for v in bad for k in ("held_concurrency_fraction", "send_synchrony",
                                                             "lifetimes_in_window", "failed_scrape_share")])


# Signals that disagreed with a check's verdict: what each one says, per language.
DISAGREEMENTS = {
    "gauge_stale": ("at {p} the running/waiting gauges put [[p.{p}.held_concurrency_fraction|pct]] of C in the server while its e2e counter put [[p.{p}.engine_held_fraction|pct]] (the client's [[p.{p}.client_held_fraction|pct]] times the share of each request's life spent in the engine): the gauges read stale values and are not used",
                    "{p} 点 running/waiting 计量值显示服务端只有 C 的 [[p.{p}.held_concurrency_fraction|pct]]，而 e2e 计数器给出 [[p.{p}.engine_held_fraction|pct]]（客户端的 [[p.{p}.client_held_fraction|pct]] 乘以请求生命周期中处于引擎内的比例）：计量值读到的是过时的数，不予采用"),
    "gauge_over_counter": ("at {p} the gauges put [[p.{p}.held_concurrency_fraction|pct]] of C in the server, more than its e2e counter's [[p.{p}.engine_held_fraction|pct]]",
                           "{p} 点计量值显示服务端有 C 的 [[p.{p}.held_concurrency_fraction|pct]]，高于 e2e 计数器的 [[p.{p}.engine_held_fraction|pct]]"),
    "held_outside_engine": ("at {p} the client held [[p.{p}.client_held_fraction|pct]] of C but the engine only [[p.{p}.engine_held_fraction|pct]]: [[p.{p}.outside_engine_share|pct]] of each request's life was spent outside the engine (API server, network, the client's turnaround), so the point counts as held",
                            "{p} 点客户端维持了 C 的 [[p.{p}.client_held_fraction|pct]]，引擎内只有 [[p.{p}.engine_held_fraction|pct]]：每个请求生命周期的 [[p.{p}.outside_engine_share|pct]] 在引擎之外（API 服务、网络、客户端周转），该点仍算维持了并发"),
    "engine_held_client_not": ("at {p} the engine held [[p.{p}.engine_held_fraction|pct]] of C but the client counted only [[p.{p}.client_held_fraction|pct]] in flight: the two disagree and the check is not made",
                               "{p} 点引擎持有 C 的 [[p.{p}.engine_held_fraction|pct]]，客户端却只统计到 [[p.{p}.client_held_fraction|pct]] 在途：两者矛盾，不做该项检查"),
    "pace_drift_one_side": ("at {p} one side saw the pace drift through the window (client [[p.{p}.throughput_trend]], engine [[p.{p}.engine_throughput_trend]], second half over first) and the other did not",
                            "{p} 点只有一方看到窗口内节奏漂移（客户端 [[p.{p}.throughput_trend]]，引擎 [[p.{p}.engine_throughput_trend]]，后半段比前半段）"),
    "queue_grew_engine_kept_up": ("at {p} the client's requests in flight grew by [[p.{p}.inflight_growth]], but the engine finished [[p.{p}.finish_over_send|pct]] of what was sent and TTFT did not rise",
                                  "{p} 点客户端在途请求每秒增加 [[p.{p}.inflight_growth]]，但引擎完成了发送量的 [[p.{p}.finish_over_send|pct]]，TTFT 也没有上升"),
    "client_error_unconfirmed": ("at {p} [[p.{p}.mistimed_share|pct]] of the events may be mistimed (ITL p50 off by up to [[p.{p}.itl_error_ms_p50]]), but without the engine's ITL histogram nothing confirms it: the client check is not made",
                                 "{p} 点 [[p.{p}.mistimed_share|pct]] 的事件可能计时有误（ITL p50 最多偏差 [[p.{p}.itl_error_ms_p50]]），但没有引擎的 ITL 直方图可以印证：不做客户端检查"),
    "client_error_engine_agrees": ("at {p} the client's measured error could reach [[p.{p}.itl_error_share_p50|pct]] of ITL p50, yet its percentiles sit inside the engine's own ITL histogram bucket: the timings stand",
                                   "{p} 点客户端实测误差可达 ITL p50 的 [[p.{p}.itl_error_share_p50|pct]]，但其百分位仍落在引擎自身 ITL 直方图的桶内：计时可信"),
    "client_error_counters_disagree": ("at {p} the stamps say [[p.{p}.mistimed_share|pct]] of the events may be mistimed, but the read counters show only [[p.{p}.coread_share_by_counters|pct]] read together: the timings stand",
                                       "{p} 点时间戳显示 [[p.{p}.mistimed_share|pct]] 的事件可能计时有误，但读计数器显示只有 [[p.{p}.coread_share_by_counters|pct]] 是同次读取的：计时可信"),
    "client_short_engine_unseen": ("at {p} the client kept only [[p.{p}.client_held_fraction|pct]] of C in flight, but with no server-side count to hold it against the concurrency check is not made",
                                   "{p} 点客户端只维持了 C 的 [[p.{p}.client_held_fraction|pct]] 在途，但没有服务端的计数可供对照，不做并发检查"),
    "late_sends_below_cap": ("at {p} [[p.{p}.late_send_share|pct]] of the requests were sent late against their schedule while the requests in flight stayed at [[p.{p}.cap_held_fraction|pct]] of the cap: the client, not the cap, was late (counted as a missed schedule)",
                             "{p} 点 [[p.{p}.late_send_share|pct]] 的请求晚于计划发出，而在途请求只有上限的 [[p.{p}.cap_held_fraction|pct]]：晚的是客户端，而非上限（按未跟上发送计划计）"),
    "client_apart_error_small": ("at {p} the client's ITL p50 lies [[p.{p}.client_outside_engine_itl_p50|pct]] outside the engine's histogram bucket while its own timing error is small: the gap is delivery, not the client's clock",
                                 "{p} 点客户端 ITL p50 落在引擎直方图桶外 [[p.{p}.client_outside_engine_itl_p50|pct]]，而其自身计时误差很小：差距来自下发环节，而非客户端计时"),
}


def disagreement_finding(led: Ledger, validity: dict[str, Validity]) -> Finding | None:
    """Which signals disagreed with a check's verdict, point by point."""
    en, zh, keys = [], [], []
    for v in validity.values():
        for code in dict.fromkeys(v.disagreed):
            e, z = DISAGREEMENTS[code]
            one = _make(led, "x", "validity", e.format(p=v.point), z.format(p=v.point), [])
            if one is not None:
                en.append(one.en)
                zh.append(one.zh)
                keys += one.keys()
    if not en:
        return None
    return Finding("disagreements", "validity", "Signals that disagreed: " + "; ".join(en) + ".",
                   "信号之间的分歧：" + "；".join(zh) + "。", list(dict.fromkeys(keys)))


def bottleneck_finding(led: Ledger, att: Attribution, fid: str = "bottleneck") -> Finding | None:
    """The mechanism sentence of one point's bottleneck."""
    en, zh = MECHANISMS[att.mechanism]
    return _make(led, fid, "bottleneck", en, zh, list(att.evidence), p=att.point)


def step_mix_finding(led: Ledger, pid: str) -> Finding | None:
    """Prefill chunks riding in decode steps, and what they do to ITL p99."""
    ratio = val(led, f"p.{pid}.step_tokens_per_running")
    p50, p99 = val(led, f"p.{pid}.itl_ms_p50"), val(led, f"p.{pid}.itl_ms_p99")
    if ratio is None or ratio < STEP_MIX_MIN or p50 is None or p99 is None or p99 < 2 * p50:
        return None
    k = f"p.{pid}."
    return _make(led, "step_mix", "mechanism",
                 f"At {pid} a step carries [[{k}step_tokens_per_running]] the batch in tokens ([[{k}iteration_tokens_mean]] for [[{k}server_running_median|int]] running requests): the rest are prefill chunks mixed in, which is what puts spikes in ITL p99 ([[{k}itl_ms_p99]] against a p50 of [[{k}itl_ms_p50]]).",
                 f"{pid} 点每个引擎步携带的 token 是批大小的 [[{k}step_tokens_per_running]]（[[{k}server_running_median|int]] 个运行中请求对应 [[{k}iteration_tokens_mean]]）：多出来的是混入的 prefill 分块，这正是 ITL p99 出现尖峰（[[{k}itl_ms_p99]]，p50 为 [[{k}itl_ms_p50]]）的原因。",
                 [])


def population_finding(led: Ledger, pid: str) -> Finding | None:
    """Which requests the server's queue and prefill means describe."""
    k = f"p.{pid}."
    if val(led, k + "population_excludes_warmup") is False:
        return _make(led, "population", "method",
                     f"At {pid} no /metrics scrape fell between the last warm-up request's end and the point's end, so the server's queue and prefill means cover the point's whole window, warm-up requests included; the client's TTFT beside them is taken over the same [[{k}population_requests_client|int]] requests, and the server counted [[{k}population_requests_server|int]] finishes there ([[{k}population_mismatch|pct]] apart).",
                     f"{pid} 点在最后一个预热请求结束到该点结束之间没有 /metrics 抓取，所以服务端的排队与 prefill 均值覆盖该点整个窗口，包括预热请求；与之对照的客户端 TTFT 取自同样的 [[{k}population_requests_client|int]] 个请求，服务端在该窗口记录了 [[{k}population_requests_server|int]] 个完成（相差 [[{k}population_mismatch|pct]]）。",
                     [k + "population_excludes_warmup"])
    return _make(led, "population", "method",
                 f"At {pid} the server's queue and prefill means describe the [[{k}population_requests_client|int]] measured requests that ended after the last warm-up request; the server counted [[{k}population_requests_server|int]] finishes in that window ([[{k}population_mismatch|pct]] apart). The [[{k}warmup_ended_in_point_window|int]] warm-up requests that ended inside the point's window are left out of both sides.",
                 f"{pid} 点服务端的排队与 prefill 均值对应最后一个预热请求结束之后完成的 [[{k}population_requests_client|int]] 个实测请求；服务端在同一窗口内记录了 [[{k}population_requests_server|int]] 个完成（相差 [[{k}population_mismatch|pct]]）。在该点窗口内结束的 [[{k}warmup_ended_in_point_window|int]] 个预热请求两边都不计入。",
                 [])


def block_rounding_finding(led: Ledger, pids: list[str]) -> Finding | None:
    """Measured KV peaks that equal C requests of whole blocks: a line fitted through them
    deviates from slope C by block rounding alone."""
    diffs = [val(led, f"p.{p}.kv_peak_vs_blocks") for p in pids]
    if len(pids) < 2 or any(d is None or abs(d) > 0.01 for d in diffs):
        return None
    first, last = pids[0], pids[-1]
    return _make(led, "kv_block_rounding", "mechanism",
                 f"At every point the measured KV peak equals C requests of whole blocks, C·⌈(L + output)/block⌉·block, within 1 % ([[p.{first}.kv_tokens_peak]] against [[p.{first}.kv_tokens_theory]] at {first}, [[p.{last}.kv_tokens_peak]] against [[p.{last}.kv_tokens_theory]] at {last}): a straight line through these peaks leaves slope C and gains an intercept by block rounding, not by extra memory.",
                 f"每个点的 KV 实测峰值都在 1% 以内等于 C 个请求按整块计的占用 C·⌈（L+输出）/块⌉·块（{first} 点 [[p.{first}.kv_tokens_peak]] 对 [[p.{first}.kv_tokens_theory]]，{last} 点 [[p.{last}.kv_tokens_peak]] 对 [[p.{last}.kv_tokens_theory]]）：对这些峰值做直线拟合时，斜率偏离 C、出现截距，原因是按块取整，而不是额外的显存。",
                 [f"p.{p}.kv_peak_vs_blocks" for p in pids])


def reproducibility_finding(led: Ledger, facts: dict) -> Finding | None:
    """Whether the points shared with the previous round reproduce, throughput and tail latency
    each against its stated tolerance: "reproduced" only when both hold."""
    lo, hi = val(led, "x.repro_tput_min"), val(led, "x.repro_tput_max")
    if lo is None or hi is None:
        return None
    tput_ok = max(abs(lo), abs(hi)) <= val(led, "r.rule_repro_tput_tol")
    tlo, thi = val(led, "x.repro_ttft_p99_min"), val(led, "x.repro_ttft_p99_max")
    ttft_ok = None if tlo is None or thi is None else max(abs(tlo), abs(thi)) <= val(led, "r.rule_repro_ttft_tol")
    prev = facts.get("prev_round")

    def span(name: str, lo_v: float, hi_v: float) -> tuple[str, str]:
        one = lo_v == hi_v   # a single common point: one difference, not a range
        en = f"by [[x.{name}_min|spct]]" if one else f"by [[x.{name}_min|spct]] to [[x.{name}_max|spct]]"
        zh = f"相差 [[x.{name}_min|spct]]" if one else f"相差 [[x.{name}_min|spct]] 至 [[x.{name}_max|spct]]"
        return en, zh
    t_en, t_zh = span("repro_tput", lo, hi)
    tput_en = f"output throughput differs {t_en} (tolerance ±[[r.rule_repro_tput_tol|pct0]])"
    tput_zh = f"输出吞吐{t_zh}（容差 ±[[r.rule_repro_tput_tol|pct0]]）"
    if ttft_ok is not None:
        l_en, l_zh = span("repro_ttft_p99", tlo, thi)
        ttft_en = f"TTFT p99 differs {l_en} (tolerance ±[[r.rule_repro_ttft_tol|pct0]])"
        ttft_zh = f"TTFT p99 {l_zh}（容差 ±[[r.rule_repro_ttft_tol|pct0]]）"
    if tput_ok and ttft_ok:
        en = f"Reproduced: at the points shared with {prev}, {tput_en} and {ttft_en}, both within tolerance."
        zh = f"可复现：与 {prev} 相同设置的点上，{tput_zh}，{ttft_zh}，均在容差之内。"
    elif tput_ok and ttft_ok is False:
        en = f"Throughput reproduced, latency did not: at the points shared with {prev}, {tput_en}, but {ttft_en}, beyond it; the tail moved between the rounds, so compare their queues before trusting either's latency."
        zh = f"吞吐可复现，延迟未能复现：与 {prev} 相同设置的点上，{tput_zh}，但 {ttft_zh}，超出容差；两轮之间尾延迟变了，采信任一轮的延迟之前先比较两轮的排队。"
    elif tput_ok:
        en = f"Throughput reproduced: at the points shared with {prev}, {tput_en}; the latency of the two rounds could not be compared."
        zh = f"吞吐可复现：与 {prev} 相同设置的点上，{tput_zh}；两轮的延迟无法比较。"
    else:
        en = f"Not reproduced: at the points shared with {prev}, {tput_en}, beyond tolerance; compare the two rounds' validity and bottlenecks before trusting either."
        zh = f"未能复现：与 {prev} 相同设置的点上，{tput_zh}，超出容差；在采信任一轮之前，先比较两轮的有效性与瓶颈判定。"
    return _make(led, "reproducibility", "comparison", en, zh, [])


def round_findings(led: Ledger, validity: dict[str, Validity], attributions: dict[str, Attribution],
                   valid_pids: list[str], facts: dict) -> list[Finding]:
    """Every finding of one round, most important first."""
    out: list[Finding | None] = []
    if valid_pids:
        last = valid_pids[-1]
        out.append(bottleneck_finding(led, attributions[last]))
        kinds = {}
        for p in valid_pids:
            kinds.setdefault(attributions[p].bottleneck, p)
        for kind, first in kinds.items():
            if first != last and kind != attributions[last].bottleneck:
                out.append(bottleneck_finding(led, attributions[first], f"bottleneck_{kind}"))
        out.append(step_mix_finding(led, last))
        out.append(population_finding(led, last))
    out.append(invalid_points_finding(led, validity))
    out.append(disagreement_finding(led, validity))
    if facts.get("sweep_axis") == "input_len":
        out.append(block_rounding_finding(led, facts.get("ok_points") or []))
    out.append(reproducibility_finding(led, facts))
    return [f for f in out if f is not None]
