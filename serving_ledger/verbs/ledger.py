"""`serving-ledger ledger`: every ledger value of one bundle, with its unit or why it is absent."""

from __future__ import annotations

from report import cli
from serving_ledger.verb import Verb

VERB = Verb("ledger",
            "every ledger value of one bundle, with its unit or why it is absent",
            cli.add_text_arguments, cli.guarded(cli.cmd_ledger))
