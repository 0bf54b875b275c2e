#!/usr/bin/env bash
# The GPU evidence in one call: GPU tests, `evokernel check` on every seed kernel and the FP16
# cheat, LLM-free searches, and a search with the LLM operators against a scripted LLM.
#
#   scripts/gpu_check.sh STAGE[,STAGE...] [RESULTS_DIR]
#   stages: validate (= prebuild, gpu-tests, checks), prebuild, gpu-tests, checks, check:PROBLEM,
#           search:PROBLEM, mock, headline-mock, suite, bench, gate-report, gate-report-load,
#           contention, prebuild-ab, hide-check, dask-vs-local, dask-gate, dask-cold, suite-bench,
#           frontier, frontier-bench, sass-audit, sanitize, export-op, sandbox-ab, replay, all
#   frontier: one step of batch-mode searches, all in one `evokernel advance` (one GPU
#          evaluator per problem, shared by its runs): FRONTIER_RUN with requests in
#          FRONTIER_BATCH, or each name of FRONTIER_PROBLEMS as FRONTIER_ROOT/<name> with
#          FRONTIER_ROOT/<name>-batch; a run that exists is resumed, a new one starts with the
#          line in FRONTIER_ROOT/<name>.args (its problem and flags: an ablation arm,
#          `--strategy ...`), written as "<name> FRONTIER_ARGS" when missing (the name is then
#          the problem); all are packed into $OUT/frontier.tgz. FRONTIER_ADVANCE_ARGS adds
#          `advance` flags, e.g. "--eval-timeout 60" (a hung candidate's cost, this step only)
#          scripts/frontier_round.py makes the rounds between two such steps on the CPU
#   frontier-bench: for each run of the frontier stage's layout that exported a best.py,
#          experiments/do_bench_best.py into RUN/do_bench.json (an independent
#          triton.testing.do_bench timing), then experiments/frontier_table.py into RESULTS_DIR
#          FRONTIER_BENCH_PROBLEMS (default FRONTIER_PROBLEMS) names the runs to time, e.g. an
#          ablation's best run of each problem only
#   gate-report-load: the gate report (REPEAT passes, default 1) beside scripts/load.py (8
#          compiles of torch-header CUDA files and one busy loop per core), into
#          RESULTS_DIR/gate_report_load/
#   contention: `evokernel run softmax` (1 generation) while scripts/gpu_hog.py runs a matmul
#          loop for HOG_S seconds (default 45) in another process; `show` of the run after
#   hide-check: scripts/hide_host_check.py (event vs whole-device medians with and without
#          timing.hide_host_ms) into RESULTS_DIR/hide_host_check.md
#   prebuild-ab: the seeds and fixtures built cold twice, with and without <torch/extension.h>
#   suite: `evokernel suite problems/` (each headline problem's seed kernel, eager and compile
#          baselines) into RESULTS_DIR/suite.md/.json
#   headline-mock: experiments/headline.py --mock-server on softmax (the LLM operators over HTTP
#          against the fake OpenAI-compatible server, scripted CUDA), 3 generations
#   gpu-tests: every gpu-marked test but the gate fixtures' twin (GPU_TESTS: paths or node ids
#          instead of tests/), each bounded by TEST_TIMEOUT seconds (default 300; pytest-timeout
#          fails it with its stack and goes on), with skip reasons and durations; each outcome is
#          appended to RESULTS_DIR/gpu_tests_ledger.csv as it ends, and tests a ledger records as
#          passed with the same code (scripts/code_hash.sh: a commit of results or docs keeps
#          them) are not run again (GPU_TESTS_RESUME=FILE: an earlier call's ledger, e.g. a
#          committed one); a failure's text goes to gpu_tests_ledger.csv.failures.txt as it
#          ends (pytest prints it only at the end, which a stage cut by LIMIT never reaches)
#   gate-report: experiments/gate_report.py, every cheat and legitimate fixture in tests/kernels/
#          (into RESULTS_DIR/gate_report/); gpu-tests leave out its pytest twin
#          (tests/gate/test_gpu_gate_fixtures.py, the same run), so run it on its own:
#          python3 -m pytest -q -m gpu tests/gate/test_gpu_gate_fixtures.py
#          GATE_ARGS adds flags, e.g. GATE_ARGS="--hide-host-ms 0" (timing.hide_host_ms; default 1)
#   dask-vs-local: scripts/dask_vs_local.py (the gate fixtures through a one-GPU-worker Dask
#          cluster and the local engine, then both engines' cold throughput) into
#          RESULTS_DIR/dask_vs_local/; dask-gate and dask-cold: one half each (the gate half
#          takes several minutes per engine; prebuild first). Needs dask and distributed (carry
#          their wheels: scripts/device_wheels.sh puts them in .whl/).
#          DASK_GATE_ARGS="--local-gate R/gate_report/gate_report.json" and
#          DASK_COLD_ARGS="--local-bench R/bench_throughput.json" take the local engine's half
#          from a gate report and a bench (cold phase) run earlier in the same call.
#   suite-bench: `python -m evokernel.bench --phases suite` (a problem set one at a time,
#          together, together with warm-ahead; SUITE_ARGS adds flags, e.g.
#          SUITE_ARGS="--suite-variants 4") into RESULTS_DIR/bench_suite.md/.json
#   sass-audit: experiments/sass_audit_report.py (the fixtures' below-FP32 instructions; CPU work,
#          on the prebuilt cache) into RESULTS_DIR/sass_audit.txt/.json (issue 17)
#   sanitize: `evokernel check --sanitize` on each planted kernel of tests/kernels/sanitize/ (an
#          out-of-bounds access, a shared-memory race) into RESULTS_DIR/sanitize_<name>.txt/.json;
#          SANITIZE_KERNELS (paths, space-separated) picks some of them
#   export-op: `evokernel export EXPORT_RUN --op EXPORT_OP EXPORT_FLAGS` (default: the
#          committed frontier softmax run, op softmax_ek, --robustness; --sanitize on softmax's
#          1 GB input under racecheck would take far longer than a call), then the package's
#          example.py (the op inside a torch.compile'd module, against the reference) into
#          RESULTS_DIR/export_*
#   sandbox-ab: scripts/sandbox_ab.py SANDBOX_AB_ARGS (contained vs uncontained workers'
#          throughput, issue 20) into RESULTS_DIR/sandbox_ab.md
#   replay: `evokernel replay REPLAY_RUN` (default: the committed frontier softmax run, what
#          `make run` does without --model) into RESULTS_DIR/replay/
#   bench: the engine benchmarks (evokernel.bench: throughput cold/warm/sequential, fidelity vs
#          triton do_bench), sized to what is left of a 10-minute call (CALL_LIMIT, default 590 s,
#          counted from this script's start); BENCH_ARGS adds flags, e.g.
#          BENCH_ARGS="--phases cold,warm,sequential"; BENCH_BUDGET overrides the budget (s).
#
# Writes logs, JSON and run directories under RESULTS_DIR (default results/h200-<date>/), prints a
# short table last, and, when $OUT is set (the device tool), packs RESULTS_DIR into
# $OUT/results.tgz. On the H200 the image lacks deap/loguru/litellm: carry .whl/ (made by
# scripts/device_wheels.sh) and this script installs them;
# a package may also travel as .whl/NAME.tar.xz, its installed tree (e.g. litellm's wheel
# unzipped, without litellm/proxy/_experimental, the proxy's web UI: 22 MB instead of 44).
set -uo pipefail
cd "$(dirname "$0")/.."
stage=${1:-validate}
R=${2:-results/h200-$(date +%Y-%m-%d)}
mkdir -p "$R"
export LITELLM_LOCAL_MODEL_COST_MAP=True PYTHONUNBUFFERED=1
export EVOKERNEL_CACHE=${EVOKERNEL_CACHE:-/tmp/evokernel-cache}
# Only where the Python lacks them: a machine whose environment has them (a local run from the
# project's .venv) keeps its own versions, and is not given the GPU host's cp312 wheels.
if ! python3 -c "import deap, loguru, tenacity, litellm, dask, distributed" 2>/dev/null; then
  # .whl-dask/ (dask, distributed and their needs) is carried only for the Dask stages
  # (less a package .whl/ already holds: pip refuses two wheels of one name)
  wheels=$(ls .whl/*.whl 2>/dev/null || true)
  for w in .whl-dask/*.whl; do
    [ -f "$w" ] || continue; n=$(basename "$w"); n=${n%%-*}
    ls .whl/"$n"-*.whl >/dev/null 2>&1 || wheels="$wheels $w"
  done
  if [ -n "$wheels" ]; then
    # shellcheck disable=SC2086
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site $wheels && export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
  fi
  # A package carried as an installed tree (.whl/NAME.tar.xz, unpacked into /tmp/site): xz packs
  # litellm's 44 MB native library into less than its wheel does; the carry is capped at 64 MiB.
  if [ -d .whl ] && ls .whl/*.tar.xz >/dev/null 2>&1; then
    mkdir -p /tmp/site && for t in .whl/*.tar.xz; do tar xJf "$t" -C /tmp/site; done
    export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
  fi
fi
# Checked from another folder: build and worker processes start elsewhere, so the package must
# import from anywhere, not only from the repository root.
if ! (cd / && python3 -c "import evokernel.operators.tune") 2>/dev/null; then
  if ! python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >"$R/install.log" 2>&1; then
    # No usable setuptools there: map the packages by links in this scratch copy instead.
    tail -5 "$R/install.log"; ln -sfn "$PWD/operators" evokernel/operators
    ln -sfn "$PWD/problems" evokernel/problems; export PYTHONPATH=$PWD:${PYTHONPATH:-}
  fi
fi
EK="python3 -m evokernel"

{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  # The device tool's copy of the tree is not a git checkout: `git rev-parse HEAD > COMMIT`
  # before the call, and carry COMMIT (it is git-ignored), records the commit it was copied from.
  # A carried COMMIT wins: the device tool's copy may hold a stale .git of the session's start.
  if [ -f COMMIT ]; then echo "commit: $(cat COMMIT) (from the carried COMMIT file)"
  else echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(
    git diff --quiet HEAD 2>/dev/null || [ ! -d .git ] || echo ' (with uncommitted changes)')"; fi
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'gpu', torch.cuda.get_device_name(0))"
  nvcc --version | tail -2
  nproc
} >"$R/env.txt" 2>&1
cat "$R/env.txt"
machine_state() {  # load, the busiest processes and the GPU's state: tells a noisy host from ours
  { date -u +"%H:%M:%S"; cat /proc/loadavg
    nvidia-smi --query-gpu=utilization.gpu,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
    nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader
    ps -eo pid,pcpu,etime,comm --sort=-pcpu | head -8; echo; } >>"$R/machine_state.txt" 2>&1
}
machine_state
# CPU use and steal (vmstat's "st": time a virtual machine's host gave to others) and the GPU's
# load and clocks every 5 s, for the whole call
vmstat -t 5 >"$R/vmstat.txt" 2>&1 & VMSTAT=$!
nvidia-smi dmon -s puc -d 5 >"$R/dmon.txt" 2>&1 & DMON=$!
# On any exit (a stage's end, or `timeout -s TERM` stopping the whole call), stop the monitors and
# pack what there is, so a call cut short still brings its results back.
pack() { kill $VMSTAT $DMON 2>/dev/null; if [ -n "${OUT:-}" ]; then tar czf "$OUT/results.tgz" "$R"; fi; }
trap pack EXIT
trap 'exit 143' TERM

# Each stage is bounded by `timeout`, so a slow one still leaves its results and the table.
LIMIT=${LIMIT:-560}
check() {  # check PROBLEM [extra kernels...]
  local p=$1; shift
  timeout "$LIMIT" $EK check "$p" "problems/seeds/$p.py" "$@" $CHECK_ARGS \
    --json "$R/check_$p.json" >"$R/check_$p.txt" 2>&1
  echo "check $p: exit $?"; grep -E "^(kernel|verdict|detail|speedup|norm ratio)" "$R/check_$p.txt"
}
search() {  # search PROBLEM: LLM-free, 3 generations
  rm -rf "$R/run_$1"
  timeout "$LIMIT" $EK run "$1" --generations 3 --population 4 --offspring ${OFFSPRING:-4} \
    --no-compile-baseline --run-dir "$R/run_$1" 2>&1 | tee "$R/run_$1.txt" | grep -v DEBUG
  $EK show "$R/run_$1" >"$R/show_$1.txt" 2>&1
}
bench() {  # the engine benchmarks; the budget leaves time to summarize and pack $OUT
  local left=$(( ${CALL_LIMIT:-590} - SECONDS ))
  local budget=${BENCH_BUDGET:-$(( left - 40 ))}
  if [ "$budget" -lt 60 ]; then echo "bench: only ${left} s left of the call; skipped"; return; fi
  echo "bench: budget ${budget} s (${left} s left of the call)"
  # shellcheck disable=SC2086
  timeout -k 10 "$(( budget + 20 ))" python3 -m evokernel.bench --results-dir "$R" \
    --budget-s "$budget" ${BENCH_ARGS:-} 2>&1 | tee "$R/bench.txt" | grep -v DEBUG | tail -60
}
mock() {  # the LLM operators against a scripted LLM (litellm mock_response), 3 generations
  rm -rf "$R/run_mock_llm" "$R/run_mock_llm-llm-cache.sqlite"
  timeout "$LIMIT" python3 experiments/mock_llm_search.py softmax --generations 3 \
    --no-compile-baseline --run-dir "$R/run_mock_llm" 2>&1 | tee "$R/run_mock_llm.txt" | tail -40
}
headline_mock() {
  timeout "$LIMIT" python3 experiments/headline.py --mock-server --problems softmax \
    --generations 3 --population 3 --offspring 3 --run-root "$R/headline_mock" 2>&1 \
    | tee "$R/headline_mock.txt" | grep -v DEBUG | tail -30
  $EK show "$R/headline_mock/softmax" >"$R/show_headline_mock.txt" 2>&1
}
gpu_tests() {  # the gpu-marked tests, each bounded; a ledger of outcomes lets a later call resume
  local ledger="$R/gpu_tests_ledger.csv"; case "$ledger" in /*) ;; *) ledger="$PWD/$ledger" ;; esac
  # GPU_TESTS_RESUME=FILE: an earlier call's ledger (tests it passed at this commit are skipped)
  if [ -n "${GPU_TESTS_RESUME:-}" ] && [ "$GPU_TESTS_RESUME" != "$ledger" ]; then
    cat "$GPU_TESTS_RESUME" >>"$ledger"; fi
  # shellcheck disable=SC2086
  # passes are keyed by the code's hash, not the commit: a commit of results or docs keeps them
  EVOKERNEL_TEST_LEDGER="$ledger" EVOKERNEL_TEST_COMMIT="code-$(scripts/code_hash.sh)" \
    timeout "$LIMIT" python3 -m pytest -v -rs --durations=0 --timeout "${TEST_TIMEOUT:-300}" -m gpu \
    ${GPU_TESTS:-tests} -p no:cacheprovider --ignore=tests/gate/test_gpu_gate_fixtures.py 2>&1 \
    | tee -a "$R/gpu_tests.txt" | grep -E "PASSED|FAILED|ERROR|SKIPPED|passed|failed|Timeout" | tail -40
}
CHECK_ARGS=${CHECK_ARGS:-}
PREBUILD_FILES="problems/seeds/*.py tests/kernels/*.py tests/kernels/cheats/*.py tests/kernels/legit/*.py tests/kernels/faults/*.py"  # globbed where used
# STAGE may be @FILE: the stages are then taken one at a time from FILE's first line, so a long
# call started in the background (setsid) can be re-planned while it runs by rewriting FILE
# (under `flock FILE.lock`, as scripts/gpu_chain.sh plan does: a stage is read and removed under
# the same lock, so a re-plan never lands between the two).
STAGE_FILE=""; [ "${stage#@}" != "$stage" ] && STAGE_FILE=${stage#@}
stages=${stage//,/ }
next_stage() {  # sets s to the next stage; false when none is left
  if [ -n "$STAGE_FILE" ]; then
    s=$( { flock 9; l=$(sed -n 1p "$STAGE_FILE")
           printf '%s\n' "$l" >"$STAGE_FILE.now"     # the stage begun, for gpu_chain.sh sync
           sed -i 1d "$STAGE_FILE" && printf '%s' "$l"; } 9>"$STAGE_FILE.lock" 2>/dev/null )
  else set -- $stages; [ $# -gt 0 ] || return 1; s=$1; shift; stages="$*"; fi
  [ -n "$s" ]
}
while next_stage; do
  echo "== stage $s: $(date -u +%H:%M:%S)"
  case "$s" in
    prebuild) python3 scripts/prebuild.py $PREBUILD_FILES \
                | tee "$R/prebuild.txt" ;;
    prebuild-ab)  # the same 14 files built cold with and without <torch/extension.h>, 8 at once
              for h in full trimmed; do rm -rf "/tmp/evokernel-ab-$h"
                python3 scripts/prebuild.py --cache "/tmp/evokernel-ab-$h" $([ $h = full ] && echo --full-headers) \
                  $PREBUILD_FILES | tee "$R/prebuild_$h.txt" | tail -1
              done ;;
    gpu-tests) gpu_tests ;;
    checks) check softmax; check layernorm; check matmul tests/kernels/matmul_fp16.py
            check conv2d; check conv2d_relu_maxpool ;;
    check:*) p=${s#check:}; if [ "$p" = matmul ]; then check matmul tests/kernels/matmul_fp16.py; else check "$p"; fi ;;
    search:*) search "${s#search:}" ;;
    mock) mock ;;
    headline-mock) headline_mock ;;
    suite) timeout "$LIMIT" $EK suite problems/ -o "$R/suite" 2>&1 | tee "$R/suite.txt" | grep -v DEBUG | tail -25 ;;
    gate-report) timeout "$LIMIT" python3 experiments/gate_report.py --out "$R/gate_report" ${GATE_ARGS:-} \
                   2>&1 | tee "$R/gate_report.txt" | grep -v -E "DEBUG|^W[0-9]" | tail -120 ;;
    gate-report-load)  # the gate report beside 8 compiles and a busy loop per core (issue 12)
              setsid python3 scripts/load.py --builds 8 --busy "$(nproc)" --seconds "$LIMIT" \
                >"$R/load.txt" 2>&1 & LOADPID=$!; sleep 5
              timeout "$LIMIT" python3 experiments/gate_report.py --out "$R/gate_report_load" \
                --repeat "${REPEAT:-1}" ${GATE_ARGS:-} 2>&1 | tee "$R/gate_report_load.txt" \
                | grep -v -E "DEBUG|^W[0-9]" | grep -E "^(wrote|cheat fixtures|   BAD|==|- [0-9]+\.)"
              kill -KILL -- -"$LOADPID" 2>/dev/null; wait "$LOADPID" 2>/dev/null; machine_state ;;
    contention)  # `evokernel run softmax` while another process runs a matmul loop (issue 12)
              rm -rf "$R/run_contended"
              python3 scripts/gpu_hog.py --seconds "${HOG_S:-45}" >"$R/gpu_hog.txt" 2>&1 & HOG=$!
              sleep 8
              timeout "$LIMIT" $EK run softmax --generations 1 --population 2 --offspring 2 \
                --no-compile-baseline --run-dir "$R/run_contended" 2>&1 | tee "$R/run_contended.txt" \
                | grep -v DEBUG | tail -15
              wait "$HOG"; $EK show "$R/run_contended" >"$R/show_contended.txt" 2>&1; tail -30 "$R/show_contended.txt" ;;
    bench) bench ;;
    frontier)  # one step of batch-mode searches (issue 21), all in one `evokernel advance`
               # (one evaluator per problem): FRONTIER_RUN + FRONTIER_BATCH: one run; else
               # FRONTIER_ROOT + FRONTIER_PROBLEMS: ROOT/<name> with requests in ROOT/<name>-batch
              if [ -n "${FRONTIER_RUN:-}" ]; then pairs="$FRONTIER_RUN=${FRONTIER_BATCH:?}"
              else pairs=""; for p in ${FRONTIER_PROBLEMS:?}; do
                pairs="$pairs ${FRONTIER_ROOT:?}/$p=$FRONTIER_ROOT/$p-batch"; done; fi
              packed=""
              for pair in $pairs; do   # a new run without RUN.args: the folder's name + FRONTIER_ARGS
                run=${pair%%=*}
                if [ ! -f "$run/run.sqlite" ] && [ ! -f "$run.args" ]; then
                  mkdir -p "$(dirname "$run")"     # a new FRONTIER_ROOT (a dry run found it missing)
                  echo "$(basename "$run") ${FRONTIER_ARGS:?}" >"$run.args"; fi
              done
              # shellcheck disable=SC2086
              timeout "$LIMIT" $EK advance ${FRONTIER_ADVANCE_ARGS:-} $pairs 2>&1 | tee -a "$R/frontier.txt" \
                | grep -v DEBUG | grep -E "^(run directory|best kernel|evokernel|LLM batch|gen )" | tail -60
              echo "frontier: evokernel advance exit ${PIPESTATUS[0]} (0: every run went on; 1: a run found nothing; 2: a run could not start, named above; 124: LIMIT)" \
                | tee -a "$R/frontier.txt"
              for pair in $pairs; do
                run=${pair%%=*}; batch=${pair#*=}; name=$(basename "$run")
                # under FRONTIER_ROOT, the run's path there with "/" as "-": an ablation's runs
                # share names across problems (softmax/evokernel-s0, layernorm/evokernel-s0)
                if [ -z "${FRONTIER_RUN:-}" ]; then name=${run#"$FRONTIER_ROOT"/}; name=${name//\//-}; fi
                $EK show "$run" >"$R/show_frontier-$name.txt" 2>&1
                tail -12 "$R/show_frontier-$name.txt"; packed="$packed $run $batch"
                [ -f "$run.args" ] && packed="$packed $run.args"
              done
              if [ -n "${OUT:-}" ]; then tar czf "$OUT/frontier.tgz" $packed; fi ;;
    frontier-bench)  # do_bench of each frontier run's best kernel, then issue 21's table
              runs=""
              [ -n "${FRONTIER_BENCH_PROBLEMS:-${FRONTIER_PROBLEMS:-}}" ] && [ -n "${FRONTIER_ROOT:-}" ] \
                || echo "frontier-bench: set FRONTIER_ROOT and FRONTIER_PROBLEMS or FRONTIER_BENCH_PROBLEMS (the runs to time)"
              for p in ${FRONTIER_BENCH_PROBLEMS:-${FRONTIER_PROBLEMS:-}}; do run="$FRONTIER_ROOT/$p"
                if [ ! -f "$run/run.sqlite" ]; then echo "frontier-bench: $run: no run there, left out"; continue; fi
                runs="$runs $run"; rm -f "$run/do_bench.json"   # never a timing of an older best
                if [ ! -f "$run/best.py" ]; then
                  echo "frontier-bench: $run: no best.py (the run has not ended, or accepted nothing): not timed"
                  continue; fi
                timeout "$LIMIT" python3 experiments/do_bench_best.py "$run" \
                  --json "$run/do_bench.json" 2>&1 | tee "$R/do_bench-${p//\//-}.txt" | tail -5
              done
              # shellcheck disable=SC2086
              if [ -n "$runs" ]; then python3 experiments/frontier_table.py $runs --out "$R"; fi ;;
    dask-vs-local) timeout "$LIMIT" python3 scripts/dask_vs_local.py --out "$R/dask_vs_local" \
                     2>&1 | tee "$R/dask_vs_local.txt" | grep -v -E "DEBUG|^W[0-9]" | tail -40 ;;
    # shellcheck disable=SC2086
    dask-gate) timeout "$LIMIT" python3 scripts/dask_vs_local.py --phases gate ${DASK_GATE_ARGS:-} \
                 --out "$R/dask_vs_local" 2>&1 | tee "$R/dask_gate.txt" | grep -v DEBUG | tail -40 ;;
    # shellcheck disable=SC2086
    dask-cold) timeout "$LIMIT" python3 scripts/dask_vs_local.py --phases cold ${DASK_COLD_ARGS:-} \
                 --out "$R/dask_vs_local" 2>&1 | tee "$R/dask_cold.txt" | grep -v DEBUG | tail -20 ;;
    # shellcheck disable=SC2086
    suite-bench) timeout "$LIMIT" python3 -m evokernel.bench --phases suite --results-dir "$R" \
                   ${SUITE_ARGS:-} 2>&1 | tee "$R/bench_suite.txt" | grep -v DEBUG | tail -30 ;;
    sass-audit) timeout "$LIMIT" python3 experiments/sass_audit_report.py --json "$R/sass_audit.json" \
                  2>&1 | grep -v DEBUG | tee "$R/sass_audit.txt" | tail -40 ;;
    # shellcheck disable=SC2086
    sanitize) for k in ${SANITIZE_KERNELS:-tests/kernels/sanitize/*.py}; do n=$(basename "$k" .py)
                prob=$(sed -n 's/^PROBLEM: //p' "$k" | head -1)  # the fixture's own problem
                timeout "$LIMIT" $EK check "${prob:-tests/kernels/faults/problem_add.py}" "$k" --sanitize \
                  --no-compile-baseline --json "$R/sanitize_$n.json" >"$R/sanitize_$n.txt" 2>&1
                echo "sanitize $n: exit $?"; grep -v DEBUG "$R/sanitize_$n.txt" | tail -20
              done ;;
    # shellcheck disable=SC2086
    export-op) op=/tmp/evokernel-export-op; rm -rf "$op"
               timeout "$LIMIT" $EK export "${EXPORT_RUN:-results/h200-2026-12-02/frontier/softmax}" \
                 --op "${EXPORT_OP:-softmax_ek}" -o "$op" ${EXPORT_FLAGS---robustness} 2>&1 \
                 | grep -v DEBUG | tee "$R/export_op.txt" | tail -40
               cp "$op/checks.md" "$R/export_checks.md" 2>/dev/null
               (cd "$op" && timeout "$LIMIT" python3 example.py; echo "example.py: exit $?") 2>&1 \
                 | tee "$R/export_example.txt" | tail -20 ;;
    # shellcheck disable=SC2086
    sandbox-ab) timeout "$LIMIT" python3 scripts/sandbox_ab.py ${SANDBOX_AB_ARGS:-} \
                  --out "$R/sandbox_ab.md" 2>&1 | grep -v DEBUG | tee "$R/sandbox_ab.txt" | tail -15 ;;
    replay) rm -rf "$R/replay"
            timeout "$LIMIT" $EK replay "${REPLAY_RUN:-results/h200-2026-12-02/frontier/softmax}" \
              --run-dir "$R/replay" 2>&1 | grep -v DEBUG | tee "$R/replay.txt" | tail -30 ;;
    hide-check) timeout "$LIMIT" python3 scripts/hide_host_check.py 2>&1 | grep -v DEBUG \
                  | tee "$R/hide_host_check.md" ;;
    validate) python3 scripts/prebuild.py $PREBUILD_FILES \
                | tee "$R/prebuild.txt"
              gpu_tests
              check softmax; check layernorm; check matmul tests/kernels/matmul_fp16.py
              check conv2d; check conv2d_relu_maxpool ;;
    all) "$0" validate "$R"; search softmax; search layernorm; mock ;;
    *) echo "unknown stage $s"; exit 2 ;;
  esac
done

machine_state
{ python3 scripts/summarize.py "$R"
  if [ -f "$R/bench_summary.md" ]; then echo; tail -n +2 "$R/bench_summary.md"; fi
} | tee "$R/summary.md"
