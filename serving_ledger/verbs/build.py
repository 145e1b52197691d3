"""`serving-ledger build`: recompute every round's ledger and render site/."""

from __future__ import annotations

from report import cli
from serving_ledger.verb import Verb

VERB = Verb("build", "recompute every round's ledger and render site/",
            cli.add_build_arguments, cli.guarded(cli.cmd_build))
