"""`serving-ledger <verb>`: the one command line of both halves, one argparse tree.

    run       record a round (the collector, bench/)
    build     build the site from bundles (the report, report/)
    summary   per-point statistics of a bundle
    ledger    every ledger value of a bundle (--json)
    findings  validity, bottleneck and findings of a bundle (--json)
    next      the next experiments, each with the plan that runs it (--write PLAN)
    explain   the capacity planner for a model config

`python -m serving_ledger` and the Makefile call `main`. Bad flags are one line on stderr and
exit 2, as every other bad input.
"""

from __future__ import annotations

import argparse
import sys

from bench import cli as bench_cli
from report import cli as report_cli
from report.judge.search import point_meets_slo
from report.planner import explain


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line on stderr and exit status 2."""

    def error(self, message: str):
        """Print `PROG: error: MESSAGE` and exit 2."""
        self.exit(2, f"{self.prog}: error: {message}\n")


def plan_problem(path: str, source: str) -> str | None:
    """Why the collector would refuse the plan file at PATH (named SOURCE), or None."""
    from bench.plan import load_plan
    from bench.prompts import PlanError
    try:
        plan = load_plan(path)
    except PlanError as e:
        return str(e).replace(path, source)
    del plan
    return None


def build_parser() -> Parser:
    """The command tree: one sub-command per verb, each with the flags its half declares."""
    ap = Parser(prog="serving-ledger", description="Benchmark LLM inference servers and report "
                "every number from raw samples.")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="verb", parser_class=Parser)
    r = sub.add_parser("run", help="record a round: run its points and write a bundle of raw samples")
    bench_cli.add_run_arguments(r)
    # A search sweep asks the report's SLO judge which point to run next.
    r.set_defaults(run=lambda args: bench_cli.run(args, judge=point_meets_slo))
    for name, (text, add_arguments, _) in report_cli.COMMANDS.items():
        c = sub.add_parser(name, help=text)
        add_arguments(c)
        # `next --write` checks the plan it writes as the collector will read it.
        c.set_defaults(run=report_cli.run, check_plan=plan_problem)
    e = sub.add_parser("explain", help="capacity planner from a model config",
                       description=explain.DESCRIPTION)
    explain.add_arguments(e)
    e.set_defaults(run=explain.run)
    return ap


def main(argv: list[str] | None = None) -> int:
    """Run one verb; its exit status (--help: 0; bad flags: 2)."""
    try:
        args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 0
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
