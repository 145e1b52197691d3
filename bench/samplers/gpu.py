"""GPU telemetry through NVML: a description of each GPU and raw per-second samples.

Invariants: a sample holds only what NVML reported at that instant (no averages of ours;
the GPM counters of bench/samplers/gpm.py are NVML's own figures over the interval since the GPU's
previous sample, and the row says how long it was); a field
NVML refuses is null and named in the sample's `unsupported` list, never 0; power is in W,
clocks in MHz, memory in bytes and energy as NVML's raw counter in mJ (it counts from driver
load, so only differences mean anything). No GPU, no driver or no NVML library is not an
error: describe_gpus says why in words and the sampler records nothing.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Callable

try:  # the package is a dependency, but a missing one must read as "no NVML", not a crash
    import pynvml
except ImportError:  # pragma: no cover - exercised by monkeypatching _nvml in tests
    pynvml = None

from bench.samplers.base import AT_ROUND, Context, Sampler, Signal
from bench.samplers.gpm import close_streams, gpm_absent_reason, open_streams
from bundle.gpu_fields import (  # noqa: F401
    GPM_FIELDS,
    SAMPLE_FIELDS,
    decode_throttle_reasons,
    reason_bits,
)
from bundle.plausible import Maxima, described_maxima, field_problem


def _nvml():
    """The pynvml module, or None when it is not installed (a seam for tests)."""
    return pynvml


def _text(v: Any) -> Any:
    return v.decode() if isinstance(v, bytes) else v


def _open() -> tuple[list[Any], str | None]:
    """Initialise NVML and return one handle per GPU, or ([], reason); never raises."""
    nv = _nvml()
    if nv is None:
        return [], "the NVML Python bindings (nvidia-ml-py) are not installed"
    try:
        nv.nvmlInit()
    except nv.NVMLError as e:
        if isinstance(e, getattr(nv, "NVMLError_LibraryNotFound", ())):
            return [], f"no NVML library (libnvidia-ml.so): no NVIDIA driver on this machine ({e})"
        if isinstance(e, getattr(nv, "NVMLError_DriverNotLoaded", ())):
            return [], f"the NVIDIA driver is not loaded ({e})"
        return [], f"NVML failed to initialise: {e}"
    except OSError as e:
        return [], f"NVML could not be loaded: {e}"
    try:
        n = nv.nvmlDeviceGetCount()
        if n == 0:
            nv.nvmlShutdown()
            return [], "NVML found no GPU on this machine"
        return [nv.nvmlDeviceGetHandleByIndex(i) for i in range(n)], None
    except nv.NVMLError as e:
        _close()
        return [], f"NVML could not list the GPUs: {e}"


def _close() -> None:
    nv = _nvml()
    try:
        nv.nvmlShutdown()
    except Exception:  # shutting down is best effort; a failure here changes no sample
        pass


def _read(fields: dict, unsupported: list, errors: dict, name: str, fn: Callable[[], Any],
          maxima: Maxima | None = None):
    """Store fn() under NAME, or null plus NAME in unsupported when NVML refuses it or gives a
    value that is no measurement of it (bundle/plausible.py: a clock at 0, a share past 100 %,
    a power or a clock above the device's MAXIMA)."""
    nv = _nvml()
    try:
        fields[name] = fn()
    except nv.NVMLError as e:
        fields[name] = None
        unsupported.append(name)
        if not isinstance(e, nv.NVMLError_NotSupported):
            errors[name] = str(e)
        return
    _keep_plausible(fields, unsupported, errors, name, maxima)


def _keep_plausible(fields: dict, unsupported: list, errors: dict, name: str,
                    maxima: Maxima | None = None) -> None:
    """Null FIELDS[NAME], naming why, when it is a number no GPU gives, or this one cannot (MAXIMA)."""
    v = fields[name]
    if (isinstance(v, (int, float)) and not isinstance(v, bool)
            and (problem := field_problem(name, v, maxima))):
        fields[name] = None
        unsupported.append(name)
        errors[name] = f"NVML gave {problem}"


def device_maxima_of(handle: Any) -> Maxima:
    """The highest power and clocks the GPU's samples may take, from what NVML states of it (its
    power limits and maximum clocks; a figure NVML refuses bounds nothing)."""
    nv = _nvml()
    desc: dict[str, Any] = {}
    reads = (("power_limit_w", lambda: nv.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0),
             ("power_limit_default_w", lambda: nv.nvmlDeviceGetPowerManagementDefaultLimit(handle) / 1000.0),
             ("power_limit_range_w", lambda: [x / 1000.0 for x in
                                              nv.nvmlDeviceGetPowerManagementLimitConstraints(handle)]),
             ("max_sm_clock_mhz", lambda: nv.nvmlDeviceGetMaxClockInfo(handle, nv.NVML_CLOCK_SM)),
             ("max_mem_clock_mhz", lambda: nv.nvmlDeviceGetMaxClockInfo(handle, nv.NVML_CLOCK_MEM)))
    for name, fn in reads:
        try:
            desc[name] = fn()
        except Exception:  # NVML refused it (or the bindings lack the call): it bounds nothing
            pass
    return described_maxima(desc)


def read_gpu_sample(handle: Any, index: int, maxima: Maxima | None = None) -> dict[str, Any]:
    """One raw NVML sample of one GPU: the SAMPLE_FIELDS plus `gpu` and `unsupported`; a power or
    a clock above the GPU's MAXIMA (`device_maxima_of`) is null, with why."""
    nv = _nvml()
    f: dict[str, Any] = {"gpu": index}
    unsupported: list[str] = []
    errors: dict[str, str] = {}

    def read(name, fn):
        _read(f, unsupported, errors, name, fn, maxima)

    read("power_w", lambda: nv.nvmlDeviceGetPowerUsage(handle) / 1000.0)
    read("power_limit_w", lambda: nv.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0)
    read("temperature_c", lambda: nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU))
    read("sm_clock_mhz", lambda: nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM))
    read("mem_clock_mhz", lambda: nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_MEM))
    try:
        util = nv.nvmlDeviceGetUtilizationRates(handle)
        f["gpu_util_pct"], f["mem_util_pct"] = util.gpu, util.memory
        for name in ("gpu_util_pct", "mem_util_pct"):
            _keep_plausible(f, unsupported, errors, name, maxima)
    except nv.NVMLError as e:
        for name in ("gpu_util_pct", "mem_util_pct"):
            f[name] = None
            unsupported.append(name)
            if not isinstance(e, nv.NVMLError_NotSupported):
                errors[name] = str(e)
    read("mem_used_bytes", lambda: nv.nvmlDeviceGetMemoryInfo(handle).used)
    read("energy_mj", lambda: nv.nvmlDeviceGetTotalEnergyConsumption(handle))
    read("throttle_reasons", lambda: _clock_event_reasons(nv, handle))
    read("pstate", lambda: nv.nvmlDeviceGetPerformanceState(handle))
    f["unsupported"] = unsupported
    if errors:
        f["errors"] = errors
    return f


def _clock_event_reasons(nv, handle) -> int:
    """The raw clock event reason mask; the older 'throttle reasons' call where the new is absent."""
    fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
    if fn is not None:
        try:
            return int(fn(handle))
        except nv.NVMLError_FunctionNotFound:
            pass
    return int(nv.nvmlDeviceGetCurrentClocksThrottleReasons(handle))


def describe_gpus() -> tuple[list[dict[str, Any]], str | None]:
    """Per GPU: index, name, uuid, driver and NVML versions, memory, power limits, max clocks.

    Returns ([], reason in words) when there is no NVML library, no driver or no GPU.
    """
    handles, reason = _open()
    if not handles:
        return [], reason
    nv = _nvml()
    try:
        common: dict[str, Any] = {}
        unsupported: list[str] = []
        errors: dict[str, str] = {}
        _read(common, unsupported, errors, "driver_version",
              lambda: _text(nv.nvmlSystemGetDriverVersion()))
        _read(common, unsupported, errors, "nvml_version",
              lambda: _text(nv.nvmlSystemGetNVMLVersion()))
        _read(common, unsupported, errors, "cuda_driver_version",
              lambda: _cuda_version(nv.nvmlSystemGetCudaDriverVersion()))
        gpus = []
        for i, h in enumerate(handles):
            g: dict[str, Any] = {"index": i}
            u: list[str] = list(unsupported)
            err: dict[str, str] = dict(errors)

            def read(name, fn, g=g, u=u, err=err):
                _read(g, u, err, name, fn)

            read("name", lambda h=h: _text(nv.nvmlDeviceGetName(h)))
            read("uuid", lambda h=h: _text(nv.nvmlDeviceGetUUID(h)))
            read("pci_bus_id", lambda h=h: _text(nv.nvmlDeviceGetPciInfo(h).busId))
            g.update(common)
            read("memory_total_bytes", lambda h=h: nv.nvmlDeviceGetMemoryInfo(h).total)
            read("power_limit_w", lambda h=h: nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0)
            read("power_limit_default_w",
                 lambda h=h: nv.nvmlDeviceGetPowerManagementDefaultLimit(h) / 1000.0)
            read("power_limit_range_w", lambda h=h: [
                x / 1000.0 for x in nv.nvmlDeviceGetPowerManagementLimitConstraints(h)])
            read("max_sm_clock_mhz", lambda h=h: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM))
            read("max_mem_clock_mhz",
                 lambda h=h: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_MEM))
            read("compute_capability",
                 lambda h=h: ".".join(map(str, nv.nvmlDeviceGetCudaComputeCapability(h))))
            read("supported_throttle_reasons", lambda h=h: _supported_reasons(nv, h))
            g["gpm_absent_reason"] = gpm_absent_reason(nv, h)
            g["gpm_supported"] = g["gpm_absent_reason"] is None
            g["unsupported"] = u
            if err:
                g["errors"] = err
            gpus.append(g)
        return gpus, None
    except Exception as e:  # describe_gpus must never raise: the run goes on without GPU data
        return [], f"NVML failed while describing the GPUs: {type(e).__name__}: {e}"
    finally:
        _close()


def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{v % 1000 // 10}"


def _supported_reasons(nv, handle) -> int:
    fn = getattr(nv, "nvmlDeviceGetSupportedClocksEventReasons", None)
    if fn is not None:
        try:
            return int(fn(handle))
        except nv.NVMLError_FunctionNotFound:
            pass
    return int(nv.nvmlDeviceGetSupportedClocksThrottleReasons(handle))


class GpuSampler(Sampler):
    """Samples every GPU through NVML at a fixed interval into a bundle's `gpu` stream.

    After a run, `absent_reason` says in words why nothing was sampled (None when it was).
    """

    stream, starts = "gpu", AT_ROUND

    def __init__(self, interval_s: float = 1.0) -> None:
        self.interval_s = interval_s
        self.absent_reason: str | None = None
        self.samples = 0
        self.maxima: list[Maxima] = []    # each GPU's, read once when the GPUs are opened

    def _sample_all(self, handles: list[Any], writer, gpm: list) -> list[dict[str, Any]]:
        if len(self.maxima) != len(handles):
            self.maxima = [device_maxima_of(h) for h in handles]
        out = []
        for i, h in enumerate(handles):
            t = writer.now()  # the instant the reads of this GPU begin
            counters = gpm[i].read(t) if gpm[i] is not None else ({}, [], {})
            out.append(with_counters({"t": round(t, 6), **read_gpu_sample(h, i, self.maxima[i])},
                                     *counters))
        return out

    async def sample(self, ctx: Context, stop: asyncio.Event) -> None:
        """Sample every interval until STOP is set (the round's `gpu` stream)."""
        await self.run(ctx.writer, self.interval_s, stop)

    async def run(self, writer, interval_s: float = 1.0,
                  stop: asyncio.Event | None = None) -> None:
        """Sample until STOP is set (or the task is cancelled); NVML calls run in a thread."""
        handles, reason = await asyncio.to_thread(_open)
        if not handles:
            self.absent_reason = reason
            return
        stop = stop or asyncio.Event()
        gpm = await asyncio.to_thread(open_streams, _nvml(), handles)
        try:
            next_t = time.monotonic()
            while not stop.is_set():
                for rec in await asyncio.to_thread(self._sample_all, handles, writer, gpm):
                    writer.append(self.stream, rec)
                    self.samples += 1
                next_t = _next_tick(next_t, interval_s)
                try:
                    await asyncio.wait_for(stop.wait(), max(0.0, next_t - time.monotonic()))
                except asyncio.TimeoutError:
                    pass
        finally:
            close_streams(gpm)
            _close()

    def sample_for(self, seconds: float, interval_s: float, writer,
                   stop: threading.Event | None = None) -> int:
        """Sample synchronously for SECONDS (or until STOP is set); returns the samples written."""
        handles, reason = _open()
        if not handles:
            self.absent_reason = reason
            return 0
        stop = stop or threading.Event()
        n = 0
        gpm = open_streams(_nvml(), handles)
        try:
            end = time.monotonic() + seconds
            next_t = time.monotonic()
            while not stop.is_set() and time.monotonic() < end:
                for rec in self._sample_all(handles, writer, gpm):
                    writer.append(self.stream, rec)
                    n += 1
                next_t = _next_tick(next_t, interval_s)
                stop.wait(max(0.0, min(next_t, end) - time.monotonic()))
        finally:
            close_streams(gpm)
            _close()
        self.samples += n
        return n


def with_counters(rec: dict[str, Any], fields: dict[str, Any], unsupported: list[str],
                  errors: dict[str, str]) -> dict[str, Any]:
    """REC with the GPM FIELDS before its `unsupported` list, which takes their refusals."""
    if not fields:
        return rec
    tail = {"unsupported": rec.pop("unsupported") + unsupported}
    err = {**rec.pop("errors", {}), **errors}
    return {**rec, **fields, **tail, **({"errors": err} if err else {})}


def _next_tick(prev: float, interval_s: float) -> float:
    """The next tick on a fixed grid; ticks missed while a read was slow are skipped, not bunched."""
    nxt = prev + interval_s
    now = time.monotonic()
    if nxt < now:
        nxt += ((now - nxt) // interval_s + 1) * interval_s
    return nxt


def gpu_sampler(sampler: Any, gpus: bool) -> GpuSampler | None:
    """NVML's samples of the round's GPUs, unless the plan turns them off or there are none."""
    return GpuSampler(sampler.gpu_interval_s) if sampler.gpu and gpus else None


SIGNALS = (Signal("gpu", gpu_sampler),)
