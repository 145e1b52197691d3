"""Engine launcher: start a server for a round, wait for /health, and always stop it.

Three modes:
    embedded  the local CPU vLLM in .venv-engine serving the tiny model (the default)
    launch    any command line the user gives (e.g. `vllm serve ... --port 8000` on a GPU host)
    endpoint  a server that is already running; used as is, never started or stopped

Invariant: a server this module started is stopped before `Engine.stop()` returns, whatever
happened (failed round, exception, Ctrl-C): SIGTERM to its process group, then SIGKILL after
a grace period. The server runs in its own session so the whole group can be signalled.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from bundle.files import server_log_name
from bundle.redact import API_KEY_ENV

ROOT = Path(__file__).resolve().parents[1]
# The embedded engine's home: its environment (.venv-engine) and model (.engine/tiny-qwen2).
# SERVING_LEDGER_HOME sets it; by default it is the checkout the package runs from.
ENGINE_HOME = Path(os.environ.get("SERVING_LEDGER_HOME") or ROOT)
ENGINE_PYTHON = ENGINE_HOME / ".venv-engine" / "bin" / "python"
TINY_MODEL_DIR = ENGINE_HOME / ".engine" / "tiny-qwen2"
SERVED_NAME = "tiny"

# Flags of the embedded engine: eager mode and the uni executor start in ~40-55 s instead of
# 60-116 s on these CPUs; per-request metrics put the server's own timings in the usage chunk.
EMBEDDED_FLAGS = [
    "--served-model-name", SERVED_NAME, "--load-format", "dummy", "--max-model-len", "2048",
    "--enforce-eager", "--distributed-executor-backend", "uni", "--dtype", "bfloat16",
    "--enable-per-request-metrics", "--disable-uvicorn-access-log",
]
EMBEDDED_ENV = {"HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "TRANSFORMERS_OFFLINE": "1",
                "VLLM_CPU_KVCACHE_SPACE": "1", "PYTHONUNBUFFERED": "1"}


def server_environment(inherited: dict[str, str], given: dict[str, str]) -> dict[str, str]:
    """A launched server's environment: this process's, less the client's API key (a server
    gets a key only where the plan's [engine].env or its command line gives one), plus GIVEN."""
    return {**{k: v for k, v in inherited.items() if k != API_KEY_ENV}, **given}


class EngineError(Exception):
    """The engine could not be started or did not become healthy; the message says why."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    """GET URL; return (status, body), status 0 when the connection failed."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (urllib.error.URLError, OSError, TimeoutError):
        return 0, b""


def json_field(body: bytes, key: str):
    """BODY's JSON object's KEY, None when BODY is not a JSON object (an HTML page, a proxy's
    error text)."""
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):   # nesting past the stack too
        return None
    return value.get(key) if isinstance(value, dict) else None


@dataclass
class Engine:
    """A server the round talks to, started by us (embedded/launch) or not (endpoint)."""

    mode: str
    endpoint: str
    command: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    log_path: Path | None = None
    proc: subprocess.Popen | None = None
    _log_file: object = None

    @classmethod
    def embedded(cls, flags: list[str] | None = None, env: dict[str, str] | None = None,
                 port: int | None = None, model_dir: Path = TINY_MODEL_DIR) -> "Engine":
        """The local CPU vLLM serving the tiny model, with extra server FLAGS."""
        if not ENGINE_PYTHON.exists():
            raise EngineError(f"{ENGINE_PYTHON} is missing: run `make setup` first")
        if not (model_dir / "config.json").exists():
            raise EngineError(f"{model_dir}/config.json is missing: run `make setup` first")
        port = port or free_port()
        cmd = [str(ENGINE_PYTHON), "-m", "vllm.entrypoints.openai.api_server",
               "--model", str(model_dir), "--host", "127.0.0.1", "--port", str(port),
               *EMBEDDED_FLAGS, *(flags or [])]
        return cls(mode="embedded", endpoint=f"http://127.0.0.1:{port}", command=cmd,
                   env={**EMBEDDED_ENV, **(env or {})})

    @classmethod
    def launch(cls, command: str | list[str], endpoint: str, flags: list[str] | None = None,
               env: dict[str, str] | None = None) -> "Engine":
        """Any server command line the user gives, reachable at ENDPOINT once healthy."""
        cmd = shlex.split(command) if isinstance(command, str) else list(command)
        return cls(mode="launch", endpoint=endpoint.rstrip("/"), command=cmd + list(flags or []),
                   env=dict(env or {}))

    @classmethod
    def external(cls, endpoint: str) -> "Engine":
        """A server already running at ENDPOINT; never started or stopped by us."""
        return cls(mode="endpoint", endpoint=endpoint.rstrip("/"))

    @property
    def owned(self) -> bool:
        return self.mode != "endpoint"

    @property
    def endpoints(self) -> list[str]:
        return [self.endpoint]

    def start(self, log_path: Path, timeout_s: float = 300.0) -> None:
        """Start the server writing its log to LOG_PATH and wait until /health answers 200."""
        if not self.owned:
            self.wait_healthy(timeout_s=min(timeout_s, 30.0))
            return
        self.log_path = Path(log_path)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open(self.log_path, "ab")
        env = server_environment(os.environ, self.env)
        self.proc = subprocess.Popen(
            self.command, stdout=self._log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env, start_new_session=True, cwd=str(ROOT),
        )
        try:
            self.wait_healthy(timeout_s=timeout_s)
        except BaseException:
            self.stop()
            raise

    def wait_healthy(self, timeout_s: float) -> None:
        """Poll /health until 200; fail early if our server process exits."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise EngineError(f"the engine exited with status {self.proc.returncode} before "
                                  f"becoming healthy; see {self.log_path}\n{self.log_tail()}")
            status, _ = http_get(self.endpoint + "/health", timeout=2.0)
            if status == 200:
                return
            time.sleep(0.5)
        raise EngineError(f"{self.endpoint}/health did not answer 200 within {timeout_s:.0f} s"
                          + (f"; see {self.log_path}\n{self.log_tail()}" if self.log_path else ""))

    def alive(self) -> bool:
        """Whether the server answers /health now (and, if ours, its process runs)."""
        if self.proc is not None and self.proc.poll() is not None:
            return False
        return http_get(self.endpoint + "/health", timeout=2.0)[0] == 200

    def log_tail(self, lines: int = 15) -> str:
        if not self.log_path or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, grace_s: float = 15.0) -> int | None:
        """SIGTERM the server's process group, SIGKILL it after GRACE_S; return its exit status."""
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        try:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                try:
                    proc.wait(timeout=grace_s)
                except subprocess.TimeoutExpired:
                    pass
            # Children (EngineCore, workers) share the group; make sure none survives.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            return proc.returncode
        finally:
            if self._log_file is not None:
                self._log_file.close()
                self._log_file = None

    def describe(self) -> dict:
        """What the manifest records about the engine (never environment secrets)."""
        info = {"mode": self.mode, "endpoint": self.endpoint,
                "command": self.command or None,
                "env": {k: v for k, v in self.env.items() if k.startswith(("VLLM_", "HF_"))}}
        status, body = http_get(self.endpoint + "/version")
        version = json_field(body, "version") if status == 200 else None
        info["vllm_version"] = version if isinstance(version, str) else None
        status, body = http_get(self.endpoint + "/v1/models")
        models = json_field(body, "data") if status == 200 else None
        info["models"] = models if isinstance(models, list) else None
        if status == 200 and not (isinstance(models, list)
                                  and all(isinstance(m, dict) and isinstance(m.get("id"), str)
                                          for m in models)):
            info["models_problem"] = (f"{self.endpoint}/v1/models answered 200 with "
                                      f"{body[:60]!r}, not an OpenAI model list")
        return info

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


@dataclass
class EngineGroup:
    """Several servers a round talks to as one (data parallel): each started, watched and
    stopped as one Engine is; requests go to them in turn (bench/point_driver.route)."""

    members: list[Engine]

    @property
    def mode(self) -> str:
        return self.members[0].mode

    @property
    def endpoint(self) -> str:
        return self.members[0].endpoint

    @property
    def endpoints(self) -> list[str]:
        return [m.endpoint for m in self.members]

    @property
    def command(self) -> list[str]:
        return self.members[0].command

    @property
    def proc(self) -> subprocess.Popen | None:
        return self.members[0].proc

    @property
    def pids(self) -> list[int]:
        """The process (group) id of each server this round started."""
        return [m.proc.pid for m in self.members if m.proc is not None]

    @property
    def owned(self) -> bool:
        return self.members[0].owned

    def start(self, log_path: Path, timeout_s: float = 300.0) -> None:
        """Start every server, each healthy before the next starts,
        so two servers sharing a GPU do not profile its memory at once; stop them all on failure."""
        try:
            for k, m in enumerate(self.members):
                m.start(log_path.with_name(server_log_name(k)), timeout_s)
        except BaseException:
            self.stop()
            raise

    def alive(self) -> bool:
        """Whether every server answers /health now."""
        return all(m.alive() for m in self.members)

    def stop(self, grace_s: float = 15.0) -> int | None:
        """Stop every server; the first non-zero exit status, else 0 (None if none was ours)."""
        statuses = [m.stop(grace_s) for m in self.members]
        known = [s for s in statuses if s is not None]
        return next((s for s in known if s != 0), known[0]) if known else None

    def describe(self) -> dict:
        """The first server's description, with every server's under `engines`."""
        each = [m.describe() for m in self.members]
        problems = [d.get("models_problem") for d in each if d.get("models_problem")]
        info = {**each[0], "endpoints": self.endpoints,
                "engines": [{k: v for k, v in d.items() if k != "models_problem"} for d in each]}
        if problems:
            info["models_problem"] = problems[0]
        return info


def _interrupt(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.engine`: start the embedded engine in the foreground until Ctrl-C."""
    import argparse
    ap = argparse.ArgumentParser(description="Serve the embedded engine until interrupted.")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--log", default="site/engine.log")
    ap.add_argument("flags", nargs="*")
    args = ap.parse_args(argv)
    eng = Engine.embedded(flags=args.flags, port=args.port)
    # A service manager or `kill` stops this with SIGTERM (a closed terminal with SIGHUP): each
    # is handled as Ctrl-C is, so the server's process group is stopped and waited for.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)
    try:
        eng.start(Path(args.log))
        print(f"serving at {eng.endpoint} (log {args.log}); Ctrl-C stops it", flush=True)
        while eng.alive():
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        eng.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
