"""`serving-ledger run`: record a round (the collector, bench/)."""

from __future__ import annotations

from bench import cli
from report.judge.search import point_meets_slo
from serving_ledger.verb import Verb

# A search sweep asks the report's SLO judge which point to run next.
VERB = Verb("run", "record a round: run its points and write a bundle of raw samples",
            cli.add_run_arguments, lambda args: cli.run(args, judge=point_meets_slo))
