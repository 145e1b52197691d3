"""Power, temperature, clocks and energy of a window, from a bundle's raw NVML samples.

Each function is pure, takes the `gpu` stream's records as read (`Bundle.gpu`) plus a window
[t_start, t_end] on the bundle's clock, and raises Absent (with the reason in words) when the
window holds no usable sample. A field NVML refused is null in a sample and skipped here,
never read as 0.
"""

from __future__ import annotations

import statistics
from itertools import pairwise
from typing import Any, Iterable

from bundle.gpu_fields import reason_bits
from report.ledger import Absent, Reason

Samples = Iterable[dict[str, Any]]

SW_POWER_CAP = dict((name, bit) for bit, name in reason_bits())["sw_power_cap"]


def window_samples(samples: Samples, t_start: float, t_end: float, gpu: int = 0) -> list[dict]:
    """The samples of one GPU with t_start <= t <= t_end, in time order."""
    if samples is None:
        raise Absent("reason.no_gpu_telemetry")
    out = sorted((s for s in samples if s.get("gpu", 0) == gpu and t_start <= s["t"] <= t_end),
                 key=lambda s: s["t"])
    if not out:
        raise Absent("reason.no_gpu_sample", gpu=gpu, t_start=t_start, t_end=t_end)
    return out


def _field(samples: Samples, t_start: float, t_end: float, gpu: int, name: str) -> list:
    """The non-null values of NAME in the window; Absent when NVML gave none."""
    vals = [s.get(name) for s in window_samples(samples, t_start, t_end, gpu)]
    vals = [v for v in vals if v is not None]
    if not vals:
        raise Absent("reason.nvml_no_field", name=name, gpu=gpu, t_start=t_start, t_end=t_end)
    return vals


def median_power_w(samples: Samples, t_start: float, t_end: float, gpu: int = 0) -> float:
    """Median of the sampled board power in the window (W)."""
    return float(statistics.median(_field(samples, t_start, t_end, gpu, "power_w")))


def median_gpu_util_pct(samples: Samples, t_start: float, t_end: float, gpu: int = 0) -> float:
    """Median of NVML's GPU utilisation (share of time a kernel ran) in the window, %."""
    return float(statistics.median(_field(samples, t_start, t_end, gpu, "gpu_util_pct")))


def peak_power_w(samples: Samples, t_start: float, t_end: float, gpu: int = 0) -> float:
    """Highest sampled board power in the window (W)."""
    return float(max(_field(samples, t_start, t_end, gpu, "power_w")))


def power_limit_w(samples: Samples, t_start: float, t_end: float, gpu: int = 0) -> float:
    """The enforced power limit in the window (W); the highest if it changed."""
    return float(max(_field(samples, t_start, t_end, gpu, "power_limit_w")))


def max_temperature_c(samples: Samples, t_start: float, t_end: float, gpu: int = 0) -> float:
    """Highest sampled GPU temperature in the window (°C)."""
    return float(max(_field(samples, t_start, t_end, gpu, "temperature_c")))


def power_cap_share(samples: Samples, t_start: float, t_end: float, gpu: int = 0) -> float:
    """Fraction (0..1) of the window's samples whose clocks the SW power cap was holding down."""
    masks = _field(samples, t_start, t_end, gpu, "throttle_reasons")
    return sum(1 for m in masks if m & SW_POWER_CAP) / len(masks)


def _clock_where(samples: Samples, t_start: float, t_end: float, gpu: int, busy, what: Reason):
    w = window_samples(samples, t_start, t_end, gpu)
    clocks = [s["sm_clock_mhz"] for s in w
              if s.get("gpu_util_pct") is not None and s.get("sm_clock_mhz") is not None
              and busy(s["gpu_util_pct"])]
    if not clocks:
        raise Absent("reason.no_sm_clock_sample", gpu=gpu, what=what, t_start=t_start, t_end=t_end)
    return float(statistics.median(clocks))


def median_sm_clock_under_load_mhz(samples: Samples, t_start: float, t_end: float, gpu: int = 0,
                                   busy_util_pct: float = 50.0) -> float:
    """Median SM clock over the window's samples with GPU utilisation >= busy_util_pct (MHz)."""
    return _clock_where(samples, t_start, t_end, gpu, lambda u: u >= busy_util_pct,
                        Reason.of("reason.util_at_least", pct=busy_util_pct))


def _counter_at(points: list[tuple[float, int]], t: float, gpu: int) -> float:
    """The energy counter at T, interpolated linearly between the samples around it (mJ)."""
    if t < points[0][0] or t > points[-1][0]:
        raise Absent("reason.outside_energy_samples",
                     t=t, gpu=gpu, first=points[0][0], last=points[-1][0])
    for (t0, e0), (t1, e1) in pairwise(points):
        if t0 <= t <= t1:
            return e0 if t1 == t0 else e0 + (e1 - e0) * (t - t0) / (t1 - t0)
    return float(points[-1][1])  # a single sample, exactly at t


def energy_j(samples: Samples, t_start: float, t_end: float, gpu: int | None = None) -> float:
    """Energy used in [t_start, t_end] from NVML's energy counter, summed over GPUs (J).

    The counter (mJ since driver load) is interpolated linearly at both ends of the window;
    gpu=None sums every GPU in the samples.
    """
    if samples is None:
        raise Absent("reason.no_gpu_telemetry")
    samples = list(samples)
    gpus = sorted({s.get("gpu", 0) for s in samples}) if gpu is None else [gpu]
    if not gpus:
        raise Absent("reason.no_gpu_telemetry")
    total = 0.0
    for g in gpus:
        points = sorted((s["t"], s["energy_mj"]) for s in samples
                        if s.get("gpu", 0) == g and s.get("energy_mj") is not None)
        if not points:
            raise Absent("reason.nvml_no_energy", g=g)
        # Every sample the interpolation spans, the bracketing ones outside the window too.
        lo = max([i for i, (t, _) in enumerate(points) if t <= t_start], default=0)
        hi = min([i for i, (t, _) in enumerate(points) if t >= t_end], default=len(points) - 1)
        if any(b[1] < a[1] for a, b in pairwise(points[lo:hi + 1])):
            raise Absent("reason.energy_backwards_reset", g=g)
        delta = _counter_at(points, t_end, g) - _counter_at(points, t_start, g)
        if delta < 0:
            raise Absent("reason.energy_backwards", g=g)
        total += delta / 1000.0
    return total


def joules_per_output_token(energy_j: float, output_tokens: int) -> float:
    """GPU energy per generated token in the window (J/token)."""
    if not output_tokens:
        raise Absent("reason.no_output_token")
    return energy_j / output_tokens
