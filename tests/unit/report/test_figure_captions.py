"""Each figure's caption states the finding the figure shows: the sentence a predicate over ledger
values picks, its numbers cited from the ledger, none where a value it needs is absent; and every
figure of the committed rounds 4 and 5 that a predicate captions carries it in both languages."""

from __future__ import annotations

import re

import pytest

from report.ledger import Ledger
from report.publish import captions as C
from report.publish.compose import compose_rounds
from report.words import LANGS, PLACEHOLDER
from tests.conftest import ROOT


def _led(values: dict) -> Ledger:
    led = Ledger()
    for key, value in values.items():
        led.record(key, value, doc="a test value")
    return led


def _cited(texts: dict[str, str]) -> set[str]:
    keys = {lang: [m.group(1) for m in PLACEHOLDER.finditer(t)] for lang, t in texts.items()}
    assert keys["en"] == keys["zh"]           # both languages cite the same numbers, in one order
    return set(keys["en"])


def test_every_caption_cites_the_same_numbers_in_the_same_order_in_both_languages():
    from report.words import section
    en, zh = section("finding", "en"), section("finding", "zh")
    for code in (c for c in en if c.startswith("figcap_")):
        assert ([m.group(1) for m in PLACEHOLDER.finditer(en[code])]
                == [m.group(1) for m in PLACEHOLDER.finditer(zh[code])]), code


def _ttft(queue, prefill, frontend, pid="b"):
    return {f"p.{pid}.queue_ms_mean": queue, f"p.{pid}.prefill_ms_mean": prefill,
            f"p.{pid}.frontend_ms_mean": frontend, f"p.{pid}.ttft_ms_mean_population": queue + prefill + frontend}


@pytest.mark.parametrize("parts, code", [((50, 20, 10), "ttft_queue"), ((5, 219, 111), "ttft_prefill"),
                                         ((1, 2, 30), "ttft_frontend")])
def test_the_breakdown_names_the_largest_part_at_the_headline_point(parts, code):
    led = _led(_ttft(*parts))
    cap = C.cap_ttft_breakdown(led, "b", "b", {"b": "C=128"})
    assert cap["en"].startswith(C.word(f"finding.figcap_{code}", "en", p="b", at="C=128"))
    assert _cited(cap) == {"p.b.queue_ms_mean", "p.b.prefill_ms_mean", "p.b.frontend_ms_mean",
                           "p.b.ttft_ms_mean_population"}


def test_the_breakdown_says_where_the_first_point_differs():
    led = _led({**_ttft(50, 20, 10, "b"), **_ttft(0.1, 20, 5, "a")})
    cap = C.cap_ttft_breakdown(led, "a", "b", {"a": "C=1", "b": "C=64"})
    assert "p.a.prefill_ms_mean" in _cited(cap) and "C=1" in cap["en"] and "C=1" in cap["zh"]
    same = C.cap_ttft_breakdown(_led({**_ttft(50, 20, 10, "b"), **_ttft(40, 20, 5, "a")}), "a", "b", {})
    assert "p.a.queue_ms_mean" not in _cited(same)


def test_no_caption_where_a_value_it_needs_is_absent():
    led = _led({"p.b.queue_ms_mean": 1.0, "p.b.prefill_ms_mean": 2.0})
    assert C.cap_ttft_breakdown(led, "b", "b", {}) is None
    assert C.cap_roofline(led, "b", {}) is None
    assert C.cap_iteration(led, "b", {}) is None


@pytest.mark.parametrize("queue, code", [(1.0, "qvp_below"), (9.0, "qvp_above")])
def test_queue_against_prefill_is_picked_in_code(queue, code):
    led = _led({"p.b.queue_ms_mean": queue, "p.b.prefill_ms_mean": 5.0})
    assert C.cap_queue_vs_prefill(led, "b", {})["en"] == C.word(f"finding.figcap_{code}", "en", p="b", at="b")


@pytest.mark.parametrize("intensity, code", [(50.0, "roof_memory"), (300.0, "roof_compute")])
def test_the_roofline_says_which_side_of_the_ridge(intensity, code):
    led = _led({"p.b.intensity": intensity, "r.ridge": 206.0, "p.b.mfu": 0.4, "p.b.mbu": 0.3})
    assert C.cap_roofline(led, "b", {})["en"] == C.word(f"finding.figcap_{code}", "en", p="b", at="b")


def test_the_timeline_names_the_first_point_that_queued_and_whether_the_pool_was_full():
    base = {"p.a.waiting_peak": 0.0, "p.a.kv_usage_peak": 0.01}
    room = _led({**base, "p.b.waiting_peak": 16.0, "p.b.kv_usage_peak": 0.07})
    assert "p.b.waiting_peak" in _cited(C.cap_timeline(room, ["a", "b"], "b", {}))
    assert C.cap_timeline(room, ["a", "b"], "b", {})["en"].endswith("still had room.")
    full = _led({**base, "p.b.waiting_peak": 16.0, "p.b.kv_usage_peak": 0.97})
    assert C.cap_timeline(full, ["a", "b"], "b", {})["en"].endswith("as the pool filled.")
    none = _led({**base, "p.b.waiting_peak": 0.0, "p.b.kv_usage_peak": 0.07})
    assert _cited(C.cap_timeline(none, ["a", "b"], "b", {})) == {"p.b.kv_usage_peak"}


def test_the_flop_rate_names_the_clocks_peak_only_where_the_clock_ran_slower():
    vals = {"p.b.tflops_s": 441.0, "p.b.mfu": 0.445, "r.peak_tflops": 989.4, "r.rule_clock_slower": 0.05}
    slow = C.cap_tflops(_led({**vals, "p.b.peak_tflops_at_clock": 827.0}), "b", {})
    assert "p.b.peak_tflops_at_clock" in _cited(slow)
    fast = C.cap_tflops(_led({**vals, "p.b.peak_tflops_at_clock": 980.0}), "b", {})
    assert "p.b.peak_tflops_at_clock" not in _cited(fast)


@pytest.mark.parametrize("diff, code", [(0.03, "repro_within"), (-0.08, "repro_over")])
def test_reproducibility_names_the_largest_difference_against_the_rule(diff, code):
    led = _led({"x.a.output_tok_s_diff": 0.01, "x.b.output_tok_s_diff": diff, "r.rule_repro_tput_tol": 0.05})
    cap = C.cap_repro(led, ["a", "b", "c"], {"b": "C=64"})
    assert cap["en"] == C.word(f"finding.figcap_{code}", "en", p="b", at="C=64")
    assert _cited(cap) == {"x.b.output_tok_s_diff", "r.rule_repro_tput_tol"}
    assert C.cap_repro(_led({"x.a.output_tok_s_diff": 0.01}), ["a"], {}) is None


def test_occupancy_says_whether_the_fullest_valid_point_also_delivered_the_most():
    vals = {"p.a.kv_occupancy": 0.1, "p.a.output_tok_s": 100.0, "p.b.kv_occupancy": 0.5,
            "p.b.output_tok_s": 300.0, "p.c.kv_occupancy": 0.9, "p.c.valid": False, "p.c.output_tok_s": 900.0}
    top = C.cap_occupancy(_led(vals), ["a", "b", "c"], {})
    assert top["en"] == C.word("finding.figcap_occ_top", "en", p="b", at="b")   # the invalid point is left out
    past = C.cap_occupancy(_led({**vals, "p.b.output_tok_s": 50.0}), ["a", "b", "c"], {})
    assert _cited(past) == {"p.b.kv_occupancy", "p.b.output_tok_s", "p.a.output_tok_s"}


@pytest.mark.parametrize("last, code", [(80.0, "session_ttft_up"), (20.0, "session_ttft_flat")])
def test_a_sessions_ttft_says_whether_it_grows_with_the_turn(last, code):
    led = _led({"p.b.session_first_turn_ttft_ms_p50": 30.0, "p.b.session_last_turn_ttft_ms_p50": last,
                "p.b.session_last_turn": 5})
    assert C.cap_session_ttft(led, "b", {})["en"] == C.word(f"finding.figcap_{code}", "en", p="b", at="b")


@pytest.mark.parametrize("serves, code", [(True, "session_hits_yes"), (False, "session_hits_no")])
def test_a_sessions_hit_rate_states_the_ledgers_verdict(serves, code):
    led = _led({"p.b.session_cache_serves_history": serves, "p.b.session_first_turn_hit_rate": 0.0,
                "p.b.session_last_turn_hit_rate": 0.8, "p.b.session_last_turn": 5})
    assert C.cap_session_hits(led, "b", {})["en"] == C.word(f"finding.figcap_{code}", "en", p="b", at="b")
    assert C.cap_session_hits(_led({}), "b", {}) is None


@pytest.fixture(scope="module")
def reports():
    paths = [(ROOT / "runs" / r / "bundle", r) for r in ("round-4", "round-5")]
    if not all((p / "manifest.json").exists() for p, _ in paths):
        pytest.skip("the recorded rounds 4 and 5 are not in runs/")
    return {r.round_id: r for r in compose_rounds(paths)}


CAPTIONED = {"round-4": ("ttft_breakdown", "queue_vs_prefill", "iteration", "timeline", "tflops_timeline", "roofline"),
             "round-5": ("kv_linearity",)}


def test_the_committed_rounds_figures_carry_their_findings(reports):
    for rid, figs in CAPTIONED.items():
        r = reports[rid]
        for fid in figs:
            fig = r.figures[fid]
            assert set(fig.caption) == set(LANGS), (rid, fid)
            assert all(k in r.ledger and r.ledger[k].present for k in _cited(fig.caption)), (rid, fid)


def test_round_4s_review_prints_the_figures_a_reviewer_reads_and_leaves_the_rest_to_the_web_page(reports):
    """The review PDF of the seven-point round shows at most seven figures, every one captioned."""
    from report.publish.render import assembly
    from report.publish.render.page import Page
    report = reports["round-4"]
    for lang in LANGS:
        page = Page(report, lang)
        svgs = {b.ref: "<svg></svg>" for b in page.blocks if b.kind == "figure"}
        review = page.assemble("pdf", svgs=svgs, part="review")
        shown = re.findall(r'<figure class="figure" id="fig-([\w-]+)"', review)
        assert len(shown) <= 7 and not set(shown) & assembly.REVIEW_LEAVES_FIGURES, (lang, shown)
        blocks = review.split('<figure class="figure"')[1:]
        assert all(re.search(r'<figcaption class="fig-caption">\s*[^<\s]', b) for b in blocks), lang


def test_the_sessions_figures_of_round_11_carry_their_findings():
    from report.publish.compose import compose_round
    r = compose_round(ROOT / "runs" / "round-11" / "bundle", "round-11")
    for fid in ("session_ttft", "session_hits", "lengths"):
        assert set(r.figures[fid].caption) == set(LANGS), fid
        assert all(k in r.ledger and r.ledger[k].present for k in _cited(r.figures[fid].caption)), fid


def test_the_kv_line_figure_draws_the_fit_whose_slope_the_page_quotes(reports):
    fig = reports["round-5"].figures["kv_linearity"]
    assert {"r.kv_lin_intercept", "r.kv_lin_slope"} <= set(fig.keys)
    from report.publish.figures.chart import TEXT
    for lang in LANGS:
        specs = str(fig.specs[lang])
        assert TEXT[lang]["kv_fit_line"] in specs and TEXT[lang]["theory"] in specs, lang


def test_sets_that_sweep_one_flag_are_named_by_its_value_on_the_flags_axis():
    from report.publish.compose import compose_round
    from report.publish.figures.chart import TEXT
    from report.publish.render.vega import _walk
    report = compose_round(ROOT / "runs" / "round-13" / "bundle", "round-13")
    fig = report.figures["sets_step_budget"]
    assert any(k.endswith(".step_token_budget") for k in fig.keys)
    assert set(fig.caption) == set(LANGS)               # which sets' flags did what they were expected to
    for lang in LANGS:
        titles = {d["x"]["title"] for d in _walk(fig.specs[lang]) if isinstance(d.get("x"), dict) and "title" in d["x"]}
        assert titles == {TEXT[lang]["set_value_step_token_budget"]}, lang
        sets = {r["set"] for d in _walk(fig.specs[lang]) if isinstance(d.get("values"), list)
                for r in d["values"] if isinstance(r, dict) and "set" in r}
        sets |= {r["set"] for ds in (fig.specs[lang].get("datasets") or {}).values() for r in ds if "set" in r}
        assert sets and all(not s.startswith("--") for s in sets), (lang, sets)


@pytest.mark.parametrize("itl_small, code", [(40.0, "budget_itl_falls"), (200.0, "budget_itl_holds")])
def test_the_budget_curve_says_whether_a_smaller_step_budget_shortened_the_itl_tail(itl_small, code):
    led = _led({"p.a.step_token_budget": 2048, "p.a.itl_ms_p99": itl_small, "p.a.output_tok_s": 6000.0,
                "p.b.step_token_budget": 8192, "p.b.itl_ms_p99": 180.0, "p.b.output_tok_s": 7100.0})
    assert C.cap_budget_curve(led, ["b", "a"])["en"] == C.word(f"finding.figcap_{code}", "en", lo="a", hi="b")
    assert C.cap_budget_curve(_led({"p.a.step_token_budget": 2048}), ["a"]) is None


@pytest.mark.parametrize("prompt, code", [(2000.0, "lengths_prompt_longer"), (100.0, "lengths_output_longer")])
def test_the_lengths_say_whether_prompts_or_outputs_carry_more_tokens(prompt, code):
    led = _led({"p.b.prompt_tokens_sent_mean": prompt, "p.b.output_tokens_sent_mean": 300.0})
    assert C.cap_lengths(led, "b", {})["en"] == C.word(f"finding.figcap_{code}", "en", p="b", at="b")
    assert C.cap_lengths(_led({"p.b.prompt_tokens_sent_mean": prompt}), "b", {}) is None


@pytest.mark.parametrize("bundle, modelled", [("tests/fixtures/corpus/cpu-budget-sweep/bundle", False),
                                               ("runs/round-13/bundle", True)])
def test_a_step_budget_sweep_places_its_curve_with_the_step_models_tail_beside_the_measured(bundle, modelled):
    """Where the sets sweep --max-num-batched-tokens over three values or more, the page places the
    curve over the budget, captioned, ITL p99 drawn beside the tail the step model predicts; the
    review prints the curve and leaves the sets' panels to the web page and the audit PDF."""
    from report.publish.compose import compose_round
    from report.publish.figures.chart import TEXT
    from report.publish.render.page import Page
    report = compose_round(ROOT / bundle, "budget")
    fig = report.figures["budget_curve"]
    assert set(fig.caption) == set(LANGS)
    assert any(k.endswith(".itl_ms_p99") for k in fig.keys)
    # the step model's tail where the GPU's roofs give one (a CPU engine has none)
    assert any(k.endswith(".itl_tail_ms_model") for k in fig.keys) is modelled
    for lang in LANGS:
        assert (TEXT[lang]["budget_series_itl_tail_ms_model"] in str(fig.specs[lang])) is modelled, lang
        page = Page(report, lang)
        svgs = {b.ref: "<svg></svg>" for b in page.blocks if b.kind == "figure"}
        review = page.assemble("pdf", svgs=svgs, part="review")
        assert 'id="fig-budget_curve"' in review and 'id="fig-sets_step_budget"' not in review, lang
        assert 'id="fig-sets_step_budget"' in page.assemble("pdf", svgs=svgs, part="audit"), lang
