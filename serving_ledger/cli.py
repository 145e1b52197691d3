"""`serving-ledger run | build | summary | ledger | findings | explain`: one command for both halves.

`run` is the collector (`python -m bench run`); the rest are the report (`python -m report`).
Each half is imported only when its command runs.
"""

from __future__ import annotations

import sys

USAGE = ("usage: serving-ledger {run|build|summary|ledger|findings|explain} [options]\n"
         "  run       record a round (python -m bench run --help)\n"
         "  build     build the site from bundles (python -m report build --help)\n"
         "  summary   per-point statistics of a bundle\n"
         "  ledger    every ledger value of a bundle (--json)\n"
         "  findings  validity, bottleneck and findings of a bundle (--json)\n"
         "  explain   the capacity planner for a model config")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    if argv[0] == "run":
        from bench.cli import main as bench_main
        return bench_main(argv)
    if argv[0] in ("build", "summary", "ledger", "findings", "explain"):
        from report.cli import main as report_main
        return report_main(argv)
    print(f"serving-ledger: unknown command {argv[0]!r}\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
