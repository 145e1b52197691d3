"""A verb of `serving-ledger`: its name, its one-line help, its flags and what runs it."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass(frozen=True)
class Verb:
    """One sub-command: `add_arguments` declares its flags, `run` takes the parsed flags and
    returns the exit status (bad input: one line on stderr and 2)."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    description: str | None = None
    # Further values the run reads from the parsed flags (set_defaults).
    defaults: dict[str, Any] = field(default_factory=dict)
