"""`next` proposes only plans the collector's own check accepts: no flag step for a round whose
server was started elsewhere (endpoint mode), and a step that changes a replay round's workload
kind leaves the replay's keys behind."""

from __future__ import annotations

import json
import shutil
import tomllib

from bench.plan.parse import plan_from_dict
from report.cli import read_recorded_plan
from report.publish.compose import compose_rounds
from report.publish.plans import applied, plan_toml
from tests.conftest import FIXTURES, ROOT


def test_an_endpoint_round_gets_its_flag_steps_said_without_a_plan(tmp_path):
    b = tmp_path / "b"
    shutil.copytree(FIXTURES / "cpu-demo", b)
    (launch,) = compose_rounds([(b, "b")])
    assert "plan" in next(st for st in launch.facts.next_steps if st["id"] == "enable_mfu")
    m = json.loads((b / "manifest.json").read_text())
    m["plan"]["engine"].update(mode="endpoint", endpoint="http://127.0.0.1:8000")
    (b / "manifest.json").write_text(json.dumps(m))
    (endpoint,) = compose_rounds([(b, "b")])
    said = next(st for st in endpoint.facts.next_steps if st["id"] == "enable_mfu")
    assert "plan" not in said and "expect" not in said and said["en"]


def test_a_replay_rounds_prefix_caching_step_is_a_plan_the_collector_takes():
    recorded = read_recorded_plan(ROOT / "runs" / "round-10" / "bundle")
    assert recorded["workload"]["kind"] == "trace" and recorded["workload"]["trace"]
    changes = {"workload": {"kind": "shared-prefix", "prefix_len": 96, "num_prefixes": 4},
               "sweep": {"concurrency": [1], "input_len": [128],
                         "server_flags": [["--no-enable-prefix-caching"], ["--enable-prefix-caching"]]}}
    plan = applied(recorded, changes, "round-14", "t")
    assert not {"trace", "format", "dataset", "time_scale"} & set(plan["workload"])
    data = tomllib.loads(plan_toml(plan, "# step"))
    checked = plan_from_dict(data, "round-14/plan.toml")     # the collector's check: no refusal
    assert checked.workload.kind == "shared-prefix" and len(checked.points()) == 2
    same_kind = applied(recorded, {"sweep": {"concurrency": [2]}}, "round-14", "t")
    assert same_kind["workload"]["trace"] == recorded["workload"]["trace"]
