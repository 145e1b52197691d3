"""The energy of a window checked two ways (report/derive/gpu/energy.py): the counter's delta at the
window's edges against the power samples' trapezoid; a counter that resets, stands still while
the board draws power or disagrees is absent with its reason and the integral is used, the
ledger citing which. NVML rows and a DCGM exporter's page are read alike. Fixtures are
HAND-BUILT: a few labelled rows, and tests/fixtures/dcgm/exporter-page.txt with its energy
counters (and, for the still counter, GPU 0's power) filled in."""

from __future__ import annotations

import pytest

import report.derive.round.stages  # noqa: F401 - registers every quantity, as a round does
from bench.exposition import parse_exposition
from report.derive import validity
from report.derive.gpu import dcgm
from report.derive.gpu import energy as EN
from report.ledger import Absent, Ledger, Reason
from report.registry import RawSources, resolve_point, resolve_round
from tests.conftest import FIXTURES

PAGE = (FIXTURES / "dcgm" / "exporter-page.txt").read_text()


def nvml_rows(watts: list[float], energy_mj: list[float] | None = None, gpu: int = 0) -> list[dict]:
    """One NVML row a second: its power and, where given, its energy counter."""
    return [{"t": float(i), "gpu": gpu, "power_w": w,
             "energy_mj": None if energy_mj is None else energy_mj[i]} for i, w in enumerate(watts)]


def dcgm_rows(seconds: int, e0, e1, text: str = PAGE) -> list[dict]:
    """A DCGM exporter scraped once a second; E0(i), E1(i): GPU 0's and GPU 1's counters (mJ)."""
    return dcgm.dcgm_gpu_rows([{"t": float(i), "dt": 0.01, "ok": True,
                              "samples": parse_exposition(text.replace("{energy0}", str(e0(i)))
                                                          .replace("{energy1}", str(e1(i))), "DCGM_FI_")}
                             for i in range(seconds)])


def ledger_of(rows: list[dict], t_start: float, t_end: float, **more) -> Ledger:
    """The energy module's quantities of one point "p" over ROWS, the policy's tolerance in the round."""
    led = Ledger()
    resolve_round(led, validity.__name__, [], RawSources(), over_points=False)
    raw = RawSources()
    raw.add("gpu_samples", rows, ("gpu.jsonl",))
    raw.add("t_measure", t_start)
    raw.add("t_end", t_end)
    for name, value in more.items():
        raw.add(name, value)
    resolve_point(led, EN.__name__, "p", raw)
    return led


def test_the_counter_is_interpolated_at_the_edges_and_agrees_with_the_trapezoid():
    # 300 W for 10 s; the counter gains 300 J a second. A window from 2.5 s to 7.25 s.
    rows = nvml_rows([300.0] * 11, [1_000_000 + 300_000 * i for i in range(11)])
    assert EN.energy_counter_j(rows, 2.5, 7.25) == pytest.approx(300 * 4.75)
    assert EN.energy_power_integral_j(rows, 2.5, 7.25) == pytest.approx(300 * 4.75)
    led = ledger_of(rows, 2.5, 7.25)
    assert led.value_of("p.p.energy_counter_disagreement") == pytest.approx(0.0)
    used = led["p.p.energy_j"]
    assert used.value == pytest.approx(1425.0)
    assert [v for _, v in used.inputs] == ["p.p.energy_counter_checked_j"]


def test_the_trapezoid_follows_a_ramp_and_interpolates_power_at_the_edges():
    # Power rises 100 W a second from 0 W: over [0.5, 3.5] the integral is ∫100t dt = 600 J.
    rows = nvml_rows([100.0 * i for i in range(5)])
    assert EN.energy_power_integral_j(rows, 0.5, 3.5) == pytest.approx(600.0)
    # Samples on one side only hold the nearest: a window from 3 s to 6 s past the last sample.
    assert EN.energy_power_integral_j(rows, 3.0, 6.0) == pytest.approx(350 + 400 * 2)
    with pytest.raises(Absent, match="an integral needs two"):
        EN.energy_power_integral_j(rows[:1], 0.0, 1.0)


def test_a_counter_that_disagrees_is_absent_saying_by_how_much_and_the_integral_is_used():
    # The counter gains 200 J a second while the board draws 300 W: a third off.
    rows = nvml_rows([300.0] * 11, [200_000 * i for i in range(11)])
    led = ledger_of(rows, 0.0, 10.0)
    assert led.value_of("p.p.energy_counter_j") == pytest.approx(2000.0)
    checked = led["p.p.energy_counter_checked_j"]
    assert not checked.present and checked.missing.code == "reason.energy_counter_disagrees"
    assert "33.3%" in checked.missing.text("en") and "10%" in checked.missing.text("en")
    used = led["p.p.energy_j"]
    assert used.value == pytest.approx(3000.0)
    assert [v for _, v in used.inputs] == ["p.p.energy_power_integral_j"]


def test_a_counter_within_the_tolerance_is_used():
    rows = nvml_rows([300.0] * 11, [290_000 * i for i in range(11)])      # 3.3 % low
    led = ledger_of(rows, 0.0, 10.0)
    assert led.value_of("p.p.energy_j") == pytest.approx(2900.0)


def test_a_counter_that_resets_is_absent_and_the_integral_is_used():
    rows = nvml_rows([250.0] * 5, [9_000_000, 9_250_000, 100, 250_100, 500_100])
    led = ledger_of(rows, 0.0, 4.0)
    assert led["p.p.energy_counter_j"].missing.code == "reason.energy_backwards_reset"
    assert led.value_of("p.p.energy_j") == pytest.approx(1000.0)


def test_without_power_samples_the_counter_is_used_unchecked():
    rows = [{"t": float(i), "gpu": 0, "energy_mj": 100_000 * i} for i in range(5)]
    led = ledger_of(rows, 0.0, 4.0)
    assert not led["p.p.energy_power_integral_j"].present
    assert led.value_of("p.p.energy_j") == pytest.approx(400.0)
    assert [v for _, v in led["p.p.energy_j"].inputs] == ["p.p.energy_counter_j"]


def test_a_dcgm_page_whose_counter_moves_is_read_as_nvmls():
    # GPU 0 draws 692.847 W and GPU 1 74.512 W, their counters advancing to match.
    rows = dcgm_rows(11, lambda i: 1_000_000 + 692_847 * i, lambda i: 5_000_000 + 74_512 * i)
    led = ledger_of(rows, 1.0, 9.0)
    assert led.value_of("p.p.energy_counter_j") == pytest.approx(8 * (692.847 + 74.512))
    assert led.value_of("p.p.energy_counter_disagreement") == pytest.approx(0.0, abs=1e-9)
    assert [v for _, v in led["p.p.energy_j"].inputs] == ["p.p.energy_counter_checked_j"]
    assert led.value_of("p.p.energy_power_mean_w") == pytest.approx(692.847 + 74.512)


def test_a_dcgm_counter_standing_still_while_the_board_draws_431_w_is_no_zero():
    still = PAGE.replace("} 692.847", "} 431")
    rows = dcgm_rows(11, lambda i: 7_000_000, lambda i: 3_000_000, still)
    led = ledger_of(rows, 1.0, 9.0)
    counter = led["p.p.energy_counter_j"]
    assert not counter.present and counter.missing.code == "reason.energy_counter_still"
    assert "431 W" in counter.missing.text("en") and "431 W" in counter.missing.text("zh")
    energy = led["p.p.energy_j"]
    assert energy.value == pytest.approx(8 * (431 + 74.512)) and energy.value > 0
    assert [v for _, v in energy.inputs] == ["p.p.energy_power_integral_j"]


def test_energy_per_token_request_and_total_token():
    rows = nvml_rows([400.0] * 11, [400_000 * i for i in range(11)])
    # 10 s window: 2,000 output tokens, 500 total tokens a second, 2 requests a second.
    led = ledger_of(rows, 0.0, 10.0, output_tokens_in_window=2000, total_tok_s=500.0, req_s=2.0)
    assert led.value_of("p.p.joules_per_token") == pytest.approx(4000 / 2000)
    assert led.value_of("p.p.joules_per_total_token") == pytest.approx(4000 / 5000)
    assert led.value_of("p.p.joules_per_request") == pytest.approx(4000 / 20)
    assert led.value_of("p.p.energy_power_mean_w") == pytest.approx(400.0)
    with pytest.raises(Absent):
        EN.joules_per_request(4000.0, 0.0, 0.0, 10.0)


def test_prefill_and_decode_split_the_energy_by_the_step_models_time():
    # HAND-BUILT step model: a fifth of the steps carry a chunk; such a step takes 50 ms
    # (compute-bound), a decode-only step 20 ms (bandwidth-bound): the mean step is 26 ms and
    # the chunks add 0.2 × 30 = 6 ms of it.
    share = EN.prefill_time_share(0.2, 50.0, 20.0, 5.0, 20.0, 26.0)
    assert share == pytest.approx(6 / 26)
    assert EN.energy_prefill_j(2600.0, share) == pytest.approx(600.0)
    assert EN.energy_decode_j(2600.0, 600.0) == pytest.approx(2000.0)
    assert EN.prefill_time_share(0.0, 50.0, 20.0, 5.0, 20.0, 20.0) == 0.0    # no chunk, no prefill


def test_the_new_reasons_have_words_in_both_languages():
    for code, params in (("reason.energy_counter_still", {"g": 0, "power": 431.0}),
                         ("reason.energy_counter_disagrees", {"off": 0.2, "tol": 0.1})):
        r = Reason.of(code, **params)
        assert r.text("en") != r.text("zh") and r.text("en") and r.text("zh")


def slow_edge_scrapes(late_s: float, read_s: float, rate: float = 1.0) -> list[dict]:
    """A DCGM exporter scraped once a second whose page is written LATE_S after the scrape began
    (its read took READ_S): GPU 0's counter is the one at the page's moment, advancing at
    692.847 W × RATE, GPU 1's at 74.512 W."""
    def at(i: int, w: float) -> int:
        return int(1_000_000 + w * 1e3 * rate * (i + (late_s if i == 2 else 0.0)))
    return dcgm.dcgm_gpu_rows([{"t": float(i), "dt": read_s if i == 2 else 0.01, "ok": True,
                              "samples": parse_exposition(PAGE.replace("{energy0}", str(at(i, 692.847)))
                                                          .replace("{energy1}", str(at(i, 74.512))),
                                                          "DCGM_FI_")}
                             for i in range(11)])


def test_a_page_written_late_within_a_slow_scrape_is_allowed_for_and_the_counter_used():
    # The scrape at 2 s took 0.6 s and its page was written 0.5 s in: over [2, 5] the counter
    # reads 0.5 s less than the integral (a sixth), all of it inside the scrape's own time.
    rows = slow_edge_scrapes(late_s=0.5, read_s=0.6)
    led = ledger_of(rows, 2.0, 5.0)
    assert led.value_of("p.p.energy_counter_j") == pytest.approx(2.5 * (692.847 + 74.512), rel=1e-6)
    # The 0.6 s scrape at the first edge, a 0.01 s one at the last.
    assert led.value_of("p.p.energy_counter_timing_j") == pytest.approx((0.6 + 0.01) * (692.847 + 74.512))
    assert led.value_of("p.p.energy_counter_disagreement") == pytest.approx(0.0, abs=1e-9)
    assert [v for _, v in led["p.p.energy_j"].inputs] == ["p.p.energy_counter_checked_j"]


def test_the_allowance_covers_the_scrapes_time_only_a_counter_wrong_beyond_it_disagrees():
    # The same slow scrape, but the counters run at 60 % of the board's power: 40 % off, of
    # which the scrapes at the edges allow 0.61 s of the 3 s window.
    rows = slow_edge_scrapes(late_s=0.0, read_s=0.6, rate=0.6)
    led = ledger_of(rows, 2.0, 5.0)
    assert led.value_of("p.p.energy_counter_disagreement") == pytest.approx(0.4 - 0.61 / 3, rel=1e-4)
    assert led["p.p.energy_counter_checked_j"].missing.code == "reason.energy_counter_disagrees"
    # NVML rows carry no read time: no allowance.
    nv = nvml_rows([300.0] * 11, [200_000 * i for i in range(11)])
    assert ledger_of(nv, 0.0, 10.0).value_of("p.p.energy_counter_timing_j") == 0.0
