"""The report's conclusions: each a mechanism stated with its evidence, in both languages.

A finding's text holds its numbers as `[[ledger.key]]` or `[[ledger.key|pct]]`; the page
prints each through the ledger (traced), the JSON through the same formatter. A finding is
made only from valid points, and only when every key it cites is present.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from serving_ledger.report.diagnosis import Attribution, Validity, val
from serving_ledger.report.ledger import Ledger
from serving_ledger.report.numbers import Format, format_value

PLACEHOLDER = re.compile(r"\[\[([^\]|]+)(?:\|(pct|pct0|spct|int))?\]\]")  # int: a count, no unit; spct: signed %; pct0: whole %
# A step "carries the batch several times over" at this many tokens per running request.
STEP_MIX_MIN = 2.0

REASON_WORDS = {
    "not_held": ("the server held [[p.{p}.held_concurrency_fraction|pct]] of the set concurrency on average (at least [[r.rule_held_min|pct]] needed)",
                 "服务端平均只维持了设定并发的 [[p.{p}.held_concurrency_fraction|pct]]（至少需要 [[r.rule_held_min|pct]]）"),
    "lockstep": ("the streams ran in lockstep waves (each send was together with [[p.{p}.send_synchrony|pct]] of the other streams', and up to [[p.{p}.waiting_peak|int]] requests queued at once)",
                 "各路请求成波次同步运行（每次发送平均与 [[p.{p}.send_synchrony|pct]] 的其他流同时，最多 [[p.{p}.waiting_peak|int]] 个请求同时排队）"),
    "not_steady": ("the window covered only [[p.{p}.lifetimes_in_window]] request lifetimes ([[r.rule_lifetimes_min|int]] needed)",
                   "窗口只覆盖了 [[p.{p}.lifetimes_in_window]] 个请求生命周期（至少需要 [[r.rule_lifetimes_min|int]] 个）"),
    "scrapes_failed": ("[[p.{p}.failed_scrape_share|pct]] of its /metrics scrapes failed",
                       "窗口内 [[p.{p}.failed_scrape_share|pct]] 的 /metrics 抓取失败"),
    "client_distorted": ("the client's timing error bound was [[p.{p}.client_lag_share_of_itl|pct]] of the ITL p50",
                         "客户端计时误差上界达 ITL p50 的 [[p.{p}.client_lag_share_of_itl|pct]]"),
    "interrupted": ("the point was interrupted", "该点被中断"),
    "failed": ("the point failed", "该点失败"),
}

MECHANISMS = {
    "bandwidth_bound": (
        "At {p} the engine was bound by memory bandwidth: vLLM's byte counter read [[p.{p}.mbu|pct]] of the peak bandwidth while its FLOP counter reached [[p.{p}.mfu|pct]] of the dense peak, at [[p.{p}.intensity]] — below the ridge of [[r.ridge]]. Each decode step rereads the weights for a batch too small to reuse them; NVML put the GPU busy [[p.{p}.gpu_util_median_pct]] of the time.",
        "{p} 点受显存带宽限制：vLLM 的读字节计数达到峰值带宽的 [[p.{p}.mbu|pct]]，而 FLOP 计数只有稠密峰值的 [[p.{p}.mfu|pct]]；算术强度 [[p.{p}.intensity]]，低于屋脊 [[r.ridge]]。每个 decode 步都要重读一遍权重，而批太小，摊不薄这次读取；NVML 显示 GPU 忙碌时间中位数 [[p.{p}.gpu_util_median_pct]]。"),
    "compute_bound": (
        "At {p} the engine was bound by compute: vLLM's FLOP counter reached [[p.{p}.mfu|pct]] of the dense peak at [[p.{p}.intensity]], past half the ridge of [[r.ridge]], with the GPU busy [[p.{p}.gpu_util_median_pct]] of the time at a median [[p.{p}.power_median_w]] of its [[p.{p}.power_limit_w]] limit.",
        "{p} 点受算力限制：vLLM 的 FLOP 计数达到稠密峰值的 [[p.{p}.mfu|pct]]，算术强度 [[p.{p}.intensity]]，已超过屋脊 [[r.ridge]] 的一半；GPU 忙碌时间中位数 [[p.{p}.gpu_util_median_pct]]，功耗中位数 [[p.{p}.power_median_w]]（上限 [[p.{p}.power_limit_w]]）。"),
    "delivery_slower_than_engine": (
        "At {p} delivery, not the engine, set the pace: the engine core produced each request's tokens every [[p.{p}.engine_tpot_ms_mean]] (vLLM's per-request TPOT), but the client received them every [[p.{p}.client_tpot_ms_mean]] ([[p.{p}.delivery_tpot_ratio]]). The client timed its reads by the arrival of their bytes and its own timing error was [[p.{p}.client_lag_share_of_itl|pct]] of the ITL, so the delay arose upstream of it: in the API server, which detokenises and streams every request from one process.",
        "{p} 点的节奏由下发环节而非引擎决定：引擎核心每 [[p.{p}.engine_tpot_ms_mean]] 产出一个 token（vLLM 的逐请求 TPOT），客户端却每 [[p.{p}.client_tpot_ms_mean]] 才收到一个（[[p.{p}.delivery_tpot_ratio]]）。客户端按字节到达时刻计时，自身计时误差只有 ITL 的 [[p.{p}.client_lag_share_of_itl|pct]]，所以延迟发生在它的上游：API 服务进程在一个进程里为所有请求做反分词和流式下发。"),
    "pool_full_and_waiting": (
        "At {p} the KV pool limited the engine: at its peak it was [[p.{p}.kv_usage_peak|pct]] full, leaving fewer free tokens than one more request holds ([[p.{p}.request_peak_tokens]]), while up to [[p.{p}.waiting_peak|int]] requests waited and the server preempted [[p.{p}.preemptions]].",
        "{p} 点受 KV 池限制：峰值时池已用 [[p.{p}.kv_usage_peak|pct]]，剩余容量不足再容纳一个请求（[[p.{p}.request_peak_tokens]]），同时最多 [[p.{p}.waiting_peak|int]] 个请求在等待，服务端抢占 [[p.{p}.preemptions|int]] 次。"),
    "queue_with_free_kv": (
        "At {p} requests queued with memory to spare: up to [[p.{p}.waiting_peak|int]] waited and the mean queue time ([[p.{p}.queue_ms_mean]]) exceeded prefill ([[p.{p}.prefill_ms_mean]]) while the KV pool peaked at only [[p.{p}.kv_usage_peak|pct]]. The scheduler's per-step token budget, not memory, admitted them: a step carried [[p.{p}.iteration_tokens_mean]] on average.",
        "{p} 点在显存充裕时仍有排队：最多 [[p.{p}.waiting_peak|int]] 个请求等待，平均排队 [[p.{p}.queue_ms_mean]] 超过 prefill 的 [[p.{p}.prefill_ms_mean]]，而 KV 池峰值只用了 [[p.{p}.kv_usage_peak|pct]]。限制准入的是调度器每步的 token 预算而不是显存：每步平均 [[p.{p}.iteration_tokens_mean]]。"),
    "client_lag": (
        "At {p} the client limited what was measured: its timing error bound ([[p.{p}.client_timing_error_ms]]) was [[p.{p}.client_lag_share_of_itl|pct]] of the ITL p50 ([[p.{p}.itl_ms_p50]]), so its latencies carry its own delay; the engine's own ITL there was [[p.{p}.engine_itl_ms_mean]] against the client's [[p.{p}.client_itl_ms_mean]].",
        "{p} 点受客户端限制：其计时误差上界 [[p.{p}.client_timing_error_ms]] 达到 ITL p50（[[p.{p}.itl_ms_p50]]）的 [[p.{p}.client_lag_share_of_itl|pct]]，测得的延迟含客户端自身的延迟；该点引擎自报 ITL 为 [[p.{p}.engine_itl_ms_mean]]，客户端为 [[p.{p}.client_itl_ms_mean]]。"),
    "gpu_mostly_idle": (
        "At {p} the load stressed nothing: no request waited, the GPU was busy [[p.{p}.gpu_util_median_pct]] of the time, MFU [[p.{p}.mfu|pct]] and MBU [[p.{p}.mbu|pct]]; a higher concurrency would find the limit.",
        "{p} 点的负载没有触及任何瓶颈：无请求排队，GPU 忙碌时间中位数 [[p.{p}.gpu_util_median_pct]]，MFU [[p.{p}.mfu|pct]]，MBU [[p.{p}.mbu|pct]]；需要更高并发才能找到上限。"),
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


def placeholder_format(spec: str | None) -> Format:
    """How a [[key|SPEC]] placeholder prints: pct, signed pct (spct), a count (int) or as is."""
    return Format(pct=spec in ("pct", "pct0", "spct"), sign=spec == "spct",
                  digits=0 if spec in ("int", "pct0") else None, unit=spec != "int")


def plain_text(text: str, led: Ledger, lang: str) -> str:
    """TEXT with every [[key]] replaced by its formatted value (for machine-readable output)."""
    def one(m: re.Match) -> str:
        return format_value(led[m.group(1)], lang, placeholder_format(m.group(2)))
    return PLACEHOLDER.sub(one, text)


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
    """Whether the points shared with the previous round reproduce, against a stated tolerance."""
    lo, hi = val(led, "x.repro_tput_min"), val(led, "x.repro_tput_max")
    if lo is None or hi is None:
        return None
    tol = val(led, "r.rule_repro_tput_tol")
    ok = max(abs(lo), abs(hi)) <= tol
    prev = facts.get("prev_round")
    one = lo == hi   # a single common point: one difference, not a range
    span_en = "by [[x.repro_tput_min|spct]]" if one else "by [[x.repro_tput_min|spct]] to [[x.repro_tput_max|spct]]"
    span_zh = "相差 [[x.repro_tput_min|spct]]" if one else "相差 [[x.repro_tput_min|spct]] 至 [[x.repro_tput_max|spct]]"
    if ok:
        en = f"Reproduced: at the points shared with {prev}, output throughput differs {span_en}, within the ±[[r.rule_repro_tput_tol|pct0]] tolerance."
        zh = f"可复现：与 {prev} 相同设置的点上，输出吞吐{span_zh}，在 ±[[r.rule_repro_tput_tol|pct0]] 容差之内。"
    else:
        en = f"Not reproduced: at the points shared with {prev}, output throughput differs {span_en}, beyond the ±[[r.rule_repro_tput_tol|pct0]] tolerance; compare the two rounds' validity and bottlenecks before trusting either."
        zh = f"未能复现：与 {prev} 相同设置的点上，输出吞吐{span_zh}，超出 ±[[r.rule_repro_tput_tol|pct0]] 容差；在采信任一轮之前，先比较两轮的有效性与瓶颈判定。"
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
    if facts.get("sweep_axis") == "input_len":
        out.append(block_rounding_finding(led, facts.get("ok_points") or []))
    out.append(reproducibility_finding(led, facts))
    return [f for f in out if f is not None]
