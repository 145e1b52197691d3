"""The round's GPU by its datasheet and its manifest: the peaks, the rated power, the clocks, or why no GPU was sampled."""

from __future__ import annotations

from report.architecture.gpus import GpuSpec, lookup_gpu
from report.ledger import Absent, Reason, reason_from_text
from report.registry import round_quantity

# The dtype whose dense tensor peak r.peak_flops is (report/data/gpus.toml).
PEAK_DTYPE = "bf16"
# What bench/samplers/gpu.py records in the manifest when it sampled no GPU, as catalogue codes.
GPU_ABSENT_CODES = ("reason.nvml_no_bindings", "reason.nvml_no_library", "reason.nvml_driver_not_loaded",
                    "reason.nvml_init_failed", "reason.nvml_load_failed", "reason.nvml_no_gpu",
                    "reason.nvml_list_failed")


def gpu_absent_reason(text: str | None) -> Reason | None:
    """The manifest's gpu_absent_reason (English text the collector wrote) as a reason, None if none."""
    if not text:
        return None
    return (reason_from_text(text, GPU_ABSENT_CODES)
            or Reason.of("reason.gpu_absent_recorded", text=text))


# The round's GPU as the manifest describes it (`gpus`, the first GPU's) and its datasheet row.
def _spec(spec_gpus: list[dict]) -> GpuSpec:
    """The spec table's row of the round's GPU; Absent when there is no GPU or the table lacks it."""
    if not spec_gpus:
        raise Absent("reason.no_gpu")
    spec = lookup_gpu(spec_gpus[0].get("name", ""))
    if spec is None:
        raise Absent("reason.gpu_not_in_table", name=spec_gpus[0].get("name"))
    return spec


@round_quantity(unit="FLOP/s")
def peak_flops(spec_gpus: list[dict]) -> float:
    """Dense bf16 tensor peak of the GPU, from the spec table"""
    return _spec(spec_gpus).peak_flops(PEAK_DTYPE)


@round_quantity(unit="B/s")
def peak_bandwidth(spec_gpus: list[dict]) -> float:
    """Peak memory bandwidth of the GPU, from the spec table"""
    return _spec(spec_gpus).memory_bandwidth


@round_quantity(unit="W")
def rated_power_w(spec_gpus: list[dict]) -> float:
    """The board's rated maximum power (TDP), from the spec table: the highest limit it can be set to."""
    rated = _spec(spec_gpus).power_limit_w
    if rated is None:
        raise Absent("reason.spec_no_power")
    return rated


@round_quantity(unit="MHz")
def peak_clock_mhz(spec_gpus: list[dict]) -> float:
    """The SM clock the GPU's datasheet specifies its tensor peaks at, from the spec table."""
    clock = _spec(spec_gpus).peak_clock_mhz
    if clock is None:
        raise Absent("reason.spec_no_peak_clock", name=spec_gpus[0].get("name"))
    return clock


@round_quantity(unit="MHz")
def max_sm_clock_mhz(gpus: list[dict], gpu_absent_text: str | None = None) -> int:
    """The GPU's maximum SM clock, as NVML reports it"""
    if gpus and gpus[0].get("max_sm_clock_mhz") is not None:
        return gpus[0]["max_sm_clock_mhz"]
    raise Absent.because(gpu_absent_reason(gpu_absent_text) or Reason.of("reason.no_gpu_telemetry"))
