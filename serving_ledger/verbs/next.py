"""`serving-ledger next`: the next experiments, each with the plan that runs it (--write PLAN)."""

from __future__ import annotations

from report import cli
from serving_ledger.verb import Verb


def plan_problem(path: str, source: str) -> str | None:
    """Why the collector would refuse the plan file at PATH (named SOURCE), or None."""
    from bench.plan.parse import load_plan
    from bench.prompts import PlanError
    try:
        load_plan(path)
    except PlanError as e:
        return str(e).replace(path, source)
    return None


# `next --write` checks the plan it writes as the collector will read it.
VERB = Verb("next", "the next experiments the evidence calls for, each with the plan that runs it",
            cli.add_next_arguments, cli.guarded(cli.cmd_next), defaults={"check_plan": plan_problem})
