"""What a compute-bound verdict predicts: the engine's mean step at the compute ceiling of the clock the GPU ran at."""

from __future__ import annotations

from report.ledger import Absent
from report.registry import point_quantity

# What a compute-bound verdict predicts: the engine's mean step at the compute ceiling of the
# clock the GPU ran at (the dense peak scaled by the sampled SM clock), beside the step measured.

@point_quantity(unit="ms")
def step_ms_mean(engine_steps_per_s: float, engines_stepping: int = 1) -> float:
    """One engine's mean step time in the window, ms: the engines step side by side, so each takes the engines' count over their summed steps per second."""
    if engine_steps_per_s <= 0:
        raise Absent("reason.step_count_unknown", steps=engine_steps_per_s)
    return 1e3 * (engines_stepping or 1) / engine_steps_per_s


@point_quantity(unit="GFLOP")
def step_gflop(tflops_s: float, engine_steps_per_s: float) -> float:
    """GFLOP of the engine's mean step: vLLM's FLOP rate over its step rate."""
    if engine_steps_per_s <= 0:
        raise Absent("reason.step_count_unknown", steps=engine_steps_per_s)
    return tflops_s * 1e3 / engine_steps_per_s


@point_quantity(unit="ms")
def step_ms_at_compute_ceiling(step_gflop: float, peak_tflops_at_clock: float, engines_stepping: int = 1,
                               gpus_sampled: int | None = None) -> float:
    """The mean step's time were it bound by compute: its FLOP at the dense peak scaled by the sampled SM clock, shared by the engines on each GPU, ms."""
    if peak_tflops_at_clock <= 0:
        raise Absent("reason.peak_zero")
    # Engines that share a GPU (more engines than GPUs sampled) share its peak between their steps.
    sharing = max((engines_stepping or 1) / gpus_sampled, 1.0) if gpus_sampled else 1.0
    return step_gflop * sharing / peak_tflops_at_clock


@point_quantity(unit="×")
def step_over_compute_ceiling(step_ms_mean: float, step_ms_at_compute_ceiling: float) -> float:
    """The measured mean step over the step the compute ceiling at the sampled clock predicts (1 is compute-bound)."""
    return step_ms_mean / step_ms_at_compute_ceiling
