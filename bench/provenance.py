"""Provenance collected by small functions: tool, Python, host, git revision, model config."""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path

from bench import __version__
from bench.prompts import PlanError, read_text_file
from bundle.server_flags import flag_value

# A model's config.json is a few KB; a larger "config" is not one.
MAX_CONFIG_BYTES = 16 << 20

ROOT = Path(__file__).resolve().parents[1]


def collect_git_revision() -> str | None:
    """The git revision of the tool's checkout, with `-dirty` when it has local changes."""
    try:
        rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--",
                                "bundle", "bench", "report"], capture_output=True, text=True, timeout=5).stdout
        return (rev + ("-dirty" if dirty.strip() else "")) if rev else None
    except (OSError, subprocess.SubprocessError):
        return None


def collect_tool_metadata() -> dict:
    """Tool name and version, git revision, Python and platform, and how the client reads."""
    from bench.httpstream.sockets import reader_name
    from bench.loop import loop_name
    return {"name": "serving-ledger", "version": __version__, "git_revision": collect_git_revision(),
            "python": sys.version.split()[0], "platform": platform.platform(),
            "event_loop": loop_name(), "stream_reader": reader_name(),
            "chunk_times": ("arrival of the chunk's own TCP segment (packet ring) on plain-HTTP "
                            "reads where the process may open one and one process loads the "
                            "server (client.jsonl's reads_packet_stamped counts them); else the "
                            "kernel receive time (SO_TIMESTAMPNS) of the read's newest segment "
                            "on reads the kernel stamps; else the read callback's clock"
                            if sys.platform == "linux" else "the read callback's clock")}


def collect_host_metadata() -> dict:
    """Host name, CPU model, logical cores and memory of the machine running the client."""
    cpu = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = None
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        pass
    return {"hostname": socket.gethostname(), "cpu_model": cpu or platform.processor() or None,
            "cpu_count": os.cpu_count(), "memory_bytes": mem, "machine": platform.machine()}


def collect_model_config(path: str | Path | None) -> tuple[dict | None, str | None]:
    """The served model's config.json and where it was read, or (None, None) if unavailable."""
    if not path:
        return None, None
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:
        config = json.loads(read_text_file(p, str(p), limit=MAX_CONFIG_BYTES),
                            parse_constant=_refuse_constant)
    except (PlanError, ValueError, RecursionError):   # NaN or Infinity too; nesting past the stack
        return None, None
    return (config, str(p)) if isinstance(config, dict) else (None, None)


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a finite number")


def model_dirs_of_command(argv: list[str]) -> tuple[str | None, str | None]:
    """(model, tokenizer) paths named by a server command line: `--model DIR` or
    `vllm serve DIR`, and `--tokenizer DIR` (the model's when absent)."""
    model = flag_value(argv, "--model")
    if model is None:
        for i, a in enumerate(argv[:-1]):
            if Path(a).name == "vllm" and argv[i + 1] == "serve" and i + 2 < len(argv) \
                    and not argv[i + 2].startswith("-"):
                model = argv[i + 2]
                break
    return model, flag_value(argv, "--tokenizer") or model


def collect_tokenizer_vocab(path: str | Path | None) -> tuple[int | None, str | None]:
    """One past the largest id the tokenizer in directory PATH knows (vocabulary and added
    tokens), and the file it was read from; (None, None) without a readable tokenizer.json."""
    if not path:
        return None, None
    p = Path(path)
    p = p / "tokenizer.json" if p.is_dir() else p
    try:
        tok = json.loads(p.read_text(encoding="utf-8"))
        ids = set((tok.get("model") or {}).get("vocab", {}).values())
        ids |= {t.get("id") for t in tok.get("added_tokens") or [] if isinstance(t, dict)}
    except (OSError, ValueError, AttributeError, TypeError, RecursionError):
        return None, None
    ids = {i for i in ids if isinstance(i, int)}
    return (max(ids) + 1 if ids else None), str(p)
