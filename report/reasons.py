"""Chinese wording for the reasons an absent value gives (the ledger states them in English).

A reason is matched against these patterns in order; an unmatched reason is shown as it is,
so a new reason is never hidden, only left untranslated.
"""

from __future__ import annotations

import re

# (pattern on the English reason, Chinese text; groups are substituted as \\1, \\2 ...)
PATTERNS: tuple[tuple[str, str], ...] = (
    (r"^(\w[\w.]*) is absent: (.*)$", None),  # chained: handled in to_chinese
    (r"^no NVML library.*", "没有 NVML 库(libnvidia-ml.so):本机没有 NVIDIA 驱动,不采集 GPU 遥测"),
    (r"^no GPU: the engine ran on the CPU.*", "没有 GPU:引擎在 CPU 上运行,这颗 CPU 的峰值算力与内存带宽未知,因此不计算 MFU 与 MBU"),
    (r"^the GPU (.*) is not in the spec table.*", r"GPU \1 不在规格表中,其峰值未知"),
    (r"^vllm:estimated_\* counters did not move.*", "vllm:estimated_* 计数器在该窗口内没有变化:服务端未开启 --enable-mfu-metrics"),
    (r"^fewer than two successful /metrics scrapes cover this window", "该窗口内成功的 /metrics 抓取不足两次"),
    (r"^the round ran without the /metrics sampler", "本轮未开启 /metrics 采样器"),
    (r"^no /metrics scrape was recorded, so no histogram window to place", "没有记录到 /metrics 抓取,无法确定 histogram 的差分窗口"),
    (r"^no /metrics scrape was recorded", "没有记录到 /metrics 抓取"),
    (r"^a single stream cannot run in lockstep with others", "单路请求谈不上与其他流同步"),
    (r"^fewer than two requests per stream \((\d+) for C=(\d+)\)", r"每路不足两个请求(C=\2 时只有 \1 个)"),
    (r"^the median request lifetime is zero", "请求生命周期的中位数为零"),
    (r"^no /metrics scrape was attempted inside the window", "窗口内没有尝试过 /metrics 抓取"),
    (r"^the point sets no concurrency", "该点没有设定并发数"),
    (r"^no request carried two chunks", "没有请求收到两个以上的 chunk"),
    (r"^the point has no warm-up request", "该点没有预热请求"),
    (r"^no two scrapes bracket the measured requests.*", "没有两次抓取能框住预热结束后完成的实测请求"),
    (r"^the server log states no max_num_batched_tokens", "服务端日志没有给出 max_num_batched_tokens"),
    (r"^the server log suggests no --kv-cache-memory", "服务端日志没有给出 --kv-cache-memory 建议值"),
    (r"^the server log is not in the bundle$", "数据包中没有服务端日志"),
    (r"^the window is empty", "窗口为空"),
    (r"^increase of .* needs 2 successful scrapes; the window has (\d+).*", r"窗口内成功的 /metrics 抓取不足两次(只有 \1 次)"),
    (r"^no sample .* in any successful scrape of .*", "窗口内的抓取中没有这个指标"),
    (r"^no gauge samples.*", "窗口内没有该指标的采样"),
    (r"^no samples$", "没有样本"),
    (r"^no values$", "没有数值"),
    (r"^the bundle has no model config\.json.*", "数据包中没有模型的 config.json(外部服务端请在计划的 [engine].model_config 中给出)"),
    (r"^no C=1 point in this round", "本轮没有 C=1 的测量点"),
    (r"^the queue does not grow faster than prefill.*", "排队的增长不快于 prefill,两条线不会相交"),
    (r"^x lies outside the measured range.*", "超出实测范围,不外推"),
    (r"^R² of a line through two points.*", "两点连线的 R² 恒为 1,至少需要三个点"),
    (r"^the server log is not in the bundle.*", "数据包中没有服务端日志(引擎不是由本工具启动的)"),
    (r"^the log has no KV cache size line", "日志中没有 KV cache 大小这一行"),
    (r"^the log states no KV cache memory", "日志没有给出 KV cache 内存"),
    (r"^no --num-gpu-blocks-override line in the log", "日志中没有 --num-gpu-blocks-override 这一行"),
    (r"^no request carried the server's (\w+).*", r"没有请求带回服务端的 \1(需要 --enable-per-request-metrics)"),
    (r"^no observations of .* in the window.*", "窗口内没有该 histogram 的观测值"),
    (r"^the denominator is zero", "分母为零"),
    (r"^the whole is zero", "总量为零"),
    (r"^the reference value is zero", "参照值为零"),
    (r"^no client lag samples in the window", "窗口内没有客户端延迟采样"),
    (r"^no GPU telemetry in this bundle", "数据包中没有 GPU 遥测"),
    (r"^a value is zero or negative, so no logarithm", "有数值为零或负数,无法取对数"),
    (r"^no request ran wholly inside the counter window", "没有请求完整落在计数窗口内"),
    (r"^the window is empty", "窗口为空"),
)


def to_chinese(reason: str) -> str:
    """The reason in Chinese where a pattern knows it; otherwise the English text unchanged."""
    m = re.match(r"^(\w[\w.]*) is absent: (.*)$", reason, re.S)
    if m:
        return f"{m.group(1)} 缺失:{to_chinese(m.group(2))}"
    for pattern, text in PATTERNS[1:]:
        m = re.match(pattern, reason, re.S)
        if m:
            return m.expand(text)
    return reason
