"""Host CPU samples read from this host's /proc: cumulative, the engine's group apart."""

from __future__ import annotations

import os
import time

from bench.samplers import hostcpu as H


def test_host_busy_time_grows_and_never_exceeds_the_total():
    b0, t0 = H.host_cpu_seconds()
    end = time.process_time() + 0.05
    while time.process_time() < end:
        pass
    b1, t1 = H.host_cpu_seconds()
    assert 0 <= b0 <= t0 and b1 >= b0 and t1 > t0 and (b1 - b0) <= (t1 - t0) + 1e-6


def test_a_process_group_counts_its_processes_and_an_absent_group_counts_nothing():
    own = H.group_cpu_seconds(os.getpgid(0))
    assert own > 0
    assert H.group_cpu_seconds(2**22 + 12345) == 0.0


def test_a_sample_leaves_the_engine_out_when_none_was_started():
    s = H.host_sample(1.5, None)
    assert set(s) - {"client_wait_s"} == {"t", "cores", "cpu_busy_s", "cpu_total_s", "client_cpu_s"}
    assert "engine_cpu_s" in H.host_sample(1.5, os.getpgid(0))


def test_the_client_run_queue_wait_grows_while_a_busy_process_shares_its_core(tmp_path):
    """Two processes spinning on one core: each waits for it about half the time."""
    import subprocess
    import sys
    import time
    if H.runqueue_wait_seconds() is None:
        import pytest
        pytest.skip("this kernel keeps no scheduler statistics")
    spin = [sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<1.5: pass"]
    a, b = (subprocess.Popen(["taskset", "-c", "0", *spin]) for _ in range(2))
    time.sleep(1.2)
    waits = [H.runqueue_wait_seconds(p.pid) for p in (a, b)]
    a.wait(), b.wait()
    assert all(w is not None and w > 0.2 for w in waits), waits
    assert H.runqueue_wait_seconds(2**22 + 12345) is None
