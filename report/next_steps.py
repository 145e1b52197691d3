"""The next experiments the evidence calls for, each with the numbers that size it.

Each step is a sentence per language with `[[ledger.key]]` numbers, as findings are.
"""

from __future__ import annotations

from serving_ledger.report.diagnosis import val
from serving_ledger.report.ledger import Ledger

# Throughput that grew less than this between the last two valid points has saturated.
SATURATION_GROWTH = 0.10


def step(sid: str, en: str, zh: str) -> dict:
    """One step as the templates and the JSON read it."""
    return {"id": sid, "en": en, "zh": zh}


def next_steps(led: Ledger, rd, facts: dict) -> list[dict]:
    """The steps of one round, most telling first."""
    out = []
    valid = facts.get("valid_points") or []
    attribution = rd.extras.get("attribution") or {}
    validity = rd.extras.get("validity") or {}
    by_kind: dict[str, list[str]] = {}
    for pid in facts.get("ok_points") or []:
        by_kind.setdefault(attribution[pid].bottleneck, []).append(pid)
    for pid, v in validity.items():
        k = f"p.{pid}."
        if "lockstep" in v.reasons and val(led, k + "e2e_ms_p50") is not None:
            out.append(step(f"rerun_{pid}", f"Rerun {pid} with its streams started over about one request lifetime ([[{k}e2e_ms_p50]]; a plan's `[sweep] ramp_s`) and output lengths that vary, so the streams cannot fall back into waves.",
                            f"重测 {pid}:让各路流在约一个请求生命周期([[{k}e2e_ms_p50]];计划中的 `[sweep] ramp_s`)内错开启动,并让输出长度有变化,使各路流不会重新同步成波次。"))
        elif "not_steady" in v.reasons and val(led, k + "e2e_ms_p50") is not None:
            out.append(step(f"longer_{pid}", f"Rerun {pid} for at least three request lifetimes after its warm-up: at [[{k}e2e_ms_p50]] each, a window of three times that.",
                            f"重测 {pid},预热后至少持续三个请求生命周期:每个 [[{k}e2e_ms_p50]],窗口至少为其三倍。"))
    if "frontend" in by_kind:
        pid = by_kind["frontend"][0]
        out.append(step("api_servers", f"Delivery limited the engine from {pid} on: rerun those points with `--api-server-count 2` (more API server processes) and check that the client's TPOT ([[p.{pid}.client_tpot_ms_mean]]) falls to the engine's ([[p.{pid}.engine_tpot_ms_mean]]).",
                        f"从 {pid} 起下发环节限制了引擎:用 `--api-server-count 2`(更多 API 服务进程)重测这些点,检查客户端 TPOT([[p.{pid}.client_tpot_ms_mean]])是否降到引擎自报的 [[p.{pid}.engine_tpot_ms_mean]]。"))
    if "scheduler_budget" in by_kind:
        pid = by_kind["scheduler_budget"][0]
        out.append(step("batched_tokens", f"Requests queued with free KV from {pid} on: sweep `--max-num-batched-tokens` upwards from [[r.max_num_batched_tokens]] at that concurrency and watch the queue ([[p.{pid}.queue_ms_mean]]) against ITL p99 ([[p.{pid}.itl_ms_p99]]).",
                        f"从 {pid} 起 KV 尚有余量时仍在排队:在该并发下把 `--max-num-batched-tokens` 从 [[r.max_num_batched_tokens]] 往上扫,观察排队([[p.{pid}.queue_ms_mean]])与 ITL p99([[p.{pid}.itl_ms_p99]])的取舍。"))
    if "kv_pool" in by_kind:
        pid = by_kind["kv_pool"][0]
        out.append(step("grow_pool", f"The KV pool was full at {pid}: C requests there need [[p.{pid}.kv_tokens_theory]] against a pool of [[r.pool_tokens]]; a larger pool (`--kv-cache-memory`, or `--gpu-memory-utilization`) would admit them.",
                        f"{pid} 点 KV 池已满:该点 C 个请求需要 [[p.{pid}.kv_tokens_theory]],而池只有 [[r.pool_tokens]];更大的池(`--kv-cache-memory` 或 `--gpu-memory-utilization`)才能同时容纳。"))
    if val(led, "r.kv_cache_memory_suggested_gib") is not None:
        out.append(step("kv_cache_memory", "The server log suggests a KV cache of [[r.kv_cache_memory_suggested_gib]] (`--kv-cache-memory`); a round with it would show the pool and concurrency cap that memory allows.",
                        "服务端日志建议 KV 缓存设为 [[r.kv_cache_memory_suggested_gib]](`--kv-cache-memory`);用它再测一轮,可以看到这块显存允许的池大小与并发上限。"))
    if rd.axis == "concurrency" and len(valid) >= 2:
        a, b = valid[-2], valid[-1]
        growth = val(led, f"p.{b}.output_tok_s"), val(led, f"p.{a}.output_tok_s")
        if None not in growth and growth[1] and growth[0] / growth[1] - 1 < SATURATION_GROWTH:
            out.append(step("between", f"Throughput grew by less than 10 % from {a} ([[p.{a}.output_tok_s]]) to {b} ([[p.{b}.output_tok_s]]): the knee lies between them; measure concurrencies between the two.",
                            f"从 {a}([[p.{a}.output_tok_s]])到 {b}([[p.{b}.output_tok_s]])吞吐增长不到 10%:拐点在两者之间,下一轮在这两个并发之间加测。"))
        elif attribution.get(b) is not None and attribution[b].bottleneck in ("gpu_bandwidth", "under_driven"):
            out.append(step("beyond", f"The last valid point, {b}, had not saturated ([[p.{b}.output_tok_s]], bottleneck {attribution[b].bottleneck}): extend the sweep beyond its concurrency.",
                            f"最后一个有效点 {b} 尚未饱和([[p.{b}.output_tok_s]],瓶颈 {attribution[b].bottleneck}):把扫描延伸到更高并发。"))
    if not facts.get("mfu_enabled"):
        out.append(step("enable_mfu", "The MFU counters were not enabled: rerun with `--enable-mfu-metrics` to get FLOP and byte rates.",
                        "未启用 MFU 计数器:加 `--enable-mfu-metrics` 重测,以获得 FLOP 与字节速率。"))
    if not rd.bundle.manifest.get("gpus"):
        out.append(step("gpu_round", "This round ran on the CPU: the same plan against a GPU server adds power, clocks and MFU/MBU against a known peak.",
                        "本轮在 CPU 上运行:把同一计划跑在 GPU 服务端上,可以得到功耗、频率,以及相对已知峰值的 MFU/MBU。"))
    if rd.axis == "input_len" and "x.prefill_c1_ms" not in led:
        out.append(step("c1_length_sweep", "The single-stream compute baseline is extrapolated: a single-stream length sweep would measure it.",
                        "单路计算基线来自外推:做一轮单路的长度扫描即可实测。"))
    if facts.get("prefix_caching_off"):
        out.append(step("prefix_caching", "Prefix caching was off for clean prefill measurements; a shared-prefix workload with it on would measure reuse.",
                        "为了干净地测量 prefill,本轮关闭了前缀缓存;用共享前缀的负载并开启它,可以测出复用的收益。"))
    return out
