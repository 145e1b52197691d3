"""One clock across hosts: the driver answers the time on its bundle clock, a worker measures
its offset to it.

The driver runs a `ClockServer` (one UDP socket, one thread) that answers each probe with
its bundle clock (`monotonic() − t0`). A worker on another host sends PROBES probes and keeps
the one with the smallest round trip (NTP's minimum-delay filter): the driver's answer was
read somewhere between the probe's send and its reply, so the worker's clock at the
midpoint, less the answer, is its offset, uncertain by at most half that round trip
(`Offset.uncertainty_s`). Invariants: a worker's `t0` is its own monotonic reading at the
driver's t = 0, so `monotonic() − t0` is on the driver's clock; the uncertainty is a bound,
not an estimate (it holds whatever the asymmetry of the two directions).
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from dataclasses import asdict, dataclass
from typing import Callable

PROBES = 16                 # probes per measurement; the minimum-delay one is kept
PROBE_TIMEOUT_S = 0.5       # a probe unanswered this long is lost (counted, not fatal)
_ASK = struct.Struct("!Q")          # the probe's nonce
_ANSWER = struct.Struct("!Qd")      # the nonce, the driver's clock when it read the probe


class ClockError(Exception):
    """No probe of a measurement was answered."""


@dataclass(frozen=True)
class Offset:
    """One measurement of a worker's clock against the driver's."""

    t0: float               # the worker's monotonic reading at the driver's t = 0
    uncertainty_s: float    # half the kept probe's round trip: |error of t0| is at most this
    rtt_s: float            # the kept probe's round trip
    probes: int             # probes answered (of PROBES sent)

    def as_record(self) -> dict:
        """The fields a shard record keeps (clock_offset_s is t0: worker monotonic − driver t)."""
        d = asdict(self)
        return {"clock_offset_s": d["t0"], "clock_uncertainty_s": d["uncertainty_s"],
                "clock_rtt_s": d["rtt_s"], "clock_probes": d["probes"]}


class ClockServer:
    """Answers probes with NOW() (the driver's bundle clock) from a thread of its own."""

    def __init__(self, now: Callable[[], float], host: str = "127.0.0.1", port: int = 0):
        self.now = now
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((host, port))
        self.address: tuple[str, int] = self.sock.getsockname()[:2]
        self._thread = threading.Thread(target=self._serve, name="clock-server", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                data, peer = self.sock.recvfrom(64)
            except OSError:      # closed
                return
            t = self.now()       # read as soon as the probe is in hand
            if len(data) == _ASK.size:
                try:
                    self.sock.sendto(_ANSWER.pack(_ASK.unpack(data)[0], t), peer)
                except OSError:
                    pass

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self._thread.join(2.0)


def measure_offset(address: tuple[str, int], probes: int = PROBES,
                   timeout_s: float = PROBE_TIMEOUT_S) -> Offset:
    """This host's offset to the clock server at ADDRESS: the minimum-delay probe of PROBES."""
    best: tuple[float, float] | None = None      # (round trip, t0)
    answered = 0
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(tuple(address))
        s.settimeout(timeout_s)
        for _ in range(probes):
            nonce = int.from_bytes(os.urandom(8), "big")
            t1 = time.monotonic()
            s.send(_ASK.pack(nonce))
            while True:          # skip a late answer to an earlier probe
                try:
                    data = s.recv(64)
                except (TimeoutError, socket.timeout):
                    data = None
                    break
                except ConnectionRefusedError:
                    raise ClockError(f"the driver's clock at {address[0]}:{address[1]} refused "
                                     "the probe (no clock server there)") from None
                if len(data) == _ANSWER.size and _ANSWER.unpack(data)[0] == nonce:
                    break
            t3 = time.monotonic()
            if data is None:
                continue
            answered += 1
            rtt, t_driver = t3 - t1, _ANSWER.unpack(data)[1]
            if best is None or rtt < best[0]:
                best = (rtt, (t1 + t3) / 2 - t_driver)
    if best is None:
        raise ClockError(f"no answer from the driver's clock at {address[0]}:{address[1]} "
                         f"to {probes} probes (UDP; is the port open from this node?)")
    return Offset(t0=best[1], uncertainty_s=best[0] / 2, rtt_s=best[0], probes=answered)
