"""`serving-ledger explain`: the capacity planner for a model config."""

from __future__ import annotations

from report.planner import explain
from serving_ledger.verb import Verb

VERB = Verb("explain", "capacity planner from a model config", explain.add_arguments,
            explain.run, description=explain.DESCRIPTION)
