"""A server whose GPUs are on another host: `--gpu-metrics URL` scrapes a DCGM exporter's page
on the /metrics clock into dcgm.jsonl, and the report reads it as it reads local NVML (power,
energy, GPM's counters, the GPU's peaks by the exporter's model name). The real embedded vLLM
serves the requests; the exporter is a stand-in serving tests/fixtures/dcgm/exporter-page.txt
(built by hand from the documented format: no exporter can run here), its energy counter
advancing at the page's power draw; every other page is written only after a pause within its
scrape, as a loaded exporter's or client's would be, which the counter's check must allow for."""

from __future__ import annotations

import http.server
import itertools
import threading
import time

import pytest

from bundle.store.reader import read_bundle
from report.judge.verdicts import read_bundle_ledger
from tests.conftest import FIXTURES, run_bench

pytestmark = pytest.mark.engine

PAGE = (FIXTURES / "dcgm" / "exporter-page.txt").read_text()
WATTS = (692.847, 74.512)      # the page's DCGM_FI_DEV_POWER_USAGE of GPU 0 and GPU 1


class StandInExporter(http.server.BaseHTTPRequestHandler):
    """Serves the page at /metrics, the energy counters at the page's power since start."""

    start = time.monotonic()
    served = itertools.count()
    LATE_S = 0.5     # every other page is written this long into its scrape

    def do_GET(self):  # noqa: N802 - the http.server hook's name
        if next(self.served) % 2:
            time.sleep(self.LATE_S)
        elapsed = time.monotonic() - self.start
        body = PAGE
        for g, w in enumerate(WATTS):
            body = body.replace(f"{{energy{g}}}", str(int(10**9 + w * 1e3 * elapsed)))
        data = body.encode()
        self.send_response(200 if self.path == "/metrics" else 404)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def exporter():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StandInExporter)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/metrics"
    finally:
        srv.shutdown()


def test_a_remote_servers_gpus_are_read_from_its_exporter(engine, exporter, tmp_path):
    out = tmp_path / "remote"
    run_bench("run", "--endpoint", engine.endpoint, "--concurrency", "1,2", "--input-len", "64",
              "--output-len", "16", "--duration", "4", "--gpu-metrics", exporter, "--out", str(out))
    b = read_bundle(out)
    assert b.gpu == [] and len([s for s in b.dcgm if s["ok"]]) >= 8
    assert b.manifest["plan"]["sampler"]["gpu_metrics"] == exporter
    _, led = read_bundle_ledger(out)
    for pid in ("L64-c1", "L64-c2"):
        k = f"p.{pid}."
        assert led.value_of(k + "power_median_w") == WATTS[0]
        assert led.value_of(k + "dram_bandwidth_share") == pytest.approx(0.44)
        assert led.value_of(k + "tensor_active_share") == pytest.approx(0.495)
        # Energy over the window, every GPU's counter: they advanced at the page's draws.
        window = led.value_of(k + "window_s")
        assert led.value_of(k + "energy_j") == pytest.approx(sum(WATTS) * window, rel=0.15)
        # The counters agree with the integral of the page's power once the late pages' scrape
        # time is allowed for: the energy is the counters'.
        assert led.value_of(k + "energy_counter_timing_j") > 0
        assert led[k + "energy_counter_checked_j"].present
        assert [key for _, key in led[k + "energy_j"].inputs] == [k + "energy_counter_checked_j"]
    assert led.value_of("r.peak_tflops") is not None        # the exporter's modelName: NVIDIA H200
