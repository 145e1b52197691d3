"""`serving-ledger summary`: per-point client statistics of one bundle."""

from __future__ import annotations

from report import cli
from serving_ledger.verb import Verb

VERB = Verb("summary", "per-point client statistics of one bundle",
            cli.add_bundle_arguments, cli.guarded(cli.cmd_summary))
