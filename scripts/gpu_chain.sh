#!/usr/bin/env bash
# Run a long list of gpu_check.sh stages across several device calls (each call is limited to
# 10 minutes; the machine stays warm for 30 s after each): the first call starts the list in the
# background, the next calls wait on it and bring back what it has written so far.
#
#   scripts/gpu_chain.sh start RESULTS_DIR STAGE[,STAGE...] [WAIT_S]   (from the repository root)
#   scripts/gpu_chain.sh poll [WAIT_S]        wait until the list ends or WAIT_S pass (default 540)
#   scripts/gpu_chain.sh plan STAGE[,STAGE...]  replace the stages not yet begun
#   scripts/gpu_chain.sh stop                 end the list: the stage running and what follows
#   scripts/gpu_chain.sh sync PATH...         copy paths of this call's tree over the list's copy
#
# start copies the tree to /tmp/gpu-chain (the device tool lays the working tree anew on every
# call and removes what it did not carry, so background work must run outside it; a RESULTS_DIR
# left there by an earlier list is kept), writes the stages to /tmp/gpu-chain.stages
# (gpu_check.sh @FILE takes them one at a time from its top, under a lock, so `plan` re-plans a
# running list) and starts gpu_check.sh there in a session of its own. RESULTS_DIR is relative
# to the repository, as gpu_check.sh's own default; put a frontier stage's FRONTIER_ROOT under it,
# since only RESULTS_DIR comes back. Environment variables for gpu_check.sh (LIMIT, REPEAT,
# BENCH_ARGS, ...) go on start's command line. Every start and poll waits (WAIT_S) and, when $OUT
# is set, packs RESULTS_DIR into $OUT/results-<time>.tgz, so a machine lost between calls loses
# only the stage in flight. PACK_ALSO (on start's command line: paths inside the repository that
# exist at start, space-separated, none with a space) is packed beside it, for a frontier stage
# whose FRONTIER_ROOT lies elsewhere (an ablation's runs stay where they are committed). Exit
# status: 0 while the list runs or after it ended well, the list's own status when it ended
# otherwise, 2 for bad use. The list is found by the PID and session it
# wrote at start, never by matching command lines (a `pgrep -f` on the list's own words also
# matches the shell that runs the poll, and a `pkill -f` kills it: 2026-12-02, a call's results
# lost). sync carries work made on the controller's side while the list runs (a batch run's
# imported replies, for another frontier stage added with `plan`) into the list's copy: it holds
# the stage lock, so no stage begins while it copies, and it refuses while a stage that reads
# the runs (frontier, frontier-bench, replay, export-op) is running; each path is copied whole
# beside its old version, then swapped in, and paths in or around the list's RESULTS_DIR are
# refused.
# GPU_CHAIN_TMP (default /tmp) moves the list's files, for tests.
set -uo pipefail
T=${GPU_CHAIN_TMP:-/tmp}
W=$T/gpu-chain STAGES=$T/gpu-chain.stages PIDF=$T/gpu-chain.pid LOG=$T/gpu-chain.log
RF=$T/gpu-chain.results RC=$T/gpu-chain.rc PF=$T/gpu-chain.pack

die() { echo "gpu_chain: $*" >&2; exit 2; }
running() { [ -s "$PIDF" ] && kill -0 "$(cat "$PIDF")" 2>/dev/null; }
seconds() { [[ "$1" =~ ^[0-9]+$ ]] || die "WAIT_S must be whole seconds, got '$1'"; }
left() { paste -sd, "$STAGES" 2>/dev/null; }
inside() {  # a path inside the repository, relative, without ..
  case "/$1/" in //*|*/../*) die "$2 must be paths inside the repository, got $1" ;; esac
}

write_stages() {  # the stage list, replaced whole under the lock gpu_check.sh reads it under
  local tmp; tmp=$(mktemp "$STAGES.XXXX")
  tr ',' '\n' <<<"$1" | sed '/^$/d' >"$tmp"
  { flock 9; mv "$tmp" "$STAGES"; } 9>"$STAGES.lock"
}

tree() {  # the list's processes: its session, and every descendant (a stage's own setsid)
  local sid=$1
  ps -eo pid=,ppid=,sid= | awk -v s="$sid" '
    { pid[NR] = $1; ppid[NR] = $2; if ($3 == s) keep[$1] = 1 }
    END { do { more = 0
                for (i in pid) if ((ppid[i] in keep) && !(pid[i] in keep)) { keep[pid[i]] = 1; more = 1 }
              } while (more)
          for (p in keep) print p }'
}

report() {  # wait up to $1 s for the list, then pack and summarize; returns the list's status
  local wait=${1:-540} t=0
  while running && [ "$t" -lt "$wait" ]; do sleep 5; t=$((t + 5)); done
  local r; r=$(cat "$RF" 2>/dev/null) || die "no list was started"
  if [ -n "${OUT:-}" ]; then
    local p packed=()
    local also=(); [ -s "$PF" ] && read -ra also <"$PF"     # split on spaces, no globbing
    for p in "$r" "${also[@]}"; do
      if [ -e "$W/$p" ]; then packed+=("$p"); else echo "gpu_chain: nothing to pack yet at $W/$p"; fi
    done
    if [ "${#packed[@]}" -gt 0 ]; then
      tar czf "$OUT/results-$(date -u +%H%M%S.%N).tgz" --exclude='*.so' --exclude='*.o' \
        -C "$W" "${packed[@]}"
    fi
  fi
  grep -h "^== stage" "$LOG"
  grep -v -E "DEBUG|^W[0-9]" "$LOG" | tail -40
  if running; then echo "gpu_chain: still running (pid $(cat "$PIDF")); next: $(left)"; return 0; fi
  local rc; rc=$(cat "$RC" 2>/dev/null || echo "unknown (killed)")
  echo "gpu_chain: finished, exit status $rc${STOPPED:+ (stopped)}; not run: $(left)"
  [ "$rc" = 0 ] && return 0
  [[ "$rc" =~ ^[0-9]+$ ]] && return "$rc"
  return 1
}

case "${1:-}" in
  start)
    r=${2:?results dir}; stages=${3:?stages}; seconds "${4:-540}"
    [ -f scripts/gpu_check.sh ] || die "run it from the repository root (no scripts/gpu_check.sh here)"
    read -ra also <<<"${PACK_ALSO:-}"
    for p in "$r" "${also[@]}"; do inside "$p" "RESULTS_DIR and PACK_ALSO"; done
    for p in "${also[@]}"; do    # a typo would pack nothing and be noticed only at the end
      [ -e "$p" ] || die "PACK_ALSO: $p: no such path in the repository"
    done
    if running; then die "a list is running (pid $(cat "$PIDF")); stop it first"; fi
    keep=""
    if [ -d "$W/$r" ]; then keep=$(mktemp -d); mv "$W/$r" "$keep/kept"; fi
    rm -rf "$W" && cp -r . "$W" || die "could not copy the tree to $W"
    if [ -n "$keep" ]; then
      mkdir -p "$(dirname "$W/$r")"; rm -rf "${W:?}/$r"; mv "$keep/kept" "$W/$r"; rmdir "$keep"
    fi
    echo "$r" >"$RF"; echo "${PACK_ALSO:-}" >"$PF"; rm -f "$PIDF" "$RC" "$STAGES.now"; : >"$LOG"
    write_stages "$stages"
    # The list writes its PID (a new session's leader), runs gpu_check.sh and writes its status;
    # every descriptor goes to the log, so no caller's pipe waits on it.
    (cd "$W" && OUT='' exec setsid bash -c 'echo $$ >"$1"; "${@:3}"; echo $? >"$2"' _ \
       "$PIDF" "$RC" scripts/gpu_check.sh "@$STAGES" "$r") >"$LOG" 2>&1 </dev/null &
    for _ in 1 2 3 4 5 6 7 8 9 10; do [ -s "$PIDF" ] && break; sleep 0.5; done
    sleep 2; report "${4:-540}" ;;
  poll) seconds "${2:-540}"; report "${2:-540}" ;;
  plan)
    running || die "no list is running; plan replaces the stages of a running one"
    write_stages "${2:?stages}"; echo "gpu_chain: next: $(left)" ;;
  stop)
    [ -f "$RF" ] || die "no list was started"
    echo "gpu_chain: stopping; the stages not begun were: $(left)"
    : >"$STAGES"
    if running; then
      sid=$(cat "$PIDF"); pids=$(tree "$sid")     # taken before any dies (orphans leave the tree)
      for sig in TERM KILL; do
        pids=$(printf '%s\n' $pids $(tree "$sid") | sort -u | while read -r p; do
                 kill -0 "$p" 2>/dev/null && echo "$p"; done)
        [ -n "$pids" ] || break
        # shellcheck disable=SC2086
        kill -"$sig" $pids 2>/dev/null
        for _ in 1 2 3 4 5 6 7 8 9 10; do
          alive=$(for p in $pids; do kill -0 "$p" 2>/dev/null && echo "$p"; done)
          [ -n "$alive" ] || break; sleep 0.5
        done
      done
    fi
    STOPPED=1 report 0 ;;
  sync)
    shift; [ $# -gt 0 ] || die "sync: name the paths to copy"
    [ -f scripts/gpu_check.sh ] || die "run it from the repository root (no scripts/gpu_check.sh here)"
    [ -d "$W" ] || die "no list was started (no $W)"
    here=$(pwd -P); wr=$(realpath "$W"); res=$(cat "$RF" 2>/dev/null)
    [ -z "$res" ] || res=$(realpath -s -m --relative-to=. -- "$res")
    paths=()
    for p; do   # each a real path inside the repository, normalized (no ./, //, trailing /)
      inside "$p" "sync's paths"; [ -e "$p" ] || [ -L "$p" ] || die "sync: $p: no such path in this tree"
      q=$(realpath -s -m --relative-to=. -- "$p")
      case "$q" in .|..|../*) die "sync: $p: not a path below the repository root" ;; esac
      d=$(realpath -m -- "$(dirname "$q")"); case "$d/" in "$here"/*) ;; *)
        die "sync: $p: leads outside the repository through a symbolic link" ;; esac
      d=$(realpath -m -- "$W/$(dirname "$q")"); case "$d/" in "$wr"/*) ;; *)
        die "sync: $p: leads outside the list's copy through a symbolic link" ;; esac
      case "$q/" in "$res"/*) die "sync: $p: inside the list's results folder $res" ;; esac
      case "$res/" in "$q"/*) die "sync: $p: holds the list's results folder $res" ;; esac
      for o in "${paths[@]}"; do case "$q/" in "$o"/*) die "sync: $p overlaps $o" ;; esac
                                case "$o/" in "$q"/*) die "sync: $p overlaps $o" ;; esac; done
      paths+=("$q")
    done
    exec 9>"$STAGES.lock" && flock 9 || die "sync: cannot take the stage lock $STAGES.lock"
    now=$(cat "$STAGES.now" 2>/dev/null)    # written under this lock as a stage begins
    if running && case "$now" in frontier|frontier-bench|replay|export-op) true ;; *) false ;; esac
    then
      die "sync: the list is in its $now stage, which reads the runs; sync when it has ended"
    fi
    for q in "${paths[@]}"; do           # all copied first: a failure leaves the list's copy as it was
      mkdir -p "$W/$(dirname "$q")" && rm -rf "${W:?}/$q.sync-new" && cp -a "$q" "$W/$q.sync-new" \
        || { for r in "${paths[@]}"; do rm -rf "${W:?}/$r.sync-new"; done; die "sync: could not copy $q"; }
    done
    for q in "${paths[@]}"; do           # then each swapped in: the old one moved aside first
      rm -rf "${W:?}/$q.sync-old"; [ -e "$W/$q" ] || [ -L "$W/$q" ] && mv "$W/$q" "$W/$q.sync-old"
      mv "$W/$q.sync-new" "$W/$q" || die "sync: could not move $q in place"
      rm -rf "${W:?}/$q.sync-old"; echo "gpu_chain: synced $q"
    done ;;
  *) sed -n 2,10p "$0"; exit 2 ;;
esac
