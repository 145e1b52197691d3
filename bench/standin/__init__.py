"""A fast stand-in for an OpenAI-compatible streaming server: for benchmarks and fault tests only.

It is not an engine and never stands for one in a published run: it runs no model and
generates no text, only a timed stream of token events shaped like vLLM's
(docs/analyses.md, streaming), and a /metrics page with a few of vLLM's counters that
follow what it sent. Its default version string and model owner say "standin" so a bundle
recorded against it is recognisable. It is the project's one fake server: the load tools
(tools/bench_*.py) drive thousands of streams through it, and the fault and security tests
make it misbehave on cue (the fault modes and the server options below).

Decode loop: one global step timer with period `step_ms` (default 10 ms) on the grid
t0 + k·step. At every step each active stream gets exactly one token event (in `multi` fault
mode, k tokens every k-th step). A step that takes longer than `step_ms` (too many streams
for one core) stretches, like an engine whose step is compute-bound; ticks are never burst
to catch up. A new request joins at the next step, so its first token comes within one step.

Every event carries the server's send time as a top-level field
    "server_time": <seconds on CLOCK_MONOTONIC>
(Python's `time.monotonic()`; on Linux `time.perf_counter()` of any process on the same host
reads the same clock). A benchmark computes the client's distortion of a gap as
    (client arrival of event j+1 − client arrival of event j) − (server_time[j+1] − server_time[j]),
which removes the server's own step jitter from the figure.

Endpoints (also under any path prefix `/fault/<spec>`, see below):
    POST /v1/completions   streaming only (`"stream": true`); `max_tokens` (default 16),
                           `stream_options.include_usage` (final usage chunk with
                           `"choices": []`), `stream_options.continuous_usage_stats` (cumulative
                           usage in every chunk), `return_token_ids`; then `data: [DONE]`
    GET  /health           200, empty body
    GET  /version          {"version": "standin-1"}
    GET  /v1/models        one model (default id "standin")
    GET  /metrics          Prometheus text: vllm:num_requests_running, vllm:num_requests_waiting,
                           vllm:generation_tokens_total, vllm:prompt_tokens_total,
                           vllm:request_success_total{finished_reason=...}
    GET  /standin/trace    with tracing on: {"clock", "step_ms", "requests": {request id:
                           [server_time of each token event]}, "runs": {...}} for finished
                           requests, then forgets them (`?keep=1` keeps them)
    GET  /standin/stats    counters of the decode loop (steps, events, stretched steps)

Server options (constructor arguments; the CLI flag in brackets):
    version        the /version string [--version]; hostile strings are served as given
    model          the served model id [--model]; any id a request names is answered
    api_key        like vLLM's --api-key: every /v1/* request needs `Authorization: Bearer KEY`,
                   else 401 [--api-key; the CLI then logs it among its non-default args, as
                   vLLM does, so that a test can check the client redacts it]
    metrics_script answers of the successive /metrics scrapes: "ok", "500" (HTTP 500),
                   "malformed" (text that is not exposition format) or "timeout" (the page
                   comes 5 s late); "ok" for ever after the script
    error_body     every 3rd completion request fails with HTTP 500 and this body (text)
    burst          every event of a stream is held and sent in one write at its end (one
                   client read, as a buffering proxy or a starved client sees it)
The server keeps the Authorization header of every request it received in `auth` and counts
completion requests in `completions_seen` and /metrics scrapes in `scrapes`.

The request id is the `x-request-id` header (as `vllm bench serve` sends it), else
`standin-<n>`; the chunks' "id" is `cmpl-<request id>`.

Fault modes, per request: the body field `"standin_fault"` (a string "MODE" or "MODE:N", or
{"mode": MODE, "n": N}), or the path prefix `/fault/MODE[:N]/v1/completions`, which lets an
unmodified client (e.g. `python -m serving_ledger run --endpoint http://host:port/fault/cut`)
meet it:
    malformed     after N tokens (default 2) one event that is not JSON; the stream goes on
    badshape      after N tokens (default 2) one event that is valid JSON of the wrong shape
                  (`"choices": [7]`, `"usage": {"completion_tokens": null}`); the stream goes on
    cut           after N tokens (default 3) the connection is closed: no [DONE], no end
                  of the chunked body
    nodone        the stream ends cleanly after all tokens but without `data: [DONE]`
    http_400, http_500, http_503
                  that HTTP status with an OpenAI-style body {"error": {"message", "type",
                  "param", "code"}}
    error_event   after N tokens (default 2) `data: {"error": {...}}` then `data: [DONE]`
                  inside the 200 stream
    short         only N tokens (default max_tokens // 2, at least 1), finish_reason "length"
    multi         N tokens per event (default 3), one event every N-th step; the usage
                  counts say how many tokens each event carried
    slow_headers  the response headers are sent N ms late (default 300)
    stall         after 2 tokens the stream goes silent for N s (default 30), connection
                  open, then the connection is closed
    huge          after 2 tokens one `data:` line of N MiB (default 16) that never ends its
                  event; then silence, and the connection is closed after 30 s
    mix           each request takes the next mode of MIX_MODES in turn
Benchmark control (not a fault): `"standin_run": {"id": ID, "seconds": S}` ends every stream
of run ID with finish_reason "length" at the first step S seconds after the run's first
request arrived, so a client that issues fixed request counts (`vllm bench serve`) finishes
in bounded time.

Run it: `python -m bench.standin --port 8100 --step-ms 10 [--trace] [--cpu 1]
[--reuse-port] [--model M] [--version V] [--api-key K] [--log-line LINE ...]`
(`--reuse-port`: K processes started so on one port serve it together; `--admin-port P` lets
each of them be asked for its own trace); in-process:
`async with StandIn(step_ms=10) as url: ...` or `with StandInThread(step_ms=10) as url: ...`.
"""
