"""The server's counters and gauges as quantities: over the round, over a point's windows, and vLLM's MFU counters."""

from __future__ import annotations

from typing import Sequence

from report.derive.series.scrapes import (
    Scrape,
    counter_increase,
    counter_moved,
    counter_rate,
    median_value,
    peak_value,
    scrapes_in_window,
    share_positive,
)
from report.ledger import Absent
from report.registry import point_quantity, round_quantity


def _scraped_span(scrapes: Sequence[Scrape], metrics_sampler_on: bool) -> tuple[float, float]:
    """The first and last scrape's times; Absent when there is none (the sampler off, or no scrape)."""
    if not scrapes:
        raise Absent("reason.no_metrics_sampler" if not metrics_sampler_on else "reason.no_scrape")
    return scrapes[0]["t"], scrapes[-1]["t"]


@round_quantity(unit="s")
def duration_s(scrapes: Sequence[Scrape], metrics_sampler_on: bool) -> float:
    """Time between the first and last scrape"""
    t0, t1 = _scraped_span(scrapes, metrics_sampler_on)
    return t1 - t0


@round_quantity(key="preemptions")
def round_preemptions(scrapes: Sequence[Scrape], metrics_sampler_on: bool) -> float:
    """Preemptions the server counted over the round"""
    return counter_increase(scrapes, *_scraped_span(scrapes, metrics_sampler_on), "vllm:num_preemptions_total")


# The point's steady-window gauges and bracketing-window counters, each key one function.
@point_quantity(unit="req")
def server_running_median(steady_running: list[float]) -> float:
    """Median of the running-requests gauge over the point's steady window."""
    return median_value(steady_running)


@point_quantity(unit="req")
def waiting_peak(steady_waiting: list[float]) -> float:
    """Peak of the waiting-requests gauge over the point's steady window."""
    return peak_value(steady_waiting)


@point_quantity(unit="fraction")
def waiting_share(steady_waiting: list[float]) -> float:
    """Share of the steady window's scrapes with a request waiting."""
    return share_positive(steady_waiting)


@point_quantity(unit="fraction")
def kv_usage_p50(steady_kv_usage: list[float]) -> float:
    """Median of the KV cache usage gauge over the point's steady window (the engines' mean at each scrape where there are several)."""
    return median_value(steady_kv_usage)


@point_quantity(unit="")
def preemptions(scrapes: list, bracket_start: float, bracket_end: float) -> float:
    """Preemptions the engine counted over the point's bracketing scrapes."""
    return counter_increase(scrapes, bracket_start, bracket_end, "vllm:num_preemptions_total")


@point_quantity(unit="tok")
def prefix_cache_hits(scrapes: list, bracket_start: float, bracket_end: float) -> float:
    """Prompt tokens served from the prefix cache over the point's bracketing scrapes."""
    return counter_increase(scrapes, bracket_start, bracket_end, "vllm:prefix_cache_hits_total")


@point_quantity(unit="tok")
def prompt_tokens_server(scrapes: list, bracket_start: float, bracket_end: float) -> float:
    """Prompt tokens the server counted over the point's bracketing scrapes."""
    return counter_increase(scrapes, bracket_start, bracket_end, "vllm:prompt_tokens_total")


@point_quantity(unit="tok")
def generation_tokens_server(scrapes: list, bracket_start: float, bracket_end: float) -> float:
    """Output tokens the server counted over the point's bracketing scrapes."""
    return counter_increase(scrapes, bracket_start, bracket_end, "vllm:generation_tokens_total")


# vLLM's MFU counters (--enable-mfu-metrics): estimated FLOPs and read bytes per GPU.
MFU_FLOPS = "vllm:estimated_flops_per_gpu_total"
MFU_READ_BYTES = "vllm:estimated_read_bytes_per_gpu_total"


def _mfu_counter_rate(scrapes: list, t_start: float, t_end: float, name: str) -> float:
    """Window rate of MFU counter NAME; Absent with the reason when the FLOPs counter did not move."""
    try:
        moved = counter_moved(scrapes, t_start, t_end, MFU_FLOPS)
    except Absent:
        moved = False
    if not moved:
        if len(scrapes_in_window(scrapes, t_start, t_end)) < 2:
            raise Absent("reason.too_few_scrapes_window")
        raise Absent("reason.mfu_counters_still")
    return counter_rate(scrapes, t_start, t_end, name)


@point_quantity(unit="TFLOP/s")
def tflops_s(scrapes: list, bracket_start: float, bracket_end: float) -> float:
    """Estimated FLOP rate from vLLM's MFU counter over the point's bracketing scrapes, in 10^12 per second."""
    return _mfu_counter_rate(scrapes, bracket_start, bracket_end, MFU_FLOPS) / 1e12


@point_quantity(unit="GB/s")
def read_gb_s(scrapes: list, bracket_start: float, bracket_end: float) -> float:
    """Estimated read-byte rate from vLLM's MFU counter over the point's bracketing scrapes, in 10^9 per second."""
    return _mfu_counter_rate(scrapes, bracket_start, bracket_end, MFU_READ_BYTES) / 1e9
