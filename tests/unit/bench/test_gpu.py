"""bench/samplers/gpu.py: NVML description and sampling, with no GPU here and against a fake NVML."""

from __future__ import annotations

import asyncio
import json
import math
import types

import pynvml
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.samplers import gpm, gpu
from bundle.store.reader import read_bundle
from bundle.store.writer import BundleWriter


def writer_at(tmp_path):
    return BundleWriter(tmp_path / "b", {"tool": {"name": "test"}, "engine": None, "plan": {}})


# --- this machine: no NVML library, no GPU ------------------------------------------------

def test_describe_gpus_without_gpu_returns_empty_and_reason():
    gpus, reason = gpu.describe_gpus()
    assert gpus == []
    assert isinstance(reason, str) and reason
    assert "NVML" in reason or "driver" in reason


def test_describe_gpus_without_python_bindings(monkeypatch):
    monkeypatch.setattr(gpu, "pynvml", None)
    gpus, reason = gpu.describe_gpus()
    assert gpus == [] and "nvidia-ml-py" in reason


def test_sampler_without_library_does_not_raise(tmp_path):
    w = writer_at(tmp_path)
    s = gpu.GpuSampler()
    asyncio.run(asyncio.wait_for(s.run(w, 0.01, asyncio.Event()), 5))
    assert s.absent_reason and s.samples == 0
    assert s.sample_for(0.05, 0.01, w) == 0
    w.close("complete")
    assert not (tmp_path / "b" / "gpu.jsonl").exists()


def test_sampler_without_python_bindings(monkeypatch, tmp_path):
    monkeypatch.setattr(gpu, "pynvml", None)
    w = writer_at(tmp_path)
    s = gpu.GpuSampler()
    asyncio.run(s.run(w, 0.01, asyncio.Event()))
    assert "nvidia-ml-py" in s.absent_reason


# --- decoding ------------------------------------------------------------------------------

def test_decode_throttle_reasons_bits():
    assert gpu.decode_throttle_reasons(0) == []
    assert gpu.decode_throttle_reasons(None) == []
    assert gpu.decode_throttle_reasons(0x4) == ["sw_power_cap"]
    assert gpu.decode_throttle_reasons(0x1) == ["gpu_idle"]
    assert gpu.decode_throttle_reasons(0x1FF) == [
        "gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown", "sync_boost",
        "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
        "display_clock_setting"]
    assert gpu.decode_throttle_reasons(0x4 | 0x40 | 0x10000) == [
        "sw_power_cap", "hw_thermal_slowdown", "unknown_0x10000"]


def test_decode_uses_pynvml_constants():
    bits = dict((name, bit) for bit, name in gpu.reason_bits())
    assert bits["sw_power_cap"] == pynvml.nvmlClocksEventReasonSwPowerCap
    assert bits["gpu_idle"] == pynvml.nvmlClocksEventReasonGpuIdle
    assert bits["hw_power_brake_slowdown"] == pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown
    assert bits["display_clock_setting"] == pynvml.nvmlClocksEventReasonDisplayClockSetting


# --- a fake NVML with one GPU ------------------------------------------------------------

class FakeNvml(types.SimpleNamespace):
    """Enough of pynvml for bench/samplers/gpu.py: one H200-like GPU, temperature not supported."""

    def __init__(self, gpus=1, temperature_supported=False, new_reasons_api=True):
        super().__init__()
        self.NVMLError = pynvml.NVMLError
        self.NVMLError_NotSupported = pynvml.NVMLError_NotSupported
        self.NVMLError_FunctionNotFound = pynvml.NVMLError_FunctionNotFound
        self.NVMLError_LibraryNotFound = pynvml.NVMLError_LibraryNotFound
        self.NVMLError_DriverNotLoaded = pynvml.NVMLError_DriverNotLoaded
        self.NVML_TEMPERATURE_GPU = 0
        self.NVML_CLOCK_SM, self.NVML_CLOCK_MEM = 1, 2
        self.gpus, self.inits, self.energy = gpus, 0, 1_000_000
        self.temperature_supported = temperature_supported
        if new_reasons_api:
            self.nvmlDeviceGetCurrentClocksEventReasons = lambda h: 0x4

    def nvmlInit(self):
        self.inits += 1

    def nvmlShutdown(self):
        self.inits -= 1

    def nvmlDeviceGetCount(self):
        return self.gpus

    def nvmlDeviceGetHandleByIndex(self, i):
        return f"h{i}"

    def nvmlSystemGetDriverVersion(self):
        return "580.159.04"

    def nvmlSystemGetNVMLVersion(self):
        return b"13.580.159.04"

    def nvmlSystemGetCudaDriverVersion(self):
        return 13000

    def nvmlDeviceGetName(self, h):
        return "NVIDIA H200"

    def nvmlDeviceGetUUID(self, h):
        return "GPU-" + h

    def nvmlDeviceGetPciInfo(self, h):
        return types.SimpleNamespace(busId="00000000:00:05.0")

    def nvmlDeviceGetMemoryInfo(self, h):
        return types.SimpleNamespace(total=150_754_820_096, used=1_000_000)

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return 700_000

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h):
        return 700_000

    def nvmlDeviceGetPowerManagementLimitConstraints(self, h):
        raise pynvml.NVMLError_NoPermission()

    def nvmlDeviceGetMaxClockInfo(self, h, c):
        return 1980 if c == 1 else 3201

    def nvmlDeviceGetCudaComputeCapability(self, h):
        return (9, 0)

    def nvmlDeviceGetSupportedClocksThrottleReasons(self, h):
        return 0x1FF

    def nvmlDeviceGetPowerUsage(self, h):
        return 690_500

    def nvmlDeviceGetTemperature(self, h, sensor):
        if not self.temperature_supported:
            raise pynvml.NVMLError_NotSupported()
        return 55

    def nvmlDeviceGetClockInfo(self, h, c):
        return 1500 if c == 1 else 3201

    def nvmlDeviceGetUtilizationRates(self, h):
        return types.SimpleNamespace(gpu=100, memory=40)

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        self.energy += 690_500
        return self.energy

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h):
        return 0x1

    def nvmlDeviceGetPerformanceState(self, h):
        return 0


def test_read_gpu_sample_marks_refused_fields_null(monkeypatch):
    fake = FakeNvml()
    monkeypatch.setattr(gpu, "pynvml", fake)
    s = gpu.read_gpu_sample("h0", 0)
    assert s["gpu"] == 0
    assert set(gpu.SAMPLE_FIELDS) <= set(s)
    assert s["power_w"] == 690.5 and s["power_limit_w"] == 700.0
    assert s["temperature_c"] is None and s["unsupported"] == ["temperature_c"]
    assert "errors" not in s  # NotSupported is expected, not an error
    assert s["throttle_reasons"] == 0x4 and s["pstate"] == 0
    assert s["sm_clock_mhz"] == 1500 and s["mem_clock_mhz"] == 3201
    assert s["gpu_util_pct"] == 100 and s["mem_used_bytes"] == 1_000_000


def test_a_value_no_gpu_gives_is_null_with_why_never_a_number(monkeypatch):
    fake = FakeNvml()
    fake.nvmlDeviceGetClockInfo = lambda h, c: 0 if c == 1 else 3201      # an SM clock at 0 MHz
    fake.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=250, memory=40)
    monkeypatch.setattr(gpu, "pynvml", fake)
    s = gpu.read_gpu_sample("h0", 0)
    assert s["sm_clock_mhz"] is None and s["gpu_util_pct"] is None
    assert s["mem_clock_mhz"] == 3201 and s["mem_util_pct"] == 40
    assert s["unsupported"] == ["temperature_c", "sm_clock_mhz", "gpu_util_pct"]
    assert "sm_clock_mhz range (0" in s["errors"]["sm_clock_mhz"]
    assert s["errors"]["gpu_util_pct"].startswith("NVML gave 250, outside the gpu_util_pct range")


def test_a_power_or_clock_above_the_devices_maximum_is_null_with_why(monkeypatch, tmp_path):
    fake = FakeNvml()
    fake.nvmlDeviceGetPowerUsage = lambda h: 5_000_000                      # 5,000 W on a 700 W board
    fake.nvmlDeviceGetClockInfo = lambda h, c: 2600 if c == 1 else 3201     # past its 1,980 MHz
    monkeypatch.setattr(gpu, "pynvml", fake)
    maxima = gpu.device_maxima_of("h0")
    s = gpu.read_gpu_sample("h0", 0, maxima)
    assert s["power_w"] is None and s["sm_clock_mhz"] is None and s["mem_clock_mhz"] == 3201
    assert s["unsupported"] == ["power_w", "temperature_c", "sm_clock_mhz"]
    assert s["errors"]["power_w"] == ("NVML gave 5000 W, above the device's maximum power_w of "
                                      "1050 W (1.5 x its highest power limit, 700 W)")
    assert "above the device's maximum sm_clock_mhz of 2079 MHz" in s["errors"]["sm_clock_mhz"]
    # Just under each maximum is a measurement; without maxima only the impossible is refused.
    fake.nvmlDeviceGetPowerUsage = lambda h: 1_050_000
    fake.nvmlDeviceGetClockInfo = lambda h, c: 2079 if c == 1 else 3201
    ok = gpu.read_gpu_sample("h0", 0, maxima)
    assert ok["power_w"] == 1050.0 and ok["sm_clock_mhz"] == 2079
    fake.nvmlDeviceGetPowerUsage = lambda h: 5_000_000
    assert gpu.read_gpu_sample("h0", 0)["power_w"] == 5000.0
    # The sampler reads each GPU's maxima and the bundle holds no such number.
    w = writer_at(tmp_path)
    assert gpu.GpuSampler().sample_for(0.05, 0.01, w) >= 1
    w.close("complete")
    rows = read_bundle(tmp_path / "b").gpu
    assert rows and all(r["power_w"] is None and "1050 W" in r["errors"]["power_w"] for r in rows)


def test_a_maximum_nvml_refuses_bounds_nothing(monkeypatch):
    fake = FakeNvml()

    def refused(*a):
        raise pynvml.NVMLError_NotSupported()

    fake.nvmlDeviceGetMaxClockInfo = refused
    fake.nvmlDeviceGetEnforcedPowerLimit = fake.nvmlDeviceGetPowerManagementDefaultLimit = refused
    monkeypatch.setattr(gpu, "pynvml", fake)
    assert gpu.device_maxima_of("h0") == {}


def test_read_gpu_sample_falls_back_to_throttle_reasons(monkeypatch):
    monkeypatch.setattr(gpu, "pynvml", FakeNvml(new_reasons_api=False))
    assert gpu.read_gpu_sample("h0", 0)["throttle_reasons"] == 0x1


def test_read_gpu_sample_other_error_is_kept_in_words(monkeypatch):
    fake = FakeNvml(temperature_supported=True)

    def lost(h):
        raise pynvml.NVMLError_GpuIsLost()

    fake.nvmlDeviceGetPowerUsage = lost
    monkeypatch.setattr(gpu, "pynvml", fake)
    s = gpu.read_gpu_sample("h0", 0)
    assert s["power_w"] is None and s["unsupported"] == ["power_w"]
    assert "power_w" in s["errors"]


def test_describe_gpus_with_fake(monkeypatch):
    fake = FakeNvml(gpus=2)
    monkeypatch.setattr(gpu, "pynvml", fake)
    gpus, reason = gpu.describe_gpus()
    assert reason is None and [g["index"] for g in gpus] == [0, 1]
    g = gpus[0]
    assert g["name"] == "NVIDIA H200" and g["uuid"] == "GPU-h0"
    assert g["driver_version"] == "580.159.04" and g["nvml_version"] == "13.580.159.04"
    assert g["cuda_driver_version"] == "13.0"
    assert g["power_limit_w"] == 700.0 and g["power_limit_default_w"] == 700.0
    assert g["max_sm_clock_mhz"] == 1980 and g["compute_capability"] == "9.0"
    assert g["power_limit_range_w"] is None and "power_limit_range_w" in g["unsupported"]
    assert fake.inits == 0  # NVML shut down again
    json.dumps(gpus)


def test_describe_gpus_no_devices(monkeypatch):
    monkeypatch.setattr(gpu, "pynvml", FakeNvml(gpus=0))
    assert gpu.describe_gpus() == ([], "NVML found no GPU on this machine")


def test_async_sampler_writes_gpu_stream(monkeypatch, tmp_path):
    fake = FakeNvml(gpus=2)
    monkeypatch.setattr(gpu, "pynvml", fake)
    w = writer_at(tmp_path)
    s = gpu.GpuSampler()

    async def go():
        stop = asyncio.Event()
        task = asyncio.create_task(s.run(w, 0.02, stop))
        ticks = 0
        while s.samples < 6:  # the loop stays free while the sampler runs
            ticks += 1
            await asyncio.sleep(0.005)
        stop.set()
        await asyncio.wait_for(task, 2)
        return ticks

    assert asyncio.run(go()) > 1
    w.close("complete")
    b = read_bundle(tmp_path / "b")
    assert len(b.gpu) == s.samples >= 6
    assert {r["gpu"] for r in b.gpu} == {0, 1}
    ts = [r["t"] for r in b.gpu]
    assert ts == sorted(ts) and all(t >= 0 for t in ts)
    assert fake.inits == 0


def test_sample_for(monkeypatch, tmp_path):
    monkeypatch.setattr(gpu, "pynvml", FakeNvml())
    w = writer_at(tmp_path)
    n = gpu.GpuSampler().sample_for(0.1, 0.02, w)
    w.close("complete")
    assert 3 <= n <= 7
    assert len(read_bundle(tmp_path / "b").gpu) == n


@pytest.mark.parametrize("interval", [0.01])
def test_next_tick_skips_missed_ticks(interval):
    import time
    prev = time.monotonic() - 10 * interval
    nxt = gpu._next_tick(prev, interval)
    assert nxt > time.monotonic() - 1e-9


# --- GPM counters ------------------------------------------------------------------------

def test_gpm_reason_with_the_real_bindings_and_no_library_here():
    reason = gpm.gpm_absent_reason(pynvml, None)
    assert isinstance(reason, str) and "GPM" in reason


def test_gpm_metric_names_are_pynvml_constants():
    for name, const in gpm.GPM_METRIC_NAMES.items():
        assert isinstance(getattr(pynvml, const), int), name
    assert set(gpm.GPM_METRIC_NAMES) | {"gpm_interval_s"} == set(gpu.GPM_FIELDS)


def test_bindings_without_gpm_api_give_reason_and_plain_rows(monkeypatch, tmp_path):
    fake = FakeNvml()  # a fake NVML, as an nvidia-ml-py without the GPM API
    monkeypatch.setattr(gpu, "pynvml", fake)
    g = gpu.describe_gpus()[0][0]
    assert g["gpm_supported"] is False and "no GPM API" in g["gpm_absent_reason"]
    w = writer_at(tmp_path)
    assert gpu.GpuSampler().sample_for(0.05, 0.01, w) >= 2
    w.close("complete")
    rows = read_bundle(tmp_path / "b").gpu
    assert all(not set(gpu.GPM_FIELDS) & set(r) for r in rows)
    assert all(r["power_w"] == 690.5 for r in rows)


class FakeGpmNvml(FakeNvml):
    """A fake NVML with the GPM API of a Hopper GPU (no such GPU here): the supported path.

    The metrics structure is the real pynvml ctypes type; NVLink counters are refused as
    NVML refuses them on a GPU with no NVLink.
    """

    def __init__(self, supported=True, sample_error=None, **kw):
        super().__init__(**kw)
        self.NVMLError_NoPermission = pynvml.NVMLError_NoPermission
        self.NVML_ERROR_NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
        self.c_nvmlGpmMetricsGet_t = pynvml.c_nvmlGpmMetricsGet_t
        self.NVML_GPM_METRICS_GET_VERSION = pynvml.NVML_GPM_METRICS_GET_VERSION
        for const in gpm.GPM_METRIC_NAMES.values():
            setattr(self, const, getattr(pynvml, const))
        self.supported, self.sample_error, self.nan_dram = supported, sample_error, False
        self.allocated, self.freed, self.gets = 0, 0, 0

    def nvmlGpmQueryDeviceSupport(self, h):
        return types.SimpleNamespace(isSupportedDevice=int(self.supported))

    def nvmlGpmSampleAlloc(self):
        self.allocated += 1
        return pynvml.c_nvmlGpmSample_t(pynvml.struct_c_nvmlGpmSample_t())

    def nvmlGpmSampleFree(self, s):
        self.freed += 1

    def nvmlGpmSampleGet(self, h, s):
        if self.sample_error:
            raise self.sample_error
        self.gets += 1
        return s

    def nvmlGpmMetricsGet(self, mg):
        values = {pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: 61.5,
                  pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 12.25,
                  pynvml.NVML_GPM_METRIC_HMMA_TENSOR_UTIL: 12.0,
                  pynvml.NVML_GPM_METRIC_SM_UTIL: 97.0,
                  pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: 20.0,
                  pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC: 3.5,
                  pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC: 0.0}
        if self.nan_dram:
            values[pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL] = float("nan")
        for i in range(mg.numMetrics):
            m = mg.metrics[i]
            if m.metricId in values:
                m.value, m.nvmlReturn = values[m.metricId], 0
            else:
                m.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        return mg


def test_gpm_supported_rows_carry_counters(monkeypatch, tmp_path):
    fake = FakeGpmNvml(gpus=2)
    monkeypatch.setattr(gpu, "pynvml", fake)
    g = gpu.describe_gpus()[0][0]
    assert g["gpm_supported"] is True and g["gpm_absent_reason"] is None
    assert fake.allocated == fake.freed == 2  # one probe sample per GPU, freed
    w = writer_at(tmp_path)
    assert gpu.GpuSampler().sample_for(0.1, 0.02, w) >= 6
    w.close("complete")
    rows = read_bundle(tmp_path / "b").gpu
    first, later = rows[:2], [r for r in rows[2:]]
    assert all("gpm_dram_bw_util_pct" not in r for r in first)  # no interval yet
    r = later[0]
    assert r["gpm_dram_bw_util_pct"] == 61.5 and r["gpm_any_tensor_util_pct"] == 12.25
    assert r["gpm_hmma_tensor_util_pct"] == 12.0 and r["gpm_sm_util_pct"] == 97.0
    assert r["gpm_sm_occupancy_pct"] == 20.0 and r["gpm_pcie_tx_mib_s"] == 0.0
    assert r["gpm_nvlink_rx_mib_s"] is None and r["gpm_nvlink_tx_mib_s"] is None
    assert r["unsupported"] == ["temperature_c", "gpm_nvlink_rx_mib_s", "gpm_nvlink_tx_mib_s"]
    assert "errors" not in r
    assert 0 < r["gpm_interval_s"] < 1 and r["power_w"] == 690.5
    # a probe per GPU when the sampler opens, then two samples per GPU kept in turn: all freed
    assert fake.allocated == fake.freed == 2 + 2 + 4


def test_gpm_unsupported_gpu_gives_reason_once(monkeypatch, tmp_path):
    fake = FakeGpmNvml(supported=False)
    monkeypatch.setattr(gpu, "pynvml", fake)
    g = gpu.describe_gpus()[0][0]
    assert g["gpm_supported"] is False and "Hopper" in g["gpm_absent_reason"]
    w = writer_at(tmp_path)
    gpu.GpuSampler().sample_for(0.05, 0.01, w)
    w.close("complete")
    rows = read_bundle(tmp_path / "b").gpu
    assert rows and all("gpm_interval_s" not in r for r in rows)
    assert fake.allocated == 0


def test_gpm_not_permitted_gives_reason(monkeypatch):
    fake = FakeGpmNvml(sample_error=pynvml.NVMLError_NoPermission())
    monkeypatch.setattr(gpu, "pynvml", fake)
    g = gpu.describe_gpus()[0][0]
    assert "not permitted" in g["gpm_absent_reason"]
    assert fake.allocated == fake.freed == 1


def test_gpm_sample_refused_later_is_null_not_zero():
    fake = FakeGpmNvml()
    s = gpm.GpmStream(fake, "h0")
    assert s.read(1.0) == ({}, [], {})
    fields, unsupported, _ = s.read(2.0)
    assert fields["gpm_interval_s"] == 1.0 and fields["gpm_sm_util_pct"] == 97.0
    fake.sample_error = pynvml.NVMLError_GpuIsLost()
    fields, unsupported, errors = s.read(3.0)
    assert fields["gpm_sm_util_pct"] is None and "gpm_sm_util_pct" in unsupported
    assert "gpm_sm_util_pct" in errors
    fake.sample_error = None
    assert s.read(4.0)[0]["gpm_interval_s"] == 2.0  # measured from the last good sample
    s.close()
    assert fake.freed == 2


def test_gpm_nan_from_nvml_is_null_not_written(monkeypatch, tmp_path):
    fake = FakeGpmNvml()  # an H200 gave NaN for DRAM bandwidth over a 59 ms interval
    fake.nan_dram = True
    s = gpm.GpmStream(fake, "h0")
    s.read(1.0)
    fields, unsupported, errors = s.read(1.059)
    assert fields["gpm_dram_bw_util_pct"] is None and unsupported == [
        "gpm_dram_bw_util_pct", "gpm_nvlink_rx_mib_s", "gpm_nvlink_tx_mib_s"]
    assert "non-finite" in errors["gpm_dram_bw_util_pct"]
    assert fields["gpm_sm_util_pct"] == 97.0
    s.close()
    monkeypatch.setattr(gpu, "pynvml", fake)
    w = writer_at(tmp_path)
    gpu.GpuSampler().sample_for(0.05, 0.01, w)
    w.close("complete")
    rows = read_bundle(tmp_path / "b").gpu
    assert any("gpm_dram_bw_util_pct" in r["unsupported"] for r in rows)


NVML_VALUES = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10, 10**7),
                        st.sampled_from([0, 690_500, 5_000_000, 1980, 2600, 3201]))


@settings(max_examples=120, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(power_mw=NVML_VALUES, limit_mw=NVML_VALUES, sm=NVML_VALUES, mem=NVML_VALUES,
       max_sm=NVML_VALUES, max_mem=NVML_VALUES, util=NVML_VALUES)
def test_any_reading_nvml_gives_is_a_measurement_under_the_devices_maximum_or_null_with_why(
        tmp_path_factory, power_mw, limit_mw, sm, mem, max_sm, max_mem, util):
    from bundle.plausible import FIELD_RANGES
    fake = FakeNvml()
    fake.nvmlDeviceGetPowerUsage = lambda h: power_mw
    fake.nvmlDeviceGetEnforcedPowerLimit = fake.nvmlDeviceGetPowerManagementDefaultLimit = lambda h: limit_mw
    fake.nvmlDeviceGetClockInfo = lambda h, c: sm if c == 1 else mem
    fake.nvmlDeviceGetMaxClockInfo = lambda h, c: max_sm if c == 1 else max_mem
    fake.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=util, memory=40)
    old, gpu.pynvml = gpu.pynvml, fake
    try:
        maxima = gpu.device_maxima_of("h0")
        s = gpu.read_gpu_sample("h0", 0, maxima)
    finally:
        gpu.pynvml = old
    for name in ("power_w", "power_limit_w", "sm_clock_mhz", "mem_clock_mhz", "gpu_util_pct"):
        v = s[name]
        if v is None:
            assert name in s["unsupported"] and s["errors"][name].startswith("NVML gave "), s
            continue
        lo, hi, lo_ok = FIELD_RANGES[name]
        assert math.isfinite(v) and (lo < v or (lo_ok and v == lo)) and v <= hi, (name, v)
        assert name not in maxima or v <= maxima[name][0], (name, v, maxima)
    d = tmp_path_factory.mktemp("b")
    w = BundleWriter(d, {"tool": {"name": "test"}, "engine": None, "plan": {}})
    w.append("gpu", {"t": 0.0, **s})
    w.close("complete")
    assert len(read_bundle(d).gpu) == 1          # what the collector writes, its reader takes
