"""Power, temperature, clocks and GPM hardware counters of a window, from a bundle's raw NVML samples.

Each function is pure, takes the `gpu` stream's records as read (`Bundle.gpu`) plus a window
[t_start, t_end] on the bundle's clock, and raises Absent (with the reason in words) when the
window holds no usable sample. A field NVML refused is null in a sample and skipped here,
never read as 0.
"""

from __future__ import annotations

import statistics
from functools import lru_cache
from typing import Any, Iterable, Mapping

from bundle.gpu_fields import reason_bits
from bundle.metric_keys import split_key
from bundle.plausible import (
    DCGM_FIELDS,
    Maxima,
    dcgm_blank,
    dcgm_value_problem,
    described_maxima,
    device_maxima,
    field_problem,
    page_maxima,
)
from report.architecture.gpus import GpuSpec, lookup_gpu
from report.derive.arith import ratio
from report.derive.sizes import peak_at_clock
from report.ledger import Absent, Reason, reason_from_text
from report.registry import bound_quantity, point_quantity, round_quantity

Samples = Iterable[dict[str, Any]]
# The collector's text of why a GPU has no GPM counters, by GPU index (manifest `gpus[i].gpm_absent_reason`).
GpmTexts = Mapping[int, str | None] | None

SW_POWER_CAP = dict((name, bit) for bit, name in reason_bits())["sw_power_cap"]
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


class GpuRows(list):
    """GPU rows (gpu.jsonl's, or an exporter's read as them) with an index by GPU, built on first
    use: a quantity of one GPU reads that GPU's rows, so the cost of all GPUs' quantities is
    linear in the rows, however many GPUs a page names."""

    def __init__(self, rows=()):
        super().__init__(rows)
        self._by_gpu: dict[int, list[dict]] | None = None

    def of_gpu(self, gpu: int) -> list[dict]:
        """The rows of GPU, in their order."""
        if self._by_gpu is None:
            self._by_gpu = {}
            for s in self:
                self._by_gpu.setdefault(s.get("gpu", 0), []).append(s)
        return self._by_gpu.get(gpu, [])


def rows_of_gpu(samples: Samples, gpu: int) -> list[dict]:
    """The rows of SAMPLES that are GPU's, in their order (through the index of GpuRows)."""
    if isinstance(samples, GpuRows):
        return samples.of_gpu(gpu)
    return [s for s in samples if s.get("gpu", 0) == gpu]


def window_samples(samples: Samples, t_start: float, t_end: float, gpu: int = 0) -> list[dict]:
    """The samples of one GPU with t_start <= t <= t_end, in time order."""
    if samples is None:
        raise Absent("reason.no_gpu_telemetry")
    out = sorted((s for s in rows_of_gpu(samples, gpu) if t_start <= s["t"] <= t_end),
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


@point_quantity(unit="W")
def power_limit_w(gpu_samples: Samples, t_measure: float, t_end: float, gpu: int = 0) -> float:
    """The enforced power limit in the window (W); the highest if it changed."""
    return float(max(_field(gpu_samples, t_measure, t_end, gpu, "power_limit_w")))


def max_temperature_c(samples: Samples, t_start: float, t_end: float, gpu: int = 0) -> float:
    """Highest sampled GPU temperature in the window (°C)."""
    return float(max(_field(samples, t_start, t_end, gpu, "temperature_c")))


@point_quantity(unit="fraction")
def power_cap_share(gpu_samples: Samples, t_measure: float, t_end: float, gpu: int = 0) -> float:
    """Fraction (0..1) of the window's samples whose clocks the SW power cap was holding down."""
    masks = _field(gpu_samples, t_measure, t_end, gpu, "throttle_reasons")
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


# The point's quantities of the NVML samples above: each names the point's GPU rows and window.

# The first GPU's statistics of one NVML field (name, function, unit), in the order they are resolved.
NVML_STATS = (("power_median_w", median_power_w, "W"), ("power_peak_w", peak_power_w, "W"),
              ("temp_max_c", max_temperature_c, "°C"))
for _name, _func, _unit in NVML_STATS:
    bound_quantity("point", _name, _func, unit=_unit, samples="gpu_samples", t_start="t_measure", gpu=0)


@point_quantity(unit="MHz")
def sm_clock_load_mhz(gpu_samples: Samples, t_measure: float, t_end: float) -> float:
    """Median SM clock over the point's samples with the GPU busy (utilisation at least the default busy_util_pct, MHz)."""
    return median_sm_clock_under_load_mhz(gpu_samples, t_measure, t_end)


@point_quantity(unit="fraction")
def sm_clock_below_max(sm_clock_load_mhz: float, max_sm_clock_mhz: float) -> float:
    """How far the SM clock under load ran below the GPU's maximum: 1 - clock / maximum (0 at the maximum)."""
    if max_sm_clock_mhz <= 0:
        raise Absent("reason.denominator_zero")
    return 1.0 - sm_clock_load_mhz / max_sm_clock_mhz


bound_quantity("point", "gpu_util_median_pct", median_gpu_util_pct, unit="%", samples="gpu_samples", t_start="t_measure", gpu=0)


@point_quantity(unit="TFLOP/s")
def peak_tflops_at_clock(peak_tflops: float, sm_clock_load_mhz: float, peak_clock_mhz: float) -> float:
    """The dense peak at the SM clock the point ran at, scaled from the clock the datasheet specifies it at: under a power cap the ceiling is the clock's."""
    return peak_at_clock(peak_tflops, sm_clock_load_mhz, peak_clock_mhz)


@point_quantity(unit="fraction")
def mfu_at_clock(tflops_s: float, peak_tflops_at_clock: float) -> float:
    """Measured TFLOP/s against the peak at the point's SM clock."""
    return ratio(tflops_s, peak_tflops_at_clock)


# GPM hardware counters over a window, from a bundle's gpu.jsonl rows (bench/samplers/gpm.py).
#
# Each row's counters are NVML's figures over the interval (t - gpm_interval_s, t]; a window
# [t_start, t_end] takes the rows whose whole interval lies inside it, and a mean weights each
# row by its interval. Shares are fractions (0..1, comparable with MBU and MFU), bandwidths
# bytes/s. Functions are pure and raise Absent with the reason when the input is missing; a
# counter NVML refused is null in a row and skipped, never read as 0.

MIB = 2**20

# Reasons the collector records for a GPU without GPM counters (manifest `gpus[i].gpm_absent_reason`).
GPM_ABSENT_CODES = ("reason.gpm_no_bindings_api", "reason.gpm_gpu_unsupported",
                    "reason.gpm_not_permitted", "reason.gpm_no_driver_api",
                    "reason.gpm_not_supported", "reason.gpm_refused")


def gpm_absent_reason(text: str | None) -> Reason | None:
    """The manifest's gpm_absent_reason (English text the collector wrote) as a reason, None if none."""
    if not text:
        return None
    return reason_from_text(text, GPM_ABSENT_CODES) or Reason.of("reason.gpm_absent_recorded", text=text)


def window_rows(samples: Samples, t_start: float, t_end: float, gpu: int = 0,
                gpm_absent_texts: GpmTexts = None) -> list[dict]:
    """One GPU's rows with GPM counters whose interval lies inside [t_start, t_end], in time order;
    without any, Absent with the collector's reason for that GPU where it recorded one."""
    if samples is None:
        raise Absent("reason.no_gpu_telemetry")
    rows = [s for s in rows_of_gpu(samples, gpu) if s.get("gpm_interval_s") is not None]
    if not rows:
        why = gpm_absent_reason((gpm_absent_texts or {}).get(gpu))
        raise Absent.because(why) if why else Absent("reason.no_gpm_counters", gpu=gpu)
    inside = [s for s in rows if t_start <= s["t"] - s["gpm_interval_s"] and s["t"] <= t_end]
    if not inside:
        raise Absent("reason.no_gpm_interval", gpu=gpu, t_start=t_start, t_end=t_end)
    return sorted(inside, key=lambda s: s["t"])


def time_weighted_mean(samples: Samples, t_start: float, t_end: float, name: str, gpu: int = 0,
                       gpm_absent_texts: GpmTexts = None) -> float:
    """Mean of the GPM counter NAME over the window, each row weighted by its interval."""
    pairs = [(s[name], s["gpm_interval_s"]) for s in window_rows(samples, t_start, t_end, gpu, gpm_absent_texts)
             if s.get(name) is not None and s["gpm_interval_s"] > 0]
    if not pairs:
        raise Absent("reason.gpm_no_field", name=name, gpu=gpu, t_start=t_start, t_end=t_end)
    return sum(v * dt for v, dt in pairs) / sum(dt for _, dt in pairs)


@point_quantity(unit="fraction")
def dram_bandwidth_share(gpu_samples: Samples, t_measure: float, t_end: float, gpu: int = 0,
                         gpm_absent_texts: GpmTexts = None) -> float:
    """Mean share of the peak DRAM bandwidth the GPU used in the window, by its GPM counter (0 to 1)."""
    return time_weighted_mean(gpu_samples, t_measure, t_end, "gpm_dram_bw_util_pct", gpu, gpm_absent_texts) / 100.0


@point_quantity(unit="fraction")
def tensor_active_share(gpu_samples: Samples, t_measure: float, t_end: float, gpu: int = 0,
                        gpm_absent_texts: GpmTexts = None) -> float:
    """Mean share of time the SMs ran any tensor-core operation in the window, by GPM (0 to 1)."""
    return time_weighted_mean(gpu_samples, t_measure, t_end, "gpm_any_tensor_util_pct", gpu, gpm_absent_texts) / 100.0


@point_quantity(unit="fraction")
def hmma_active_share(gpu_samples: Samples, t_measure: float, t_end: float, gpu: int = 0,
                      gpm_absent_texts: GpmTexts = None) -> float:
    """Mean share of time the SMs ran half-precision (HMMA) tensor operations in the window, by GPM (0 to 1)."""
    return time_weighted_mean(gpu_samples, t_measure, t_end, "gpm_hmma_tensor_util_pct", gpu, gpm_absent_texts) / 100.0


@point_quantity(unit="fraction")
def sm_active_share(gpu_samples: Samples, t_measure: float, t_end: float, gpu: int = 0,
                    gpm_absent_texts: GpmTexts = None) -> float:
    """Mean share of SMs that were busy in the window, by GPM (0 to 1)."""
    return time_weighted_mean(gpu_samples, t_measure, t_end, "gpm_sm_util_pct", gpu, gpm_absent_texts) / 100.0


@point_quantity(unit="fraction")
def sm_occupancy_share(gpu_samples: Samples, t_measure: float, t_end: float, gpu: int = 0,
                       gpm_absent_texts: GpmTexts = None) -> float:
    """Mean share of the SMs' warp slots that held an active warp in the window, by GPM (0 to 1)."""
    return time_weighted_mean(gpu_samples, t_measure, t_end, "gpm_sm_occupancy_pct", gpu, gpm_absent_texts) / 100.0


@point_quantity(unit="B/s")
def dram_bytes_per_s(dram_bandwidth_share: float, peak_bandwidth: float) -> float:
    """Measured DRAM traffic: the GPM bandwidth share times the GPU's peak bandwidth (bytes/s)."""
    if not peak_bandwidth or peak_bandwidth <= 0:
        raise Absent("reason.no_peak_bandwidth", peak=peak_bandwidth)
    return dram_bandwidth_share * peak_bandwidth


@point_quantity(unit="B/s")
def nvlink_rx_bytes_per_s(gpu_samples: Samples, t_measure: float, t_end: float, gpu: int = 0,
                          gpm_absent_texts: GpmTexts = None) -> float:
    """Mean NVLink traffic into the GPU over all links in the window, by GPM (bytes/s)."""
    return time_weighted_mean(gpu_samples, t_measure, t_end, "gpm_nvlink_rx_mib_s", gpu, gpm_absent_texts) * MIB


@point_quantity(unit="B/s")
def nvlink_tx_bytes_per_s(gpu_samples: Samples, t_measure: float, t_end: float, gpu: int = 0,
                          gpm_absent_texts: GpmTexts = None) -> float:
    """Mean NVLink traffic out of the GPU over all links in the window, by GPM (bytes/s)."""
    return time_weighted_mean(gpu_samples, t_measure, t_end, "gpm_nvlink_tx_mib_s", gpu, gpm_absent_texts) * MIB


@point_quantity(unit="B/s")
def pcie_rx_bytes_per_s(gpu_samples: Samples, t_measure: float, t_end: float, gpu: int = 0,
                        gpm_absent_texts: GpmTexts = None) -> float:
    """Mean PCIe traffic into the GPU in the window, by GPM (bytes/s)."""
    return time_weighted_mean(gpu_samples, t_measure, t_end, "gpm_pcie_rx_mib_s", gpu, gpm_absent_texts) * MIB


@point_quantity(unit="B/s")
def pcie_tx_bytes_per_s(gpu_samples: Samples, t_measure: float, t_end: float, gpu: int = 0,
                        gpm_absent_texts: GpmTexts = None) -> float:
    """Mean PCIe traffic out of the GPU in the window, by GPM (bytes/s)."""
    return time_weighted_mean(gpu_samples, t_measure, t_end, "gpm_pcie_tx_mib_s", gpu, gpm_absent_texts) * MIB


@point_quantity(unit="fraction")
def power_peak_over_limit(power_peak_w: float, power_limit_w: float) -> float:
    """The highest power sample against the enforced limit: peak ÷ limit − 1 (positive: it passed the limit)."""
    if not power_limit_w or power_limit_w <= 0:
        raise Absent("reason.no_power_limit")
    return power_peak_w / power_limit_w - 1.0

# An NVIDIA DCGM exporter's page (dcgm.jsonl, a remote server's GPUs) is read as the GPU rows
# above through bundle/plausible.py's DCGM_FIELDS (each exporter name's row field and scale).


@lru_cache(maxsize=64)
def _table_maxima(name: str) -> Maxima:
    """The highest power a GPU named NAME may draw, from its rated power in the GPU table
    (report/data/gpus.toml); nothing when the table lacks it."""
    spec = lookup_gpu(name) if name else None
    return device_maxima(spec.power_limit_w if spec else None,
                         power_source="its rated power in the GPU table")


def _gpu_maxima(gpu: dict | None) -> Maxima:
    """The highest power and clocks the samples of a GPU the manifest describes (NVML's figures)
    may take, the GPU table's rated power where NVML stated no power limit."""
    if not isinstance(gpu, dict):
        return {}
    name = gpu.get("name")
    return {**_table_maxima(name if isinstance(name, str) else ""), **described_maxima(gpu)}


def plausible_gpu_rows(rows: Samples, gpus: Any) -> list[dict]:
    """gpu.jsonl's rows with a power or a clock above its GPU's maximum (`_gpu_maxima`, of the
    manifest's `gpus`) left out: a bundle recorded before the collector withheld them holds such
    values as numbers. A row with none is the row as read."""
    by_index = {g["index"]: _gpu_maxima(g) for g in gpus or () if isinstance(g, dict)
                and isinstance(g.get("index"), int)}
    out = []
    for row in rows:
        maxima = by_index.get(row.get("gpu", 0))
        bad = maxima and [f for f in maxima if isinstance(row.get(f), (int, float))
                          and field_problem(f, row[f], maxima)]
        out.append({**row, **dict.fromkeys(bad, None)} if bad else row)
    return out


def dcgm_gpu_rows(scrapes: Samples) -> list[dict]:
    """The exporter's scrapes as GPU rows, one per GPU (its `gpu` label) and answered scrape: the
    fields DCGM_FIELDS maps, a blank or a value out of its range or above its GPU's maximum (the
    page's own limits, else the GPU table's rated power for its `modelName`) left out; the
    profiling counters cover the interval since the previous answered scrape (DCGM averages them
    over its own sampling period within it)."""
    rows, last_t = [], None
    keys: dict[str, tuple[str, dict]] = {}     # each sample key parsed once: they repeat every scrape
    for s in scrapes:
        if not s.get("ok"):
            continue
        by_gpu: dict[int, dict] = {}
        stated = page_maxima(s.get("samples") or {})
        # read_s: the page was written at some moment within [t, t + read_s] (the scrape's dt).
        read = {"read_s": s["dt"]} if s.get("dt") is not None else {}
        for key, value in (s.get("samples") or {}).items():
            name, labels = keys.get(key) or keys.setdefault(key, split_key(key))
            if name not in DCGM_FIELDS or "gpu" not in labels or value is None:
                continue
            maxima = {**_table_maxima(labels.get("modelName", "")),
                      **stated.get((labels.get("endpoint", ""), labels["gpu"]), {})}
            if dcgm_blank(name, value) or dcgm_value_problem(name, value, maxima):
                continue    # no reading, or none the GPU can give (kept out by later collectors)
            field_name, scale = DCGM_FIELDS[name]
            row = by_gpu.setdefault(int(labels["gpu"]), {"t": s["t"], "gpu": int(labels["gpu"]), **read})
            row[field_name] = value * scale
        for row in by_gpu.values():
            if last_t is not None:
                row["gpm_interval_s"] = s["t"] - last_t
        rows += [by_gpu[g] for g in sorted(by_gpu)]
        last_t = s["t"]
    return rows


def dcgm_gpus(scrapes: Samples) -> list[dict]:
    """The GPUs an exporter's page describes: index, name (`modelName`) and UUID, in index order."""
    found: dict[int, dict] = {}
    for s in scrapes:
        for key in (s.get("samples") or {}) if s.get("ok") else ():
            name, labels = split_key(key)
            if name.startswith("DCGM_FI_") and "gpu" in labels:
                found.setdefault(int(labels["gpu"]), {"index": int(labels["gpu"]),
                                                      "name": labels.get("modelName", ""),
                                                      "uuid": labels.get("UUID", ""),
                                                      "source": "dcgm-exporter"})
        if found:
            break
    return [found[g] for g in sorted(found)]


# Tensor parallel: the engine's TP size and the all-reduce traffic it implies, against the
# links' measured traffic. Each layer all-reduces the hidden state twice (after attention and
# after the MLP); a ring all-reduce of M bytes over TP ranks sends 2·(TP−1)/TP × M from each
# GPU. So each processed token (prompt or output) costs every GPU
# 2·(TP−1)/TP × hidden × dtype bytes × 2 × layers bytes sent over its links.

TP_FLAGS = ("--tensor-parallel-size", "-tp")


def _tp_in_command(command: list[str] | str) -> int | None:
    """The --tensor-parallel-size (or -tp) a launch command gives, None when it gives none."""
    words = command.split() if isinstance(command, str) else [str(w) for w in command]
    for i, w in enumerate(words):
        flag, eq, value = w.partition("=")
        if flag in TP_FLAGS:
            text = value if eq else (words[i + 1] if i + 1 < len(words) else "")
            if not text.isdigit() or int(text) < 1:
                raise Absent("reason.tp_not_a_size", value=text)
            return int(text)
    return None


@point_quantity(unit="GPU")
def tensor_parallel_size(engine_command: list[str] | str | None = None,
                         log_args: dict | None = None) -> int:
    """The engine's tensor-parallel size: its launch command's --tensor-parallel-size, else the server log's non-default args, else vLLM's default of 1 where the command is known."""
    if engine_command:
        found = _tp_in_command(engine_command)
        if found is not None:
            return found
    if log_args and isinstance(log_args.get("tensor_parallel_size"), int):
        return log_args["tensor_parallel_size"]
    if engine_command or log_args is not None:
        return 1        # the command or the log's arguments are known and set no TP: vLLM's default
    raise Absent("reason.tp_unknown")


@point_quantity(unit="B/tok")
def allreduce_bytes_per_token(tensor_parallel_size: int, model_config: dict) -> float:
    """Bytes each GPU sends per processed token in the all-reduces tensor parallel implies: 2·(TP−1)/TP × hidden × dtype bytes × 2 per layer."""
    if tensor_parallel_size <= 1:
        raise Absent("reason.tp_one")
    from report.architecture.modelconfig import model_shape
    shape = model_shape(model_config)
    tp = tensor_parallel_size
    return 2 * (tp - 1) / tp * shape.hidden * shape.dtype_bytes * 2 * shape.layers


@point_quantity(unit="B/s")
def allreduce_bytes_per_s(allreduce_bytes_per_token: float, total_tok_s: float) -> float:
    """The all-reduce traffic each GPU should send at the point's token rate (prompt and output tokens per second)."""
    return allreduce_bytes_per_token * total_tok_s


@point_quantity(unit="×")
def nvlink_over_allreduce(allreduce_bytes_per_s: float, nvlink_tx_bytes_per_s: float) -> float:
    """Measured NVLink traffic out of the GPU over the all-reduce traffic tensor parallel predicts (1 = the links carried exactly the all-reduces)."""
    if allreduce_bytes_per_s <= 0:
        raise Absent("reason.no_token_processed")
    return nvlink_tx_bytes_per_s / allreduce_bytes_per_s


@point_quantity(unit="B")
def weight_bytes_per_gpu(weight_bytes: float, tensor_parallel_size: int) -> float:
    """The weights one GPU holds and rereads each step, the model's sharded by tensor parallel (bytes)."""
    return weight_bytes / tensor_parallel_size


def _kv_heads(model_config: dict) -> int:
    from report.architecture.modelconfig import model_shape
    return model_shape(model_config).kv_heads


@point_quantity(unit="head")
def kv_heads_per_gpu(tensor_parallel_size: int, model_config: dict) -> int:
    """The KV heads each GPU holds under tensor parallel: num_kv_heads ÷ TP, or one when there are fewer KV heads than GPUs (vLLM then replicates each head over TP ÷ num_kv_heads GPUs)."""
    heads, tp = _kv_heads(model_config), tensor_parallel_size
    if heads >= tp and heads % tp:
        raise Absent("reason.kv_heads_not_divisible", heads=heads, tp=tp)
    if heads < tp and tp % heads:
        raise Absent("reason.kv_heads_not_divisible", heads=heads, tp=tp)
    return max(1, heads // tp)


@point_quantity(unit="×")
def kv_head_replicas(tensor_parallel_size: int, model_config: dict, kv_heads_per_gpu: int) -> float:
    """How many GPUs hold a copy of each KV head: 1 when the heads divide among the GPUs, TP ÷ num_kv_heads when there are fewer heads than GPUs."""
    return kv_heads_per_gpu * tensor_parallel_size / _kv_heads(model_config)


@point_quantity(unit="B")
def kv_bytes_per_token_per_gpu(kv_bytes_per_token: float, kv_heads_per_gpu: int, model_config: dict) -> float:
    """The KV cache bytes one token takes on each GPU: its share of the token's KV heads (kv_bytes_per_token ÷ TP when the heads divide; one head's bytes when replicated)."""
    return kv_bytes_per_token * kv_heads_per_gpu / _kv_heads(model_config)


@point_quantity(unit="fraction")
def weight_read_bandwidth_share(weight_bytes_per_gpu: float, engine_steps_per_s: float,
                                peak_bandwidth: float) -> float:
    """The share of one GPU's peak memory bandwidth its shard of the weights takes, reread once every engine step (a floor under its MBU)."""
    if peak_bandwidth <= 0:
        raise Absent("reason.denominator_zero")
    return weight_bytes_per_gpu * engine_steps_per_s / peak_bandwidth


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


# One row per GPU: each sampled GPU's values over the point's window (per="gpu": key
# p.<point>.gpu<k>.<name>, one for each GPU `gpu_items` names).


def gpu_items(samples: Samples | None) -> dict[str, dict[str, int]]:
    """Each GPU of the round's samples as an item ("gpu1" -> {"gpu": 1}), in index order; none without samples."""
    return {f"gpu{g}": {"gpu": g} for g in sorted({s.get("gpu", 0) for s in samples or ()})}


bound_quantity("point", "gpu_row_power_median_w", median_power_w, unit="W", per="gpu", samples="gpu_samples",
               t_start="t_measure")


@point_quantity(unit="MHz", per="gpu")
def gpu_row_sm_clock_load_mhz(gpu_samples: Samples, t_measure: float, t_end: float, gpu: int) -> float:
    """This GPU's median SM clock over the window's samples with utilisation at 50 % or more (MHz)."""
    return median_sm_clock_under_load_mhz(gpu_samples, t_measure, t_end, gpu)


bound_quantity("point", "gpu_row_util_median_pct", median_gpu_util_pct, unit="%", per="gpu", samples="gpu_samples",
               t_start="t_measure")


@point_quantity(unit="B", per="gpu")
def gpu_row_mem_used_bytes(gpu_samples: Samples, t_measure: float, t_end: float, gpu: int) -> float:
    """This GPU's median memory in use in the window (B)."""
    return float(statistics.median(_field(gpu_samples, t_measure, t_end, gpu, "mem_used_bytes")))


bound_quantity("point", "gpu_row_temperature_max_c", max_temperature_c, unit="°C", per="gpu", samples="gpu_samples",
               t_start="t_measure")


@point_quantity(unit="fraction", per="gpu")
def gpu_row_dram_bandwidth_share(gpu_samples: Samples, t_measure: float, t_end: float, gpu: int,
                                 gpm_absent_texts: GpmTexts = None) -> float:
    """This GPU's mean share of its peak DRAM bandwidth in the window, by GPM (0 to 1)."""
    return dram_bandwidth_share(gpu_samples, t_measure, t_end, gpu, gpm_absent_texts)


@point_quantity(unit="fraction", per="gpu")
def gpu_row_tensor_active_share(gpu_samples: Samples, t_measure: float, t_end: float, gpu: int,
                                gpm_absent_texts: GpmTexts = None) -> float:
    """This GPU's mean share of time its SMs ran any tensor-core operation in the window, by GPM (0 to 1)."""
    return tensor_active_share(gpu_samples, t_measure, t_end, gpu, gpm_absent_texts)


@point_quantity(unit="fraction", per="gpu")
def gpu_row_sm_active_share(gpu_samples: Samples, t_measure: float, t_end: float, gpu: int,
                            gpm_absent_texts: GpmTexts = None) -> float:
    """This GPU's mean share of busy SMs in the window, by GPM (0 to 1)."""
    return sm_active_share(gpu_samples, t_measure, t_end, gpu, gpm_absent_texts)


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
