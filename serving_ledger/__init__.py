"""Serving Ledger: benchmark LLM inference servers, report every number from raw samples.

This package is the console script (`serving-ledger`, `python -m serving_ledger`). The layers
are the checkout's top-level packages, each imported by its folder's name: `bundle` (the run
bundle format; imports nothing else of ours), `bench` (the collectors) and `report` (the
report builder), the last two depending on `bundle` only. A module's import name is its path
(`report.ledger` is `report/ledger.py`), so every tool that reads imports finds it, and each
module is loaded under that one name. pyproject.toml lists the packages; nothing is mapped.
"""
