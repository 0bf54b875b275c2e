"""Benchmarks of the evaluation engine itself (issue 4): throughput, fidelity, faults.

    python -m evokernel.bench [--phases cold,warm,fidelity,sequential] [--results-dir DIR] ...
    evokernel bench ...                                   (the same flags, once wired in cli.py)
    python -m evokernel.bench --dry-run                   (the plan and its time estimate; no GPU)

1. **Throughput.** Distinct tune-operator variants of the seed kernels (``problems/seeds``: each
   an assignment of the constants marked ``// tune:``, nearest to the seed first) go through
   build, gate and time, one ``CudaEvaluator`` per problem and one ``evaluate()`` call per
   problem, as a search's generation does:

   * ``cold``: an empty build cache (``WORK_DIR/cold``);
   * ``warm``: the same candidates again, new evaluators (new worker processes), warm cache;
   * ``nvrtc_cold``, ``nvrtc_warm``: cold and warm again on the NVRTC twins of the same variants
     (``problems/seeds/nvrtc``: the NVRTC candidate form, evokernel.nvrtc, whose builds take
     about a second instead of about 30 s), in a cache of their own (``WORK_DIR/nvrtc``);
     ``--phases forms`` runs cold, warm and both of these in one call, side by side; target:
     NVRTC cold >= 40/min (issue 19);
   * ``sequential``: the KernelBench-style baseline: one candidate at a time, its build alone
     (one build worker) in a fresh cache (``WORK_DIR/sequential``), then its gate and time, then
     the next. It runs last (after fidelity), on a subset (round-robin over the problems) of as
     many candidates as the time left allows, and its rate is scaled to the whole set (the
     per-candidate cost is one build alone, ~55 s on the H200, which varies by a few %).

   Candidates per minute = 60 x candidates / wall seconds of the ``evaluate()`` calls; setting up
   the evaluators (worker start, fp64 truths, floor) is measured and reported separately, because
   a search pays it once per run. Time per stage: ``build_s`` and ``eval_s`` of each EvalResult;
   ``eval_s`` is not split into gate and time by the worker, so the time part is estimated from
   the trial count, warm-up budget and medians (:func:`split_eval_s`), unless results carry
   measured ``gate_s``/``time_s``. Targets: cold >= 10/min, warm >= 60/min, cold >= 5x sequential.
2. **Fidelity.** Each headline problem's seed kernel is re-measured in ``--fidelity-runs``
   separate evaluators (separate worker processes); the speedup's spread (max / min - 1) must be
   <= 2%. A separate process then loads the same kernel module from the warm cache
   (``evokernel.build.builder.load_candidate``) and the reference, and times both with
   ``triton.testing.do_bench`` (its own L2 flush, warm-up and rep budgets, return_mode="median",
   interleaved rounds); the median speedup of the runs must agree with it within 3%. The same
   process also times them with evokernel's own method, which tells a method difference from a
   process-to-process one.
3. **Cold NVRTC builds** on the CPU alone: ``python -m evokernel.bench.nvrtc_build`` builds
   each NVRTC seed kernel in an empty cache as the engine builds a new candidate, several times,
   and reports every sample and the median against issue 19's < 1 s (no GPU needed).
4. **Faults** are ``tests/engine/test_gpu_faults.py`` (``gpu``-marked; passes on the H200,
   ``plan.FAULTS_EVIDENCE``); the report references it, and ``--phases faults``
   runs it.

Each benchmark writes ``bench_<name>.json`` and ``bench_<name>.md`` under the results folder
(rewritten after every phase, so a run killed by its time limit leaves what it measured), and
the command prints a short table last. The wall-time estimate printed first comes from the
H200's numbers of 2026-11-30 (:class:`CostModel`); phases that no longer fit the budget are
shortened (sequential) or skipped, and say so.

The package: :mod:`~evokernel.bench.plan` (constants, tune variants, BenchPlan, the estimate),
:mod:`~evokernel.bench.throughput` (rates, targets, the cold/warm/sequential phases),
:mod:`~evokernel.bench.fidelity` (spread, the fidelity phase, the do_bench process),
:mod:`~evokernel.bench.report` (JSON, Markdown, the summary table),
:mod:`~evokernel.bench.deps` (BenchDeps and the helpers the phases share),
:mod:`~evokernel.bench.run` (run_bench, cuda_deps) and :mod:`~evokernel.bench.cli`. Importing it
imports no torch.
"""
from evokernel.bench.cli import (add_bench_arguments, build_parser, cmd_bench, describe_plan,
                                 main, plan_from_args)
from evokernel.bench.deps import BenchDeps, EvaluatorFactory, fresh_dir
from evokernel.bench.fidelity import (FidelityRow, do_bench_main, fidelity_row, measure_do_bench,
                                      rel_diff, run_do_bench_process, spread)
from evokernel.bench.plan import (DEFAULT_PHASES, DEFAULT_THROUGHPUT, FAULTS_TEST, HEADLINE,
                                  MAX_DO_BENCH_DISAGREEMENT, MAX_SPEEDUP_SPREAD, PHASES,
                                  TARGET_COLD_OVER_SEQUENTIAL, TARGET_COLD_PER_MIN,
                                  TARGET_WARM_PER_MIN, THROUGHPUT_PHASES, TRIAL_OVERHEAD_MS,
                                  BenchPlan, CostModel, Variant, count_assignments,
                                  engine_build_workers, estimate_wall_s, fidelity_groups,
                                  sequential_fit, sequential_subset, throughput_variants,
                                  tune_assignments, tune_variants)
from evokernel.bench.report import (faults_markdown, fidelity_markdown, summary_table,
                                    throughput_markdown)
from evokernel.bench.run import NO_GPU_MESSAGE, cuda_deps, run_bench
from evokernel.bench.throughput import (PhaseStats, Target, per_minute, phase_stats,
                                        split_eval_s, throughput_targets)

__all__ = [
    "BenchDeps", "BenchPlan", "CostModel", "DEFAULT_PHASES", "DEFAULT_THROUGHPUT",
    "EvaluatorFactory", "FAULTS_TEST", "FidelityRow", "HEADLINE", "MAX_DO_BENCH_DISAGREEMENT",
    "MAX_SPEEDUP_SPREAD", "NO_GPU_MESSAGE", "PHASES", "PhaseStats", "TARGET_COLD_OVER_SEQUENTIAL",
    "TARGET_COLD_PER_MIN", "TARGET_WARM_PER_MIN", "THROUGHPUT_PHASES", "TRIAL_OVERHEAD_MS",
    "Target", "Variant", "add_bench_arguments", "build_parser", "cmd_bench", "count_assignments",
    "cuda_deps", "describe_plan", "do_bench_main", "engine_build_workers", "estimate_wall_s",
    "faults_markdown", "fidelity_groups", "fidelity_markdown", "fidelity_row", "fresh_dir", "main",
    "measure_do_bench", "per_minute", "phase_stats", "plan_from_args", "rel_diff", "run_bench",
    "run_do_bench_process", "sequential_fit", "sequential_subset", "split_eval_s", "spread",
    "summary_table", "throughput_markdown", "throughput_targets", "throughput_variants",
    "tune_assignments", "tune_variants",
]
