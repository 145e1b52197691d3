"""Length distributions (bench/lengths.py): each kind's bounds and moments, seeded draws, the
plan checks, and the prompts a point sends with them."""

from __future__ import annotations

import random
import statistics

import pytest

from bench.lengths import check_dist, length_sampler, longest
from bench.plan.parse import plan_from_dict
from bench.plan.spec import WorkloadSpec
from bench.prompts import PlanError
from bench.workload import make_prompts


def draws(spec: dict, nominal: int, n: int = 20_000, seed: int = 7) -> list[int]:
    rng = random.Random(seed)
    draw = length_sampler(spec, nominal)
    return [draw(rng) for _ in range(n)]


def test_fixed_draws_nothing_so_a_plan_without_distributions_sends_what_it_sent():
    rng = random.Random(3)
    state = rng.getstate()
    assert length_sampler({}, 256)(rng) == 256 and rng.getstate() == state


def test_uniform_has_vllms_range_ratio_bounds():
    xs = draws({"kind": "uniform", "range_ratio": 0.25}, 100)
    assert min(xs) == 75 and max(xs) == 125          # U[⌊100·0.75⌋, ⌈100·1.25⌉], both ends drawn
    assert longest({"kind": "uniform", "range_ratio": 0.25}, 101) == 127


def test_lognormal_has_the_stated_mean_and_sd_and_stays_within_its_clamp():
    xs = draws({"kind": "lognormal", "mean": 256, "sd": 128, "min": 1, "max": 100_000}, 64)
    assert statistics.fmean(xs) == pytest.approx(256, rel=0.03)
    assert statistics.stdev(xs) == pytest.approx(128, rel=0.08)
    clamped = draws({"kind": "lognormal", "mean": 256, "sd": 256, "min": 32, "max": 512}, 64)
    assert min(clamped) >= 32 and max(clamped) == 512


def test_a_mixture_draws_its_components_by_weight():
    xs = draws({"kind": "mixture", "components": [{"weight": 3, "kind": "fixed"},
                                                   {"weight": 1, "kind": "normal", "mean": 1000, "sd": 1,
                                                    "min": 990, "max": 1010}]}, 10)
    assert xs.count(10) / len(xs) == pytest.approx(0.75, abs=0.02)
    assert longest({"kind": "mixture", "components": [{"weight": 1}, {"weight": 1, "kind": "normal",
                                                                      "sd": 5, "max": 700}]}, 10) == 700


@pytest.mark.parametrize("spec,message", [
    ({"kind": "zipf"}, "is not one of"), ({"kind": "uniform", "range_ratio": 1.0}, "range_ratio"),
    ({"kind": "normal", "sd": 0, "max": 9}, "sd"), ({"kind": "lognormal", "sd": 5}, "needs a max"),
    ({"kind": "normal", "sd": 5, "min": 50, "max": 10}, "min 50 and max 10"),
    ({"kind": "mixture", "components": []}, "components"), ({"kind": "fixed", "sd": 3}, "unknown key"),
])
def test_a_distribution_no_draw_could_honour_is_refused_naming_its_key(spec, message):
    with pytest.raises(PlanError, match=message):
        check_dist(spec, "plan.toml [workload.output_dist]")


def test_a_plan_states_its_distributions_and_the_prompts_carry_each_requests_lengths(tmp_path):
    plan = plan_from_dict({"workload": {"input_len": 64, "output_len": 32,
                                        "output_dist": {"kind": "lognormal", "mean": 32, "sd": 16, "max": 128},
                                        "input_dist": {"kind": "uniform", "range_ratio": 0.5}}})
    prompts = make_prompts(plan.workload, 64, 32, 200, seed=11)
    assert {len(p.prompt) for p in prompts} == {p.input_len for p in prompts}     # each its own length
    assert min(p.input_len for p in prompts) >= 32 and max(p.input_len for p in prompts) <= 96
    assert len({p.max_tokens for p in prompts}) > 10 and max(p.max_tokens for p in prompts) <= 128
    again = make_prompts(plan.workload, 64, 32, 200, seed=11)
    assert [p.max_tokens for p in again] == [p.max_tokens for p in prompts]      # seeded
    prompts_file = tmp_path / "p.jsonl"
    prompts_file.write_text('{"prompt": "hello", "max_tokens": 4}\n')
    with pytest.raises(PlanError, match="own lengths"):
        plan_from_dict({"workload": {"kind": "jsonl", "jsonl": str(prompts_file), "output_dist": {"kind": "fixed"}}})


def test_a_shared_prefix_prompt_keeps_its_prefix_whatever_length_is_drawn():
    w = WorkloadSpec(kind="shared-prefix", input_len=64, prefix_len=48, num_prefixes=2,
                     input_dist={"kind": "uniform", "range_ratio": 0.9})
    prompts = make_prompts(w, 64, 8, 100, seed=5)
    assert min(p.input_len for p in prompts) == 49
    firsts = {tuple(p.prompt[:48]) for p in prompts}
    assert len(firsts) == 2
