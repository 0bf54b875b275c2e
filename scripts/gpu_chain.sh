#!/usr/bin/env bash
# Run a long list of gpu_check.sh stages across several device calls (each call is limited to
# 10 minutes; the machine stays warm for 30 s after each): the first call starts the list in the
# background, the next calls wait on it and bring back what it has written so far.
#
#   scripts/gpu_chain.sh start RESULTS_DIR STAGE[,STAGE...] [WAIT_S]
#   scripts/gpu_chain.sh poll [WAIT_S]        wait until the list ends or WAIT_S pass (default 540)
#   scripts/gpu_chain.sh plan STAGE[,STAGE...]  replace the stages not yet begun
#   scripts/gpu_chain.sh stop                 end the list (the stage running and what follows)
#
# start copies the tree to /tmp/gpu-chain (the device tool lays the working tree anew on every
# call and removes what it did not carry, so background work must run outside it), writes the
# stages to /tmp/gpu-chain.stages (gpu_check.sh @FILE takes them one at a time from its top, so
# `plan` re-plans a running list) and starts gpu_check.sh there with setsid. Environment
# variables for gpu_check.sh (LIMIT, REPEAT, BENCH_ARGS, ...) go on start's command line. Every
# start and poll then waits (WAIT_S) and, when $OUT is set, packs RESULTS_DIR into
# $OUT/results-<time>.tgz, so a machine lost between calls loses only the stage in flight. The
# list's process is found by the PID it wrote at start, never by matching command lines (a
# `pgrep -f` on the list's own words also matches the shell that runs the poll, and a `pkill -f`
# kills it: 2026-12-02, one call's results lost).
set -uo pipefail
W=/tmp/gpu-chain STAGES=/tmp/gpu-chain.stages PIDF=/tmp/gpu-chain.pid LOG=/tmp/gpu-chain.log
RF=/tmp/gpu-chain.results

running() { [ -f "$PIDF" ] && kill -0 "$(cat "$PIDF")" 2>/dev/null; }

report() {  # wait up to $1 s for the list, then pack and summarize
  local wait=${1:-540} t=0
  while running && [ "$t" -lt "$wait" ]; do sleep 5; t=$((t + 5)); done
  local r; r=$(cat "$RF" 2>/dev/null) || { echo "gpu_chain: no list was started"; return 2; }
  if [ -n "${OUT:-}" ] && [ -d "$W/$r" ]; then
    tar czf "$OUT/results-$(date -u +%H%M%S).tgz" --exclude='*.so' --exclude='*.o' -C "$W" "$r"
  fi
  grep -h "^== stage" "$LOG"
  if running; then echo "gpu_chain: still running (pid $(cat "$PIDF")); left: $(paste -sd, "$STAGES")"
  else echo "gpu_chain: finished"; fi
  grep -v -E "DEBUG|^W[0-9]" "$LOG" | tail -40
}

case "${1:-}" in
  start)
    r=${2:?results dir}; stages=${3:?stages}
    if running; then echo "gpu_chain: a list is running (pid $(cat "$PIDF")); stop it first"; exit 2; fi
    rm -rf "$W" && cp -r . "$W" && echo "$r" >"$RF"
    tr ',' '\n' <<<"$stages" >"$STAGES"
    rm -f "$PIDF"
    # The list writes its own PID (a new session's leader, so `stop` can end its whole group);
    # every descriptor goes to the log, so no caller's pipe waits on it.
    (cd "$W" && OUT='' exec setsid bash -c 'echo $$ >"$1"; shift; exec "$@"' _ "$PIDF" \
       scripts/gpu_check.sh "@$STAGES" "$r") >"$LOG" 2>&1 </dev/null &
    for _ in 1 2 3 4 5 6 7 8 9 10; do [ -s "$PIDF" ] && break; sleep 0.5; done
    sleep 2; report "${4:-540}" ;;
  poll) report "${2:-540}" ;;
  plan) tr ',' '\n' <<<"${2:?stages}" >"$STAGES"; echo "gpu_chain: next: $(paste -sd, "$STAGES")" ;;
  stop)
    : >"$STAGES"
    if running; then kill -TERM -- "-$(cat "$PIDF")" 2>/dev/null; sleep 5
      kill -KILL -- "-$(cat "$PIDF")" 2>/dev/null; fi
    report 0 ;;
  *) sed -n 2,20p "$0"; exit 2 ;;
esac
