"""A server's flags as its launch command, its server set and its log state them.

The bundle keeps the launch command (`engine.command`, a string or a list of words), each server
set's extra flags (`server_flags` in a point's settings) and the server log, whose
`non default args` line names the settings the server took; a flag's value is the last one
given, in that order of precedence.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

# The words a launch command starts with before the server's own flags: `python -m <module>`.
LAUNCHER_WORDS = 3


def command_words(command: Any) -> list[str]:
    """A launch command as its words (a string is split as a shell would)."""
    if isinstance(command, str):
        try:
            return shlex.split(command)
        except ValueError:
            return command.split()
    return [str(w) for w in command or ()]


def flag_value(words: Sequence[str], flag: str) -> str | None:
    """The value the last `--flag V` or `--flag=V` in WORDS gives, None where none does."""
    found = None
    for i, w in enumerate(words):
        if w == flag and i + 1 < len(words):
            found = words[i + 1]
        elif w.startswith(flag + "="):
            found = w.split("=", 1)[1]
    return found


def server_flag(flag: str, command: Any, set_flags: Any = None, log_args: Mapping | None = None) -> str | None:
    """A flag's value: the server set's flags, else the launch command's, else the server log's
    non-default arguments (what a server started elsewhere states); None where none gives it."""
    for words in (command_words(set_flags), command_words(command)):
        value = flag_value(words, flag)
        if value is not None:
            return value
    logged = (log_args or {}).get(flag.removeprefix("--").replace("-", "_"))
    return None if logged is None else str(logged)


def has_flag(flag: str, command: Any, set_flags: Any = None) -> bool:
    """Whether the launch command or the set's flags hold the switch FLAG."""
    return flag in command_words(set_flags) + command_words(command)


def switch_state(words: Sequence[str], name: str) -> bool | None:
    """Whether the boolean switch `--NAME` is on in WORDS: the last of `--NAME` and `--no-NAME`
    decides (vLLM's argparse reads them so); None where neither is given."""
    state = None
    for w in words:
        if w == f"--{name}":
            state = True
        elif w == f"--no-{name}":
            state = False
    return state


def flag_pairs(words: Sequence[str]) -> dict[str, str]:
    """Each `--flag` of WORDS with its value ("" for a switch), the last one given winning."""
    out: dict[str, str] = {}
    words = list(words)
    for i, w in enumerate(words):
        if not w.startswith("--"):
            continue
        flag, eq, value = w.partition("=")
        if eq:
            out[flag] = value
        elif i + 1 < len(words) and not words[i + 1].startswith("--"):
            out[flag] = words[i + 1]
        else:
            out[flag] = ""
    return out


def set_names(set_flags: Mapping[int, Sequence[str]]) -> dict[int, str]:
    """Each server set named by the flags whose values differ between the sets ("--max-num-seqs 8",
    a switch by itself, "" for a set that gives none of them)."""
    pairs = {s: flag_pairs(command_words(f)) for s, f in set_flags.items()}
    varying = [f for f in dict.fromkeys(k for p in pairs.values() for k in p)
               if len({p.get(f) for p in pairs.values()}) > 1]
    return {s: " ".join(f"{f} {p[f]}".strip() for f in varying if f in p) for s, p in pairs.items()}
