"""Verdicts from ledger values only: each point's validity and bottleneck, the findings, the next steps, the
comparison with other rounds. Imports `derive` and below; nothing of `publish`.
"""
