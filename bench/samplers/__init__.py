"""The round's samplers, one per sample stream beside the requests and the point events: each a
`Sampler` (base) that appends one stream bundle/schema.py declares, started by the round with
its `Context` and stopped with it. A new signal is one module here, its line in
`round_samplers`, its stream in bundle/schema.py and the quantity that reads it.
"""

from __future__ import annotations

from bench.samplers.base import AT_ROUND, AT_SERVER, Context, Sampler
from bench.samplers.gpu import GpuSampler
from bench.samplers.hostcpu import HOST_INTERVAL_S, HostSampler
from bench.samplers.lag import LagSampler
from bench.samplers.scrape import MetricsSampler

__all__ = ["AT_ROUND", "AT_SERVER", "Context", "Sampler", "round_samplers"]


def round_samplers(sampler, gpus: bool) -> list[Sampler]:
    """The samplers a round runs, in the order it starts them, from the plan's `[sampler]`
    table (bench/plan/spec.py); GPUS: whether the manifest describes any GPU."""
    out: list[Sampler] = []
    if sampler.gpu and gpus:
        out.append(GpuSampler(sampler.gpu_interval_s))
    out += [LagSampler(), HostSampler(min(sampler.metrics_interval_s, HOST_INTERVAL_S))]
    if sampler.metrics:
        out.append(MetricsSampler(sampler.metrics_interval_s))
        if sampler.gpu_metrics:
            # The remote GPUs' exporter, on the same clock as /metrics.
            out.append(MetricsSampler(sampler.metrics_interval_s, stream="dcgm", path="",
                                      prefix="DCGM_FI_", url=sampler.gpu_metrics))
    return out
