"""The verbs of `serving-ledger`, one module each, in the order `--help` lists them.

A verb is one module here declaring `VERB` (serving_ledger/verb.py) and its line below; the
command tree (serving_ledger/cli.py) and README.md's list of verbs are made from `VERBS`.
"""

from __future__ import annotations

from serving_ledger.verbs import build, explain, export, findings, ledger, next, run, summary

VERBS = (run.VERB, build.VERB, summary.VERB, ledger.VERB, findings.VERB, next.VERB,
         export.VERB, explain.VERB)
