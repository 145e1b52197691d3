"""The energy of a point's window, checked two ways, and what it buys (docs/analyses.md item 28).

The GPU rows are NVML's (gpu.jsonl, GPM fields or not) or a DCGM exporter's read as them
(power.dcgm_gpu_rows): each carries the board power `power_w` and, where the GPU reports it,
the energy counter `energy_mj` (mJ since the driver loaded). The counter's delta over the
window, interpolated at its edges, is held against the trapezoid integral of the power samples
over the same window; a counter that went backwards, stood still while the board drew power or
disagrees with the integral beyond `r.rule_energy_tol` is absent with its reason in words, and
the window's energy is the integral then (`energy_j` cites the one it is).
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any, Iterable

from report.derive.gpu.power import rows_of_gpu
from report.ledger import Absent
from report.registry import point_quantity

Samples = Iterable[dict[str, Any]]


def _gpus(samples: list[dict], gpu: int | None) -> list[int]:
    gpus = sorted({s.get("gpu", 0) for s in samples}) if gpu is None else [gpu]
    if not gpus:
        raise Absent("reason.no_gpu_telemetry")
    return gpus


def _series(rows: list[dict], name: str) -> list[tuple[float, float]]:
    """(t, NAME) of ROWS where NAME was read, in time order."""
    return sorted((s["t"], s[name]) for s in rows if s.get(name) is not None)


def _spanning(points: list[tuple[float, float]], t_start: float, t_end: float) -> list[tuple[float, float]]:
    """The samples an interpolation over [t_start, t_end] reads: those inside and one each side."""
    lo = max([i for i, (t, _) in enumerate(points) if t <= t_start], default=0)
    hi = min([i for i, (t, _) in enumerate(points) if t >= t_end], default=len(points) - 1)
    return points[lo:hi + 1]


def _at(points: list[tuple[float, float]], t: float) -> float | None:
    """POINTS' value at T, linear between the samples around it; None outside them."""
    if not points or t < points[0][0] or t > points[-1][0]:
        return None
    for (t0, v0), (t1, v1) in pairwise(points):
        if t0 <= t <= t1:
            return v0 if t1 == t0 else v0 + (v1 - v0) * (t - t0) / (t1 - t0)
    return float(points[-1][1])     # a single sample, exactly at t


def counter_delta_j(rows: list[dict], t_start: float, t_end: float, g: int) -> float:
    """GPU G's energy counter over [t_start, t_end], interpolated at both edges (J); Absent where
    it has no counter, does not span the window, went backwards or stood still while power > 0."""
    points = _series(rows, "energy_mj")
    if not points:
        raise Absent("reason.nvml_no_energy", g=g)
    span = _spanning(points, t_start, t_end)
    if any(b[1] < a[1] for a, b in pairwise(span)):
        raise Absent("reason.energy_backwards_reset", g=g)
    a, b = _at(points, t_start), _at(points, t_end)
    if a is None or b is None:
        t = t_start if a is None else t_end
        raise Absent("reason.outside_energy_samples", t=t, gpu=g, first=points[0][0], last=points[-1][0])
    if b < a:
        raise Absent("reason.energy_backwards", g=g)
    if b == a:
        drawn = [p for t, p in _series(rows, "power_w") if t_start <= t <= t_end]
        if drawn and max(drawn) > 0:
            raise Absent("reason.energy_counter_still", g=g, power=max(drawn))
    return (b - a) / 1000.0


def counter_timing_j(rows: list[dict], t_start: float, t_end: float, g: int) -> float:
    """How far GPU G's counter delta over [t_start, t_end] can be off because each row was read
    at an unknown moment within its `read_s` (a scraped page's; NVML's local reads carry none):
    at each edge, the larger power × the longer read of the two rows around it (J)."""
    rows = sorted((s for s in rows if s.get("energy_mj") is not None), key=lambda s: s["t"])
    total = 0.0
    for edge in (t_start, t_end):
        around = [s for s in rows if s["t"] <= edge][-1:] + [s for s in rows if s["t"] >= edge][:1]
        read = max((s.get("read_s") or 0.0 for s in around), default=0.0)
        power = max((s.get("power_w") or 0.0 for s in around), default=0.0)
        total += read * power
    return total


def power_integral_j(rows: list[dict], t_start: float, t_end: float, g: int) -> float:
    """The trapezoid integral of GPU G's power samples over [t_start, t_end] (J): the power at
    each edge interpolated between the samples around it, or the nearest sample's held where
    none lies beyond it; Absent with fewer than two samples in reach of the window."""
    points = _series(rows, "power_w")
    span = _spanning(points, t_start, t_end)
    if len(span) < 2:
        raise Absent("reason.energy_too_few_power_samples", g=g, n=len(span), t_start=t_start, t_end=t_end)
    first, last = _at(points, t_start), _at(points, t_end)
    edges = [(t_start, span[0][1] if first is None else first),
             *((t, p) for t, p in span if t_start < t < t_end),
             (t_end, span[-1][1] if last is None else last)]
    return sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in pairwise(edges))


def _over_gpus(samples: Samples | None, t_start: float, t_end: float, gpu: int | None, one) -> float:
    if samples is None:
        raise Absent("reason.no_gpu_telemetry")
    if t_end <= t_start:
        raise Absent("reason.window_empty")
    rows = samples if hasattr(samples, "of_gpu") else list(samples)
    return sum(one(rows_of_gpu(rows, g), t_start, t_end, g) for g in _gpus(rows, gpu))


@point_quantity(unit="J")
def energy_counter_j(gpu_samples: Samples, t_measure: float, t_end: float, gpu: int | None = None) -> float:
    """Energy used in the window by the GPUs' energy counters (NVML's, or a DCGM exporter's), interpolated at both edges and summed over the GPUs (J); absent where a counter went backwards or stood still while power was drawn."""
    return _over_gpus(gpu_samples, t_measure, t_end, gpu, counter_delta_j)


@point_quantity(unit="J")
def energy_power_integral_j(gpu_samples: Samples, t_measure: float, t_end: float, gpu: int | None = None) -> float:
    """Energy used in the window by the trapezoid integral of the sampled board power, summed over the GPUs (J)."""
    return _over_gpus(gpu_samples, t_measure, t_end, gpu, power_integral_j)


@point_quantity(unit="J")
def energy_counter_timing_j(gpu_samples: Samples, t_measure: float, t_end: float, gpu: int | None = None) -> float:
    """How far the energy counter's delta can be off because a scraped page was read at an unknown moment within its scrape: at each window edge, the board power × the longer scrape of the two samples around it, summed over the edges and the GPUs (J); 0 for NVML's local reads."""
    return _over_gpus(gpu_samples, t_measure, t_end, gpu, counter_timing_j)


@point_quantity(unit="fraction")
def energy_counter_disagreement(energy_counter_j: float, energy_power_integral_j: float,
                                energy_counter_timing_j: float = 0.0) -> float:
    """How far the energy counter's delta lies from the power samples' integral over the window, beyond what the pages' read times allow: max(0, |counter − integral| − timing) ÷ integral."""
    if energy_power_integral_j <= 0:
        raise Absent("reason.energy_no_power_drawn")
    off = abs(energy_counter_j - energy_power_integral_j) - energy_counter_timing_j
    return max(0.0, off) / energy_power_integral_j


@point_quantity(unit="J")
def energy_counter_checked_j(energy_counter_j: float, energy_counter_disagreement: float,
                             rule_energy_tol: float) -> float:
    """The energy counter's delta where it agrees with the power samples' integral within the tolerance (J); absent, saying by how much it disagrees, otherwise."""
    if energy_counter_disagreement > rule_energy_tol:
        raise Absent("reason.energy_counter_disagrees", off=energy_counter_disagreement, tol=rule_energy_tol)
    return energy_counter_j


@point_quantity(unit="J", first_present=True)
def energy_j(energy_counter_checked_j: float | None = None, energy_power_integral_j: float | None = None,
             energy_counter_j: float | None = None) -> float:
    """Energy the GPUs used in the point's window (J): the energy counter where the power samples confirm it, else the power samples' integral, else the counter unchecked (no power sampled)."""
    return next(v for v in (energy_counter_checked_j, energy_power_integral_j, energy_counter_j) if v is not None)


def joules_per_output_token(energy_j: float, output_tokens: int) -> float:
    """GPU energy per generated token in the window (J/token)."""
    if not output_tokens:
        raise Absent("reason.no_output_token")
    return energy_j / output_tokens


@point_quantity(unit="J/tok")
def joules_per_token(energy_j: float, output_tokens_in_window: int) -> float:
    """GPU energy per output token whose chunk arrived in the point's window (J/token)."""
    return joules_per_output_token(energy_j, output_tokens_in_window)


@point_quantity(unit="J/tok")
def joules_per_total_token(energy_j: float, total_tok_s: float, t_measure: float, t_end: float) -> float:
    """GPU energy per token the point's window processed, prompt and output (J/token): the energy over total tokens per second times the window."""
    tokens = total_tok_s * (t_end - t_measure)
    if tokens <= 0:
        raise Absent("reason.no_token_in_window")
    return energy_j / tokens


@point_quantity(unit="W")
def energy_power_mean_w(energy_j: float, t_measure: float, t_end: float) -> float:
    """The GPUs' average power over the point's window: its energy over its length (W)."""
    if t_end <= t_measure:
        raise Absent("reason.window_empty")
    return energy_j / (t_end - t_measure)


@point_quantity(unit="J/req")
def joules_per_request(energy_j: float, req_s: float, t_measure: float, t_end: float) -> float:
    """GPU energy per measured request completed in the point's window (J/request)."""
    done = req_s * (t_end - t_measure)
    if done <= 0:
        raise Absent("reason.no_request_completed")
    return energy_j / done


# The split between the phases rests on the step model (report/derive/step.py): a step that
# carries a prompt's chunk spends on its decode tokens what a decode-only step would, so what the
# chunk adds is the prefill's; the measured step splits as the modelled one does; and the GPUs
# draw the same power in either phase, so energy splits as time does (compute-bound chunks run
# hotter than bandwidth-bound decode, so prefill's share is then a lower bound).


@point_quantity(unit="fraction")
def prefill_time_share(step_prefill_share: float, prefill_step_compute_ms_model: float,
                       prefill_step_memory_ms_model: float, decode_step_compute_ms_model: float,
                       decode_step_memory_ms_model: float, step_ms_model: float) -> float:
    """Prefill's share of the modelled step time: what a chunk adds to its step beyond a decode-only step, times the share of steps that carry one, over the mean modelled step (assumes a chunk's step decodes as a decode-only step does)."""
    if step_ms_model <= 0:
        raise Absent("reason.denominator_zero")
    chunk = max(prefill_step_compute_ms_model, prefill_step_memory_ms_model)
    decode = max(decode_step_compute_ms_model, decode_step_memory_ms_model)
    return min(1.0, max(0.0, step_prefill_share * (chunk - decode) / step_ms_model))


@point_quantity(unit="J")
def energy_prefill_j(energy_j: float, prefill_time_share: float) -> float:
    """The window's energy prefill used: the energy times prefill's share of the modelled step time (J), assuming the GPUs draw the same power in either phase."""
    return energy_j * prefill_time_share


@point_quantity(unit="J")
def energy_decode_j(energy_j: float, energy_prefill_j: float) -> float:
    """The window's energy decode used: the energy less prefill's (J), under energy_prefill_j's assumption."""
    return energy_j - energy_prefill_j
