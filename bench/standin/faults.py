"""What the stand-in answers with: its names, fault modes, error replies, a prompt's size."""

from __future__ import annotations

from typing import Any

from aiohttp import web

VERSION = "standin-1"
DEFAULT_MODEL = "standin"
TOKEN_TEXT = " tok"
FAULT_MODES = ("malformed", "badshape", "cut", "nodone", "http_400", "http_500", "http_503",
               "error_event", "short", "multi", "slow_headers", "stall", "huge")
MIX_MODES = ("none",) + FAULT_MODES
STEP_FAULTS = ("malformed", "badshape", "cut", "error_event", "multi", "stall", "huge")   # act during the stream
METRICS_MODES = ("ok", "500", "malformed", "timeout")
MALFORMED_PAGE = 'vllm:num_requests_running{engine="0" this is not exposition text\n'
HTTP_ERRORS = {"http_400": (400, "BadRequestError", "stand-in fault: bad request"),
               "http_500": (500, "InternalServerError", "stand-in fault: engine dead"),
               "http_503": (503, "ServiceUnavailableError", "stand-in fault: overloaded")}


def label_value(value: str) -> str:
    """VALUE escaped as an exposition-format label value."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class FaultError(ValueError):
    """A fault specification the stand-in does not know."""


def parse_fault(spec: Any) -> tuple[str, int | None]:
    """(mode, n) from "MODE", "MODE:N" or {"mode": MODE, "n": N}; ("none", None) for none."""
    if spec in (None, "", "none"):
        return "none", None
    if isinstance(spec, dict):
        mode, n = spec.get("mode"), spec.get("n")
    elif isinstance(spec, str):
        mode, _, n = spec.partition(":")
        n = n or None
    else:
        raise FaultError(f"standin_fault must be a string or an object, got {spec!r}")
    if mode not in FAULT_MODES and mode not in ("mix", "none"):
        raise FaultError(f"unknown stand-in fault {mode!r}; known: {', '.join(FAULT_MODES)}, mix")
    try:
        n = int(n) if n is not None else None
    except (TypeError, ValueError):
        raise FaultError(f"stand-in fault parameter must be an integer, got {n!r}") from None
    return mode, n


def openai_error(status: int, etype: str, message: str) -> web.Response:
    """An OpenAI-style error response."""
    return web.json_response({"error": {"message": message, "type": etype, "param": None,
                                        "code": status}}, status=status)


def prompt_tokens(prompt: Any) -> int:
    """Tokens of a prompt: exact for token ids, a word count for text (there is no tokenizer)."""
    if isinstance(prompt, list):
        if prompt and isinstance(prompt[0], list):
            prompt = prompt[0]
        elif prompt and isinstance(prompt[0], str):
            prompt = prompt[0]
    if isinstance(prompt, list):
        return len(prompt)
    if isinstance(prompt, str):
        return max(1, len(prompt.split()))
    return 0
