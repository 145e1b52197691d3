"""A Ray cluster of several nodes on this host's loopback, for the tests and tools/bench_ray.py.

Each node is one `ray start` (the head with `--head`, the others with `--address`), with its
own logical CPUs, so a placement group spread strictly puts one bundle on each. Every node
listens on 127.0.0.1 only. Invariants: each `ray start` runs in a process group of its own,
and `stop()` ends exactly those groups (TERM, then KILL), never another cluster on the host;
every node stays in the caller's session, so where the kernel shares CPU between sessions
(autogroups) the nodes' workers share the caller's, as local worker processes do.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.engine import free_port

RAY = Path(sys.executable).with_name("ray")
OBJECT_STORE_BYTES = 128 << 20


class LocalCluster:
    """NODES Ray nodes on 127.0.0.1 with CPUS logical CPUs each; `address` once started."""

    def __init__(self, nodes: int = 2, cpus: int = 2, temp_dir: str | None = None):
        self.nodes, self.cpus = nodes, cpus
        # Ray's socket paths must stay short (107 bytes): a short temp dir.
        self.temp_dir = temp_dir or tempfile.mkdtemp(prefix="rl", dir="/tmp")
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.groups: list[int] = []

    def _start(self, args: list[str], k: int) -> None:
        # Workers at the niceness of everything else on this host (Ray's default is 15).
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_worker_niceness": "0"}
        p = subprocess.Popen([str(RAY), "start", "--node-ip-address", "127.0.0.1",
                              "--num-cpus", str(self.cpus), "--resources", f'{{"client_node_{k}": 1}}',
                              # shards travel as small objects: a small store, whatever /dev/shm
                              "--object-store-memory", str(OBJECT_STORE_BYTES),
                              "--disable-usage-stats", *args],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                             process_group=0)
        self.groups.append(p.pid)
        out, _ = p.communicate(timeout=120)
        if p.returncode != 0:
            raise RuntimeError(f"ray start failed ({p.returncode}):\n{out[-3000:]}")

    def start(self) -> "LocalCluster":
        self._start(["--head", "--port", str(self.port), "--include-dashboard", "false",
                     "--ray-client-server-port", str(free_port()), "--temp-dir", self.temp_dir], 0)
        for k in range(1, self.nodes):
            self._start(["--address", self.address], k)
        return self

    def stop(self) -> None:
        """End every process of this cluster's `ray start` groups: TERM, wait, then KILL."""
        for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 0.0)):
            for g in self.groups:
                try:
                    os.killpg(g, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            end = time.monotonic() + wait
            while time.monotonic() < end and any(_group_alive(g) for g in self.groups):
                time.sleep(0.1)

    def __enter__(self) -> "LocalCluster":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False
