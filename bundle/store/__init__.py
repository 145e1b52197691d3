"""Run bundles: a directory of raw samples written append-only, and a strict reader.

Layout (documented in docs/bundle.md): `manifest.json`, provenance and status, rewritten
atomically, never partially; one `<stream>.jsonl` per sample stream bundle/schema.py declares
(`STREAMS`: points, requests, metrics, gpu, ...), and `requests.w{k}.jsonl` from
load-generating worker process k; `server.log`, the engine's log, when the tool launched it.

Invariants: every `t` is seconds since the bundle's t0 on the monotonic clock; a sample
line is flushed as soon as it is written, so a crash loses at most the last line; nothing
derived (no mean, no percentile) is ever written here.
"""
