"""Prompts for a point: exact-length token-id prompts, shared-prefix groups, or a JSONL file.

Everything random comes from one `random.Random(seed)` per point, so a round is repeatable.
"""

from __future__ import annotations

import random

from bench.lengths import length_sampler
from bench.plan.spec import WorkloadSpec
from bench.prompts import PlanError, Prompt, read_prompt_file


def random_ids(rng: random.Random, n: int, low: int, high: int) -> list[int]:
    """N token ids drawn uniformly from [low, high)."""
    return [rng.randrange(low, high) for _ in range(n)]


def point_seed(plan_seed: int, point_index: int) -> int:
    """The seed of one point, derived from the plan's seed and the point's position."""
    return plan_seed * 1_000_003 + point_index


def make_prompts(w: WorkloadSpec, input_len: int, output_len: int, count: int,
                 seed: int) -> list[Prompt]:
    """COUNT prompts of the workload's kind at INPUT_LEN tokens (each request's lengths drawn
    from the workload's distributions, where it gives them: fixed ones draw nothing, so a
    plan without distributions sends what it always sent)."""
    rng = random.Random(seed)
    draw_in, draw_out = length_sampler(w.input_dist, input_len), length_sampler(w.output_dist, output_len)
    if w.kind == "random":
        out = []
        for _ in range(count):
            n_in, n_out = draw_in(rng), draw_out(rng)
            out.append(Prompt(random_ids(rng, n_in, w.token_id_low, w.token_id_high), n_in, n_out))
        return out
    if w.kind == "shared-prefix":
        if not 0 < w.prefix_len < input_len:
            raise PlanError(f"[workload].prefix_len must be between 1 and input_len-1 "
                            f"(got {w.prefix_len} for input_len {input_len})")
        prefixes = [random_ids(rng, w.prefix_len, w.token_id_low, w.token_id_high)
                    for _ in range(max(1, w.num_prefixes))]
        out = []
        for i in range(count):
            g = i % len(prefixes)
            # A drawn prompt keeps its shared prefix and at least one token of its own.
            n_in, n_out = max(w.prefix_len + 1, draw_in(rng)), draw_out(rng)
            suffix = random_ids(rng, n_in - w.prefix_len, w.token_id_low, w.token_id_high)
            out.append(Prompt(prefixes[g] + suffix, n_in, n_out, group=g))
        return out
    rows = read_prompt_file(w.jsonl, output_len)
    rng.shuffle(rows)
    return [rows[i % len(rows)] for i in range(count)]


def arrival_offsets(n: int, rate: float, burstiness: float, seed: int) -> list[float]:
    """Send times (s from the point's start) of N open-loop arrivals at RATE req/s.

    Gaps are gamma-distributed with shape BURSTINESS and mean 1/RATE (shape 1 = Poisson).
    Unlike `vllm bench serve`, the schedule is not rescaled to end at N/rate: the gaps are
    kept as drawn so that they follow the stated distribution.
    """
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        out.append(t)
        t += rng.gammavariate(burstiness, 1.0 / (rate * burstiness))
    return out


def stream_start_offsets(concurrency: int, ramp_s: float, seed: int) -> list[float]:
    """When each of a closed loop's streams starts, in seconds from the point's start: drawn
    uniformly over the ramp (seeded), sorted. Evenly spaced starts can fall a whole request
    lifetime apart and so start in phase; random ones do not line up with any lifetime."""
    if concurrency <= 1 or ramp_s <= 0:
        return [0.0] * concurrency
    rng = random.Random(seed ^ 0x5EED)
    return [0.0] + sorted(rng.uniform(0.0, ramp_s) for _ in range(concurrency - 1))
