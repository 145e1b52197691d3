"""A short round plan for tests against the stand-in (bench/standin/), with no engine.

The plan names the embedded model's config.json, vendored in tests/fixtures/models, so that
the report has an architecture (KV section) though the stand-in serves no model.
"""

from __future__ import annotations

from pathlib import Path

TINY_CONFIG = Path(__file__).resolve().parent / "fixtures" / "models" / "tiny-qwen2.config.json"

# The [engine] table of a round against the stand-in: only the model's config.
STANDIN_ENGINE = f"""
[engine]
model_config = "{TINY_CONFIG}"
"""

# A two-point round of a few short requests.
STANDIN_ROUND_PLAN = STANDIN_ENGINE + """
[workload]
input_len = 16
output_len = 8
[sweep]
concurrency = [1, 2]
requests_per_point = 6
cooldown_s = 0.2
[sampler]
metrics_interval_s = 0.25
"""
