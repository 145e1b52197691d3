"""What a round records before its engine starts: the served model's paths and config, the
provenance of the manifest, and every credential kept out of the bundle.
"""

from __future__ import annotations

import re
import shlex
import sys
import urllib.parse
from pathlib import Path
from typing import Any

from bench import replay
from bench.engine import TINY_MODEL_DIR
from bench.plan.spec import Plan
from bench.prompts import PlanError
from bench.provenance import (
    collect_host_metadata,
    collect_model_config,
    collect_tokenizer_vocab,
    collect_tool_metadata,
    model_dirs_of_command,
)
from bundle.redact import url_credentials


def served_model_paths(plan: Plan) -> tuple[str | None, str | None, str | None]:
    """(config path, tokenizer path, where the config path came from) of the served model:
    the plan's model_config, else the embedded model, else the launch command's model."""
    e = plan.engine
    if e.mode == "embedded":
        return e.model_config or str(TINY_MODEL_DIR), str(TINY_MODEL_DIR), \
            "[engine].model_config" if e.model_config else "the embedded model"
    model = tokenizer = None
    if e.mode == "launch":
        # Several servers (data parallel) serve one model: the first command line names it.
        first = e.all_commands()[0] if e.all_commands() else ""
        try:
            argv = shlex.split(first) if isinstance(first, str) else list(first)
        except ValueError:
            argv = []
        model, tokenizer = model_dirs_of_command(argv + list(e.flags))
    if e.model_config:
        return e.model_config, tokenizer, "[engine].model_config"
    if model and (Path(model) / "config.json").is_file():
        return str(Path(model) / "config.json"), tokenizer, "the launch command's model directory"
    return None, tokenizer, None


def dataset_tokenizer(plan: Plan) -> str | None:
    """The folder of the served model's tokenizer.json: the served model's, else the plan's
    [engine].model_config's folder, or that folder itself when it names one (an endpoint's
    model is known only from that)."""
    tok = served_model_paths(plan)[1]
    if tok is None and plan.engine.model_config:
        cfg = Path(plan.engine.model_config)     # config.json, or the model's folder itself
        tok = str(cfg if cfg.is_dir() else cfg.parent)
    return tok


def model_config_of(plan: Plan) -> tuple[dict | None, str | None]:
    """The served model's config.json and its path; PlanError where the plan names one that cannot be read."""
    config, src = collect_model_config(served_model_paths(plan)[0])
    if plan.engine.model_config and config is None:
        raise PlanError(f"{plan.source or 'plan'} [engine].model_config: cannot read a JSON "
                        f"config.json at {plan.engine.model_config}")
    return config, src


def initial_manifest(plan: Plan, endpoint_override: str | list[str] | None) -> dict[str, Any]:
    """Provenance known before the engine starts."""
    from bench.samplers.gpu import describe_gpus
    gpus, absent = describe_gpus()
    cfg_path, tok_path, cfg_how = served_model_paths(plan)
    config, cfg_src = model_config_of(plan)
    vocab, vocab_src = collect_tokenizer_vocab(tok_path)
    model_vocab = (config or {}).get("vocab_size")
    if vocab and isinstance(model_vocab, int) and vocab < model_vocab:
        print(f"warning: the served tokenizer ({vocab_src}) knows {vocab:,} ids but the model "
              f"emits ids up to {model_vocab:,}: with random weights the server's detokenizer "
              "can become the bottleneck", file=sys.stderr)
    return {
        "tool": collect_tool_metadata(), "host": collect_host_metadata(),
        "gpus": gpus, "gpu_absent_reason": absent,
        "engine": {"mode": plan.engine.mode, "endpoint_override": endpoint_override},
        "model": {"config": config, "config_source": cfg_src,
                  "config_found_by": cfg_how if config is not None else None,
                  "tokenizer_vocab_size": vocab, "tokenizer_source": vocab_src,
                  "name": "tiny-qwen2" if plan.engine.mode == "embedded" else None,
                  "load_format": "dummy" if plan.engine.mode == "embedded" else None},
        "plan": plan.to_dict(),
        "workload_source": replay.source_facts(plan.workload, dataset_tokenizer(plan))
        if plan.workload.kind in replay.KINDS else None,
    }


# Server flags whose value is a credential; environment names that hold one.
SECRET_FLAGS = ("--api-key", "--hf-token", "--ssl-keyfile-password")
SECRET_ENV = re.compile(r"(?:^|_)(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD)(?:$|_)", re.I)


def secrets_of(plan: Plan, api_key: str | None) -> list[str]:
    """Every credential the round knows of, to be kept out of the bundle."""
    out = [api_key] if api_key else []
    e = plan.engine
    argv: list[str] = []
    for cmd in e.all_commands():      # every server's command line
        try:
            argv += shlex.split(cmd) if isinstance(cmd, str) else list(cmd or [])
        except ValueError:
            pass
    argv += [str(f) for f in e.flags] + [str(f) for fl in plan.sweep.server_flags for f in fl]
    for i, a in enumerate(argv):
        if a in SECRET_FLAGS and i + 1 < len(argv):
            out.append(argv[i + 1])
        elif a.startswith(tuple(f + "=" for f in SECRET_FLAGS)):
            out.append(a.split("=", 1)[1])
    out += [str(v) for k, v in (e.env or {}).items() if SECRET_ENV.search(k)]
    # A URL's user and password (an exporter behind basic auth: aiohttp sends them); endpoints
    # carrying them are refused by the plan check (bench/urls.py).
    creds = [c for url in [plan.sampler.gpu_metrics, *e.all_endpoints()] if url
             and (c := url_credentials(url))]
    out += creds + [urllib.parse.unquote(c) for c in creds]   # as written, and as decoded
    return out
