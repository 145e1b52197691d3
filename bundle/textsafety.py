"""Strings from a bundle or a plan (a model name, an error text, a key) shown as they are, never as layout.

Bidirectional controls (U+202E turns "gnp.exe" around) and other invisible format or control
characters are replaced by a visible `[U+XXXX]`, so a page and its PDF show what the bundle
holds rather than what the characters would make of it.
"""

from __future__ import annotations

import re
import sys
import unicodedata

# Every format (Cf) and control (Cc) character but tab, newline and carriage return.
_HIDDEN = re.compile("[" + "".join(
    re.escape(chr(c)) for c in range(sys.maxunicode + 1)
    if unicodedata.category(chr(c)) in ("Cf", "Cc") and chr(c) not in "\t\n\r") + "]")


def neutralise_controls(text: str) -> str:
    """TEXT with each bidirectional, invisible or control character written as `[U+XXXX]`."""
    return _HIDDEN.sub(lambda m: f"[U+{ord(m.group()):04X}]", text)


def terminal_line(text: str) -> str:
    """TEXT as one terminal line: neutralised, and a carriage return or newline inside it (which
    would overwrite or forge a line) written as `[U+XXXX]` too."""
    return neutralise_controls(text).replace("\r", "[U+000D]").replace("\n", "[U+000A]")


def json_text(text: str) -> str:
    """JSON text with each character neutralise_controls would replace written as a JSON escape
    instead (the same JSON value, nothing hidden in a terminal)."""
    return _HIDDEN.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
