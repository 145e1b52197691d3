"""Capture real NVML telemetry under a known load: idle, a bf16 matmul loop, idle again.

Run on a machine with an NVIDIA GPU, PyTorch and nvidia-ml-py:

    PYTHONUNBUFFERED=1 python3 tools/gpu_load.py --out OUT/gpu-h200 --seconds 60

It writes a bundle (manifest.json, gpu.jsonl: one line per GPU per sample, written by
bench/samplers/gpu.py) plus hardware.json: describe_gpus() output, the torch and NVML versions, what
load ran and the phase boundaries on the bundle's clock. The tests' fixture
tests/fixtures/gpu-h200/ was made with it.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import platform
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.samplers import gpu as gpu_mod  # noqa: E402
from bundle.store.writer import BundleWriter  # noqa: E402


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def matmul_loop(stop_at: float, size: int, a, b) -> int:
    """Run C = A·B on the GPU until the monotonic clock passes STOP_AT; returns the count."""
    import torch

    n = 0
    while time.monotonic() < stop_at:
        for _ in range(20):  # ~30 ms of work between syncs on an H200: the queue stays short
            torch.mm(a, b)
        torch.cuda.synchronize()
        n += 20
    return n


def phase_summary(samples: list[dict], t0: float, t1: float) -> dict:
    """Median power, SM clock and the union of reasons over samples in [t0, t1), for the log."""
    w = [s for s in samples if t0 <= s["t"] < t1]
    med = {}
    for k in ("power_w", "sm_clock_mhz", "temperature_c", "gpu_util_pct"):
        vals = [s[k] for s in w if s.get(k) is not None]
        med[k] = statistics.median(vals) if vals else None
    mask = 0
    for s in w:
        mask |= s.get("throttle_reasons") or 0
    return {"samples": len(w), **med, "reasons": gpu_mod.decode_throttle_reasons(mask)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--out", required=True, help="bundle folder to create")
    ap.add_argument("--seconds", type=float, default=60.0, help="load duration")
    ap.add_argument("--idle", type=float, default=10.0, help="idle before and after the load")
    ap.add_argument("--interval", type=float, default=1.0, help="NVML sampling interval (s)")
    ap.add_argument("--size", type=int, default=8192, help="square matrix size")
    ap.add_argument("--device", type=int, default=0, help="CUDA device that carries the load")
    args = ap.parse_args(argv)

    gpus, reason = gpu_mod.describe_gpus()
    print("describe_gpus:", json.dumps(gpus, indent=1) if gpus else reason)
    if not gpus:
        return 1

    import torch

    dev = torch.device("cuda", args.device)
    torch.cuda.set_device(dev)
    a = torch.randn(args.size, args.size, device=dev, dtype=torch.bfloat16)
    b = torch.randn(args.size, args.size, device=dev, dtype=torch.bfloat16)
    for _ in range(10):  # warm-up: cuBLAS picks its kernel before the idle phase starts
        torch.mm(a, b)
    torch.cuda.synchronize()

    load = (f"torch.mm of two {args.size}x{args.size} bf16 random matrices in a loop "
            f"(synchronising every 20 products) on cuda:{args.device}")
    plan = {"idle_before_s": args.idle, "load_s": args.seconds, "idle_after_s": args.idle,
            "interval_s": args.interval, "load": load}
    writer = BundleWriter(args.out, {
        "tool": {"name": "tools/gpu_load.py", "argv": sys.argv[1:]},
        "host": {"python": platform.python_version(), "platform": platform.platform(),
                 "machine": platform.machine()},
        "gpus": gpus, "gpu_absent_reason": None,
        "engine": {"name": None, "note": "no inference engine: a PyTorch matmul loop"},
        "model": None, "plan": plan,
    })

    sampler = gpu_mod.GpuSampler()
    stop = threading.Event()
    th = threading.Thread(target=sampler.sample_for,
                          args=(args.idle * 2 + args.seconds + 60, args.interval, writer, stop),
                          daemon=True)
    th.start()
    t_idle0 = writer.now()
    time.sleep(args.idle)
    t_load0 = writer.now()
    print(f"load starts at t={t_load0:.3f}", flush=True)
    n = matmul_loop(time.monotonic() + args.seconds, args.size, a, b)
    t_load1 = writer.now()
    print(f"load stops at t={t_load1:.3f} after {n} products", flush=True)
    time.sleep(args.idle)
    t_idle1 = writer.now()
    stop.set()
    th.join(timeout=30)
    phases = {"idle_before": [t_idle0, t_load0], "load": [t_load0, t_load1],
              "idle_after": [t_load1, t_idle1]}
    writer.close("complete")

    tflops = 2 * args.size ** 3 * n / (t_load1 - t_load0) / 1e12
    hardware = {
        "describe_gpus": gpus,
        "gpu_absent_reason": reason,
        "torch": {"version": torch.__version__, "cuda": torch.version.cuda,
                  "device_name": torch.cuda.get_device_name(dev)},
        "nvidia_ml_py": _version("nvidia-ml-py"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "clock": writer.manifest["clock"],
        "load": {"description": load, "device": args.device, "size": args.size,
                 "dtype": "bfloat16", "products": n, "achieved_tflops": tflops},
        "phases": phases,
        "sampler": {"interval_s": args.interval, "samples": sampler.samples},
    }
    (Path(args.out) / "hardware.json").write_text(json.dumps(hardware, indent=2) + "\n")

    samples = [json.loads(line) for line in (Path(args.out) / "gpu.jsonl").read_text().splitlines()]
    for name, (t0, t1) in phases.items():
        print(name, json.dumps(phase_summary(samples, t0, t1)))
    print(f"products: {n}, {tflops:.0f} TFLOP/s; samples: {sampler.samples}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
