"""Serving Ledger: benchmark LLM inference servers, report every number from raw samples.

Subpackages: `serving_ledger.bundle` (the run bundle format; imports nothing else of ours),
`serving_ledger.bench` (the collectors) and `serving_ledger.report` (the report builder),
each of the last two depending on the bundle layer only.

In a checkout the subpackages are the top-level folders `bundle/`, `bench/`, `report/` and
`templates/`; the wheel installs them under this package (pyproject.toml maps them), so
the same import names work in both.
"""

from pathlib import Path as _Path

_HERE = _Path(__file__).resolve().parent
_CHECKOUT = _HERE.parent
# Invariant: the checkout's folders are added only where this file is not an installed copy
# (an installed copy has its subpackages beside it).
if not (_HERE / "bundle").is_dir() and (_CHECKOUT / "bundle" / "__init__.py").is_file():
    __path__.append(str(_CHECKOUT))  # noqa: F821 (a package's __path__)
