"""Plan errors, the text files a plan names, and prompts read from a JSONL file.

The base of the plan modules: `plan` (validation) and `workload` (prompt generation) both
read files through here, so neither imports the other to do it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bundle import textfile
from bundle.schema import MAX_COUNT


class PlanError(Exception):
    """A plan that cannot be used; the message names the file and the key."""


MAX_TEXT_FILE_BYTES = 1 << 30   # a prompt file larger than this is not one
MAX_TOKENS = MAX_COUNT     # a token count must fit the bundle's chunk column


def read_text_file(path: str | Path, where: str, limit: int = MAX_TEXT_FILE_BYTES) -> str:
    """The UTF-8 text of PATH, up to LIMIT bytes (bundle/textfile.py); PlanError led by WHERE."""
    return textfile.read_text_file(path, where, limit, PlanError)


@dataclass(frozen=True)
class Prompt:
    prompt: Any          # list[int] token ids, a string, or chat messages
    input_len: int | None  # exact length when known (token-id prompts), else None
    max_tokens: int
    group: int | None = None  # shared-prefix group


def read_prompt_file(path: str, output_len: int, where: str = "[workload].jsonl") -> list[Prompt]:
    """The prompts of a JSONL file ({"prompt" or "messages", "max_tokens"?} a line), checked."""
    text = read_text_file(path, f"{where}: {path}")
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            prompt = row["prompt"] if "prompt" in row else row["messages"]
        except (json.JSONDecodeError, KeyError, TypeError, RecursionError):
            raise PlanError(f"{path} line {n}: expected an object with \"prompt\" or "
                            "\"messages\"") from None
        max_tokens = row.get("max_tokens", output_len)
        if (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
                or max_tokens > MAX_TOKENS):
            raise PlanError(f"{path} line {n}: max_tokens {max_tokens!r:.40} is not an integer "
                            f"from 1 to {MAX_TOKENS:,}")
        n_in = len(prompt) if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt) else None
        rows.append(Prompt(prompt, n_in, max_tokens))
    if not rows:
        raise PlanError(f"{path}: no prompts")
    return rows
