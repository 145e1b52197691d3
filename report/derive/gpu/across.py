"""More than one GPU: how many were sampled, their power summed, and the spread of their counters."""

from __future__ import annotations

from report.derive.gpu.gpm import GpmTexts, dram_bandwidth_share, tensor_active_share
from report.derive.gpu.power import Samples, median_power_w
from report.ledger import Absent
from report.registry import point_quantity

# More than one GPU: each GPU's rows are kept apart by their `gpu` index (NVML per device, or the
# DCGM exporter's `gpu` label); these summarise them across the GPUs sampled in the window.


def _gpu_indices(samples: Samples, t_start: float, t_end: float) -> list[int]:
    """The indices of the GPUs with a sample in the window, in order."""
    if samples is None:
        raise Absent("reason.no_gpu_telemetry")
    found = sorted({s.get("gpu", 0) for s in samples if t_start <= s["t"] <= t_end})
    if not found:
        raise Absent("reason.no_gpu_sample", gpu="*", t_start=t_start, t_end=t_end)
    return found


@point_quantity(unit="GPU")
def gpus_sampled(gpu_samples: Samples, t_measure: float, t_end: float) -> int:
    """How many GPUs were sampled in the window (NVML devices, or the exporter's GPUs)."""
    return len(_gpu_indices(gpu_samples, t_measure, t_end))


@point_quantity(unit="W")
def total_power_median_w(gpu_samples: Samples, t_measure: float, t_end: float) -> float:
    """The sampled GPUs' median board powers in the window, summed (W)."""
    return sum(median_power_w(gpu_samples, t_measure, t_end, g) for g in _gpu_indices(gpu_samples, t_measure, t_end))


def _spread(samples: Samples, t_start: float, t_end: float, share, gpm_absent_texts: GpmTexts) -> float:
    """Highest minus lowest of SHARE over the GPUs sampled in the window; Absent with one GPU."""
    gpus = _gpu_indices(samples, t_start, t_end)
    if len(gpus) < 2:
        raise Absent("reason.one_gpu_no_spread")
    vals = [share(samples, t_start, t_end, g, gpm_absent_texts) for g in gpus]
    return max(vals) - min(vals)


@point_quantity(unit="fraction")
def dram_bandwidth_share_spread(gpu_samples: Samples, t_measure: float, t_end: float,
                                gpm_absent_texts: GpmTexts = None) -> float:
    """The busiest GPU's DRAM bandwidth share minus the least busy one's in the window, by GPM (0 to 1): ranks of one engine should match."""
    return _spread(gpu_samples, t_measure, t_end, dram_bandwidth_share, gpm_absent_texts)


@point_quantity(unit="fraction")
def tensor_active_share_spread(gpu_samples: Samples, t_measure: float, t_end: float,
                               gpm_absent_texts: GpmTexts = None) -> float:
    """The most active GPU's tensor-pipe share of time minus the least active one's in the window, by GPM (0 to 1)."""
    return _spread(gpu_samples, t_measure, t_end, tensor_active_share, gpm_absent_texts)
