"""`serving-ledger <verb>`: the one command line of both halves, one argparse tree made from the
verbs of serving_ledger/verbs/ (README.md lists them, from `VERBS`).

`python -m serving_ledger` and the Makefile call `main`. Bad flags are one line on stderr and
exit 2, as every other bad input.
"""

from __future__ import annotations

import argparse
import sys

from serving_ledger.verbs import VERBS


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line on stderr and exit status 2."""

    def error(self, message: str):
        """Print `PROG: error: MESSAGE` and exit 2."""
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> Parser:
    """The command tree: one sub-command per verb, each with the flags its module declares."""
    ap = Parser(prog="serving-ledger", description="Benchmark LLM inference servers and report "
                "every number from raw samples.")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="verb", parser_class=Parser)
    for verb in VERBS:
        c = sub.add_parser(verb.name, help=verb.help, description=verb.description)
        verb.add_arguments(c)
        c.set_defaults(run=verb.run, **verb.defaults)
    return ap


def verb_list() -> str:
    """The verbs as README.md lists them: one `- \\`name\\` help` line each, in VERBS order."""
    return "".join(f"- `{v.name}`: {v.help}\n" for v in VERBS)


def main(argv: list[str] | None = None) -> int:
    """Run one verb; its exit status (--help: 0; bad flags: 2)."""
    try:
        args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 0
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
