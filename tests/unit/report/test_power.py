"""report/derive/gpu/power.py over a real NVML capture from an H200 (idle, bf16 matmul loop, idle)."""

from __future__ import annotations

import json
import statistics

import pytest

from bundle.store.reader import read_bundle
from report.derive.gpu import dcgm, energy, power
from report.ledger import Absent, Ledger
from tests.conftest import FIXTURES

FIXTURE = FIXTURES / "gpu-h200"


@pytest.fixture(scope="module")
def capture():
    b = read_bundle(FIXTURE)
    hw = json.loads((FIXTURE / "hardware.json").read_text())
    return b, hw


@pytest.fixture(scope="module")
def samples(capture):
    return capture[0].gpu


@pytest.fixture(scope="module")
def phases(capture):
    p = capture[1]["phases"]
    # The first second of load is the clock and power ramp: the steady state starts after it.
    return {"idle_before": p["idle_before"], "idle_after": p["idle_after"],
            "load": p["load"], "steady": [p["load"][0] + 2.0, p["load"][1]]}


def test_fixture_is_a_recorded_h200_bundle(capture):
    b, hw = capture
    assert b.manifest["origin"] == "recorded" and b.manifest["status"] == "complete"
    gpu0 = b.manifest["gpus"][0]
    assert gpu0["name"] == "NVIDIA H200" and gpu0["power_limit_w"] == 700.0
    assert hw["describe_gpus"][0]["uuid"] == gpu0["uuid"]
    assert not b.warnings
    assert all(s["unsupported"] == [] for s in b.gpu)  # the H200 reports every field


def test_power_sits_near_the_limit_under_load(samples, phases):
    a, z = phases["steady"]
    limit = power.power_limit_w(samples, a, z)
    assert limit == 700.0
    med, peak = power.median_power_w(samples, a, z), power.peak_power_w(samples, a, z)
    assert 0.97 * limit <= med <= limit
    assert med <= peak <= limit * 1.01
    assert med == pytest.approx(691.1, abs=0.5)
    assert power.max_temperature_c(samples, a, z) < 83  # far from any thermal slowdown


def test_idle_power_is_far_below_the_limit(samples, phases):
    for name in ("idle_before", "idle_after"):
        a, z = phases[name]
        assert power.median_power_w(samples, a, z) < 200


def test_power_cap_throttles_under_load_not_at_idle(samples, phases):
    a, z = phases["steady"]
    assert power.power_cap_share(samples, a, z) == 1.0
    for name in ("idle_before", "idle_after"):
        a, z = phases[name]
        assert power.power_cap_share(samples, a, z) == 0.0


def test_sm_clock_drops_under_load(samples):
    a, z = samples[0]["t"], samples[-1]["t"]
    load = power.median_sm_clock_under_load_mhz(samples, a, z)
    idle = statistics.median(s["sm_clock_mhz"] for s in samples if s.get("sm_clock_mhz") is not None
                             and s.get("gpu_util_pct") is not None and s["gpu_util_pct"] <= 5)
    assert idle == 1980.0
    assert 1300 <= load <= 1600 and load < idle


def mean_power_w(samples, a: float, z: float) -> float:
    """Mean of the sampled board power of GPU 0 in [a, z] (the energy counter's cross-check)."""
    return statistics.fmean(s["power_w"] for s in samples
                            if s.get("gpu", 0) == 0 and a <= s["t"] <= z and s.get("power_w") is not None)


def test_energy_matches_mean_power_times_duration(samples, phases):
    a, z = phases["steady"]
    e = energy.energy_counter_j(samples, a, z)
    assert e > 0
    assert e == pytest.approx(mean_power_w(samples, a, z) * (z - a), rel=0.01)
    assert e / (z - a) == pytest.approx(691, abs=3)
    # Over the whole capture (idle, ramp, load, idle) the two still agree within a few %.
    a, z = samples[0]["t"], samples[-1]["t"]
    e = energy.energy_counter_j(samples, a, z)
    assert e == pytest.approx((samples[-1]["energy_mj"] - samples[0]["energy_mj"]) / 1000)
    assert e == pytest.approx(mean_power_w(samples, a, z) * (z - a), rel=0.03)


def test_energy_interpolates_between_samples(samples):
    whole = energy.energy_counter_j(samples, 20.0, 30.0)
    halves = energy.energy_counter_j(samples, 20.0, 25.5) + energy.energy_counter_j(samples, 25.5, 30.0)
    assert halves == pytest.approx(whole)
    assert energy.energy_counter_j(samples, 20.0, 30.0, gpu=0) == whole


def test_joules_per_output_token(samples, phases):
    a, z = phases["steady"]
    e = energy.energy_counter_j(samples, a, z)
    assert energy.joules_per_output_token(e, 1000) == pytest.approx(e / 1000)
    with pytest.raises(Absent):
        energy.joules_per_output_token(e, 0)


# --- no data -------------------------------------------------------------------------------

ALL = [power.median_power_w, power.peak_power_w, power.power_limit_w, power.max_temperature_c,
       power.power_cap_share, power.median_sm_clock_under_load_mhz, power.median_gpu_util_pct,
       energy.energy_counter_j]


@pytest.mark.parametrize("fn", ALL, ids=lambda f: f.__name__)
def test_absent_without_gpu_data(fn):
    with pytest.raises(Absent):
        fn([], 0.0, 10.0)
    with pytest.raises(Absent):
        fn(None, 0.0, 10.0)


@pytest.mark.parametrize("fn", ALL, ids=lambda f: f.__name__)
def test_absent_outside_the_capture_or_on_another_gpu(fn, samples):
    with pytest.raises(Absent):
        fn(samples, 500.0, 600.0)
    with pytest.raises(Absent):
        fn(samples, 10.0, 20.0, gpu=3)


def test_refused_field_is_absent_not_zero():
    s = [{"t": float(i), "gpu": 0, "power_w": 100.0, "temperature_c": None, "energy_mj": None,
          "throttle_reasons": None, "unsupported": ["temperature_c", "energy_mj",
                                                    "throttle_reasons"]} for i in range(5)]
    assert power.median_power_w(s, 0, 4) == 100.0
    for fn in (power.max_temperature_c, energy.energy_counter_j, power.power_cap_share):
        with pytest.raises(Absent, match="not supported"):
            fn(s, 0, 4)


def test_counter_reset_is_absent():
    s = [{"t": 0.0, "gpu": 0, "energy_mj": 5000}, {"t": 1.0, "gpu": 0, "energy_mj": 100}]
    with pytest.raises(Absent, match="backwards"):
        energy.energy_counter_j(s, 0.0, 1.0)


def test_energy_sums_gpus():
    s = [{"t": float(t), "gpu": g, "energy_mj": 1000 * t * (g + 1)} for t in range(3) for g in (0, 1)]
    assert energy.energy_counter_j(s, 0.0, 2.0) == pytest.approx(2.0 + 4.0)
    assert energy.energy_counter_j(s, 0.0, 2.0, gpu=1) == pytest.approx(4.0)


def test_ledger_records_absent_with_reason(samples, phases):
    led = Ledger()
    a, z = phases["steady"]
    v = led.derive("power.median", power.median_power_w, unit="W", samples=samples,
                   t_start=a, t_end=z)
    assert v.present and v.doc == "Median of the sampled board power in the window (W)."
    none = led.derive("power.none", power.median_power_w, unit="W", samples=[], t_start=a,
                      t_end=z)
    assert none.value is None and "no GPU 0 sample" in str(none.missing)


def test_counter_reset_just_outside_the_window_is_absent():
    s = [{"t": 0.0, "gpu": 0, "energy_mj": 9000}, {"t": 1.0, "gpu": 0, "energy_mj": 100},
         {"t": 2.0, "gpu": 0, "energy_mj": 9200}]
    with pytest.raises(Absent, match="backwards"):
        energy.energy_counter_j(s, 0.5, 1.5)
    assert energy.energy_counter_j(s, 1.0, 2.0) == pytest.approx(9.1)



def test_a_bundle_recorded_before_keeps_a_power_or_clock_above_its_gpus_maximum_out():
    # HAND-BUILT rows as a collector without device maxima wrote them: 5,000 W and 2,600 MHz on
    # a GPU NVML described with a 700 W limit and a 1,980 MHz maximum SM clock.
    gpus = [{"index": 0, "name": "NVIDIA H200", "power_limit_w": 700.0, "power_limit_range_w": [200.0, 700.0],
             "max_sm_clock_mhz": 1980, "max_mem_clock_mhz": 3201},
            {"index": 1, "name": "NVIDIA H200"}]        # no NVML figures: the GPU table's rated power
    rows = [{"t": 1.0, "gpu": 0, "power_w": 5000.0, "sm_clock_mhz": 2600, "mem_clock_mhz": 3201},
            {"t": 1.0, "gpu": 1, "power_w": 5000.0, "sm_clock_mhz": 2600},
            {"t": 2.0, "gpu": 0, "power_w": 710.0, "sm_clock_mhz": 1980, "mem_clock_mhz": 3201}]
    out = dcgm.plausible_gpu_rows(rows, gpus)
    assert out[0] == {"t": 1.0, "gpu": 0, "power_w": None, "sm_clock_mhz": None, "mem_clock_mhz": 3201}
    assert out[1] == {"t": 1.0, "gpu": 1, "power_w": None, "sm_clock_mhz": 2600}
    assert out[2] is rows[2]
    assert power.peak_power_w(power.GpuRows(out), 0.0, 3.0, gpu=0) == 710.0
    # An exporter's page with no limit of its own: the table's rated power by its modelName.
    rec = {"t": 1.0, "ok": True, "samples": {'DCGM_FI_DEV_POWER_USAGE{gpu="0",modelName="NVIDIA H200"}': 5000.0,
                                             'DCGM_FI_DEV_POWER_USAGE{gpu="1",modelName="Unknown GPU"}': 5000.0}}
    assert [(r["gpu"], r["power_w"]) for r in dcgm.dcgm_gpu_rows([rec])] == [(1, 5000.0)]
