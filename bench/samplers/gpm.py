"""GPM (GPU performance monitoring) counters through NVML, on Hopper and later GPUs.

Each counter is NVML's own figure over the interval between two GPM samples of one GPU (a
share in %, a bandwidth in MiB/s), so a gpu.jsonl row holds them only from a GPU's second
sample on, with the interval's length. A GPU without GPM, a driver or nvidia-ml-py without
the API, or a refusal gives a reason in words and no counter fields; a counter NVML refuses
(or gives as NaN) on one sample is null and named in that row's `unsupported`, never 0.
"""

from __future__ import annotations

from typing import Any

from bundle.gpu_fields import GPM_FIELDS
from bundle.plausible import field_problem

# gpu.jsonl field -> the pynvml constant naming its GPM metric (nvml.h's nvmlGpmMetricId_t).
GPM_METRIC_NAMES = {
    "gpm_dram_bw_util_pct": "NVML_GPM_METRIC_DRAM_BW_UTIL",
    "gpm_any_tensor_util_pct": "NVML_GPM_METRIC_ANY_TENSOR_UTIL",
    "gpm_hmma_tensor_util_pct": "NVML_GPM_METRIC_HMMA_TENSOR_UTIL",
    "gpm_sm_util_pct": "NVML_GPM_METRIC_SM_UTIL",
    "gpm_sm_occupancy_pct": "NVML_GPM_METRIC_SM_OCCUPANCY",
    "gpm_nvlink_rx_mib_s": "NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC",
    "gpm_nvlink_tx_mib_s": "NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC",
    "gpm_pcie_rx_mib_s": "NVML_GPM_METRIC_PCIE_RX_PER_SEC",
    "gpm_pcie_tx_mib_s": "NVML_GPM_METRIC_PCIE_TX_PER_SEC",
}
assert tuple(GPM_METRIC_NAMES) == GPM_FIELDS[1:]

# What the pynvml module must have for GPM counters to be read.
_API = ("nvmlGpmQueryDeviceSupport", "nvmlGpmSampleAlloc", "nvmlGpmSampleGet",
        "nvmlGpmSampleFree", "nvmlGpmMetricsGet", "c_nvmlGpmMetricsGet_t",
        "NVML_GPM_METRICS_GET_VERSION", *GPM_METRIC_NAMES.values())


def gpm_absent_reason(nv: Any, handle: Any) -> str | None:
    """Why GPM counters cannot be read on HANDLE's GPU, in words; None when they can."""
    missing = [name for name in _API if not hasattr(nv, name)]
    if missing:
        return f"the installed nvidia-ml-py has no GPM API ({missing[0]} is missing)"
    try:
        if not nv.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice:
            return "NVML says this GPU does not support GPM counters (they need a Hopper or later GPU)"
        _probe(nv, handle)
    except nv.NVMLError as e:
        return refusal_text(nv, e)
    return None


def _probe(nv: Any, handle: Any) -> None:
    """Take one GPM sample and free it: raises what NVML raises when sampling is refused."""
    sample = nv.nvmlGpmSampleAlloc()
    try:
        nv.nvmlGpmSampleGet(handle, sample)
    finally:
        nv.nvmlGpmSampleFree(sample)


def refusal_text(nv: Any, e: Exception) -> str:
    """An NVML error on a GPM call, in words."""
    if isinstance(e, getattr(nv, "NVMLError_NoPermission", ())):
        return f"GPM counters are not permitted for this process ({e})"
    if isinstance(e, getattr(nv, "NVMLError_FunctionNotFound", ())):
        return f"the NVML library (driver) has no GPM API ({e})"
    if isinstance(e, getattr(nv, "NVMLError_NotSupported", ())):
        return f"NVML does not support GPM counters on this GPU ({e})"
    return f"NVML refused GPM counters: {e}"


class GpmStream:
    """One GPU's GPM samples, two kept in turn: each read gives the counters since the last."""

    def __init__(self, nv: Any, handle: Any) -> None:
        self.nv, self.handle = nv, handle
        self.ids = [getattr(nv, c) for c in GPM_METRIC_NAMES.values()]
        self.prev = nv.nvmlGpmSampleAlloc()
        self.cur = nv.nvmlGpmSampleAlloc()
        self.t_prev: float | None = None

    def read(self, t: float) -> tuple[dict[str, Any], list[str], dict[str, str]]:
        """(fields, unsupported, errors) for a row at T; no fields on the first good sample."""
        nv = self.nv
        try:
            nv.nvmlGpmSampleGet(self.handle, self.cur)
        except nv.NVMLError as e:
            return _refused_all(str(e)) if self.t_prev is not None else ({}, [], {})
        if self.t_prev is None:
            out: tuple[dict[str, Any], list[str], dict[str, str]] = ({}, [], {})
        else:
            out = self._metrics(round(t - self.t_prev, 6))
        self.prev, self.cur, self.t_prev = self.cur, self.prev, t
        return out

    def _metrics(self, interval_s: float) -> tuple[dict[str, Any], list[str], dict[str, str]]:
        """The counters between the previous and the current sample."""
        nv = self.nv
        mg = nv.c_nvmlGpmMetricsGet_t()
        mg.version = nv.NVML_GPM_METRICS_GET_VERSION
        mg.numMetrics = len(self.ids)
        mg.sample1, mg.sample2 = self.prev, self.cur
        for i, metric_id in enumerate(self.ids):
            mg.metrics[i].metricId = metric_id
        try:
            nv.nvmlGpmMetricsGet(mg)
        except nv.NVMLError as e:
            return _refused_all(str(e), interval_s)
        fields: dict[str, Any] = {"gpm_interval_s": interval_s}
        unsupported: list[str] = []
        errors: dict[str, str] = {}
        for i, name in enumerate(GPM_METRIC_NAMES):
            value, problem = _metric_value(nv, mg.metrics[i], name)
            fields[name] = value
            if value is None:
                unsupported.append(name)
                if problem:
                    errors[name] = problem
        return fields, unsupported, errors

    def close(self) -> None:
        """Free both GPM samples."""
        for sample in (self.prev, self.cur):
            try:
                self.nv.nvmlGpmSampleFree(sample)
            except Exception:  # freeing is best effort; no sample depends on it
                pass


def _metric_value(nv: Any, m: Any, name: str) -> tuple[float | None, str | None]:
    """A metric's value as gpu.jsonl's field NAME, or None with why in words: NVML's error (None
    for plain 'not supported'), or a value that is no measurement (not finite, out of range)."""
    if m.nvmlReturn != 0:
        refused = m.nvmlReturn == getattr(nv, "NVML_ERROR_NOT_SUPPORTED", 3)
        return None, None if refused else str(nv.NVMLError(m.nvmlReturn))
    value = float(m.value)
    # Non-finite values were seen on an H200 for DRAM bandwidth over a 59 ms interval.
    problem = field_problem(name, value)
    if problem:
        return None, f"NVML gave {problem}"
    return value, None


def _refused_all(text: str, interval_s: float | None = None):
    """Every counter null, named unsupported, with NVML's error."""
    names = list(GPM_METRIC_NAMES)
    fields: dict[str, Any] = {"gpm_interval_s": interval_s, **{n: None for n in names}}
    return fields, names, {n: text for n in names}


def open_streams(nv: Any, handles: list[Any]) -> list[GpmStream | None]:
    """A GpmStream per GPU that can give GPM counters, None for one that cannot."""
    out: list[GpmStream | None] = []
    for h in handles:
        try:
            out.append(GpmStream(nv, h) if gpm_absent_reason(nv, h) is None else None)
        except Exception:  # a GPU whose samples cannot be allocated is sampled without GPM
            out.append(None)
    return out


def close_streams(streams: list[GpmStream | None]) -> None:
    """Free every stream's GPM samples."""
    for s in streams:
        if s is not None:
            s.close()
