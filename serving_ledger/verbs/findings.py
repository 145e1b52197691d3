"""`serving-ledger findings`: each point's validity and bottleneck with evidence, and the findings."""

from __future__ import annotations

from report import cli
from serving_ledger.verb import Verb

VERB = Verb("findings",
            "each point's validity and bottleneck with evidence, and the findings",
            cli.add_text_arguments, cli.guarded(cli.cmd_findings))
