"""`serving-ledger export`: one round's points in another tool's result format (llm-d's benchmark report)."""

from __future__ import annotations

from report import cli
from serving_ledger.verb import Verb

VERB = Verb("export",
            "one round's points in another tool's result format (llm-d's benchmark report)",
            cli.add_export_arguments, cli.guarded(cli.cmd_export))
