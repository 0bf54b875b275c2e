"""Prompt texts and builders for the LLM operators (operators/idea.py, crossover, repair, port).

Every builder returns OpenAI-style messages, ``[{"role": "system", ...}, {"role": "user", ...}]``,
ready for ``LLMClient.complete``. The system prompt states the candidate format, the precision
rule, the anti-cheat rules and the ``// tune:`` marker syntax (evokernel.operators.tunables); code replies
are one ```python block (evokernel.operators.parsing.extract_code), idea replies a JSON list
(evokernel.operators.parsing.parse_ideas).
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from evokernel.records import Candidate, EvalResult

#: The six seed categories of optimization ideas (key, description), after Stanford CRFM's
#: "fast kernels" search. Idea prompts ask for ideas spanning them.
CATEGORIES: tuple[tuple[str, str], ...] = (
    ("memory", "memory hierarchy: global memory coalescing, shared memory tiling, registers"),
    ("async", "asynchronous operations and latency hiding: cp.async, double buffering, "
              "software pipelining"),
    ("dtypes", "data types within the precision rule: vectorized loads (float4), wider "
               "accumulators; never a lower precision than the reference"),
    ("compute", "compute and instruction choice: fused multiply-add, warp shuffles, "
                "fewer instructions per element, fusing operations"),
    ("parallelism", "parallelism and occupancy: work per thread, block size, grid shape, "
                    "warps per block, register and shared-memory pressure"),
    ("control_flow", "loops, branches and indexing: unrolling, removing divergence, cheaper "
                     "index arithmetic"),
)
CATEGORY_KEYS: tuple[str, ...] = tuple(k for k, _ in CATEGORIES)

#: How much of a build log or traceback the repair prompt shows (its tail), in characters.
LOG_TAIL_CHARS = 6000
#: How many past attempts the idea prompt lists (the most recent ones).
HISTORY_LIMIT = 40

SYSTEM_PROMPT = """\
You are an expert CUDA performance engineer. You write CUDA kernels that run faster than PyTorch
on NVIDIA GPUs while computing the same function at the same precision.

# Candidate format
A candidate is a complete Python module that defines `class ModelNew(nn.Module)` with exactly the
same constructor arguments and `forward` signature as the reference `Model`, and returns the same
output (same shape, dtype and values). Its CUDA code is compiled at module level with
`torch.utils.cpp_extension.load_inline`, for example:

```python
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r'''
#include <torch/extension.h>
constexpr int BLOCK = 256;  // tune: 128 256 512 1024
__global__ void my_kernel(const float* __restrict__ x, float* __restrict__ y, int n) { ... }
torch::Tensor my_op(torch::Tensor x) { ...; my_kernel<<<grid, BLOCK>>>(...); return y; }
'''
cpp_source = "torch::Tensor my_op(torch::Tensor x);"
ext = load_inline(name="my_op_ext", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["my_op"], verbose=False)

class ModelNew(nn.Module):
    def __init__(self, *same_args_as_Model):
        super().__init__()
        ...
    def forward(self, *same_inputs_as_Model):
        return ext.my_op(...)
```
Do not pass `-arch` flags; the build chooses the architecture of the GPU in use.

# Precision rule
Keep the reference's precision. For FP32 references: no FP16, BF16 or TF32 (no tensor-core TF32
paths, no `allow_tf32`), no `--use_fast_math`, no approximate intrinsics such as `__expf` or
`__fdividef`. Accumulate in FP32 or wider. The correctness gate measures your output's error
against a float64 ground truth, norm-wise and element-wise, on several input distributions:
the problem's own inputs, an offset distribution with mean 1000 and std 0.1 (it exposes
one-pass variance and other cancellation), large and small scales, and heavy tails. It rejects
lower precision and numerically unstable algorithms (use e.g. a max-subtracted softmax, Welford
or two-pass variance). Other summation orders, tree reductions, split-K and fused epilogues are
fine when they stay as accurate as PyTorch in FP32.

# Rules that are checked
Launch your own CUDA kernel(s) for the work; do not call the reference PyTorch op (no
try/except fallback to it). Do not modify inputs, cache outputs across calls, use extra
streams or threads, or touch timers or `torch.cuda.synchronize`. Return a plain dense tensor.

# Tunable constants
Mark compile-time constants worth tuning with a `// tune:` comment listing the values to try, on
the same line as the definition, separated by spaces or commas:
    constexpr int BLOCK = 256;          // tune: 64 128 256 512 1024
    #define ROWS_PER_BLOCK 4            // tune: 1 2 4 8
Every listed value must give a correct kernel (guard tails and bounds); an LLM-free tuner will
try them.

# Reply format
When asked for code: first one line `Idea: <what this kernel does differently, one sentence>`,
then exactly one ```python fenced block holding the whole module. Nothing after the block.
When asked for ideas: reply with the JSON list asked for, in one ```json fenced block.
"""


def _messages(user: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def _block(source: str, lang: str = "python") -> str:
    return f"```{lang}\n{source.rstrip()}\n```"


def format_result(result: EvalResult | None) -> str:
    """One line on how a candidate did: verdict, time in ms, speedup and % of the floor."""
    if result is None:
        return "not evaluated yet"
    if not result.accepted:
        line = f"rejected ({result.reason.value})"
        return f"{line}: {result.detail}" if result.detail else line
    parts = ["correct"]
    if result.candidate_ms is not None:
        parts.append(f"{result.candidate_ms:.4g} ms")
    if result.reference_ms is not None:
        parts.append(f"PyTorch eager {result.reference_ms:.4g} ms")
    parts.append(f"speedup {result.speedup:.3g}x")
    if result.compile_ms is not None:
        parts.append(f"vs torch.compile {result.compile_speedup:.3g}x")
    if result.pct_of_floor is not None:
        parts.append(f"{result.pct_of_floor:.0f}% of the physical floor time "
                     f"({result.floor_ms:.4g} ms; 100% is the floor)")
    return ", ".join(parts)


def format_device(device: Mapping[str, Any]) -> str:
    """GPU properties as 'key: value' lines, or a note that they are unknown."""
    if not device:
        return "unknown (assume a recent NVIDIA datacenter GPU)"
    return "\n".join(f"- {k}: {v}" for k, v in device.items())


def format_history(history: Sequence[Any], limit: int = HISTORY_LIMIT) -> str:
    """Past attempts (evokernel.operators.base.Attempt), most recent ``limit``, one per line."""
    if not history:
        return "none yet"
    rows = list(history)[-limit:]
    lines = []
    for a in rows:
        outcome = f"speedup {a.speedup:.3g}x" if a.reason == "ok" else f"rejected: {a.reason}"
        lines.append(f"- [{a.operator}] {a.idea or '(no idea text)'} -> {outcome}")
    skipped = len(history) - len(rows)
    if skipped > 0:
        lines.insert(0, f"({skipped} older attempts not shown)")
    return "\n".join(lines)


def ideas_prompt(problem_source: str, parent_source: str, parent_result: EvalResult | None,
                 history: Sequence[Any], device: Mapping[str, Any], k: int) -> list[dict]:
    """Messages asking for ``k`` distinct optimization ideas for the parent kernel.

    Args:
        problem_source: the reference problem module (KernelBench format).
        parent_source: the kernel to improve.
        parent_result: its evaluation (time ms, speedup, % of floor), or None.
        history: Attempt records (idea, operator, speedup, reason), oldest first.
        device: GPU properties for the prompt, or {}.
        k: number of ideas (>= 1).
    Returns: messages; the reply is a JSON list of {"idea": ..., "category": ...}.
    Raises: ValueError if k < 1.
    """
    if k < 1:
        raise ValueError(f"ideas_prompt: k must be >= 1, got {k}")
    categories = "\n".join(f"- `{key}`: {desc}" for key, desc in CATEGORIES)
    user = f"""\
# Reference problem
{_block(problem_source)}

# Current kernel
{_block(parent_source)}
Measured: {format_result(parent_result)}

# GPU
{format_device(device)}

# Ideas already tried (and how they did)
{format_history(history)}

# Task
Propose {k} DISTINCT ideas that would make the current kernel faster while obeying the precision
rule. Do not repeat ideas that were already tried unless you change them substantially; learn
from the rejected ones. Spread the ideas over these categories:
{categories}
Each idea is one or two concrete sentences that another engineer could implement without
further questions (name the technique, the tile/block sizes, what moves where).

Reply with exactly one ```json fenced block holding a list of {k} objects:
[{{"idea": "...", "category": "{CATEGORY_KEYS[0]}"}}, ...]
where category is one of: {", ".join(CATEGORY_KEYS)}."""
    return _messages(user)


def implement_prompt(problem_source: str, parent_source: str, idea: str) -> list[dict]:
    """Messages asking to rewrite the parent kernel so that it implements ``idea``.

    Returns: messages; the reply is an ``Idea:`` line and one ```python block.
    """
    user = f"""\
# Reference problem
{_block(problem_source)}

# Current kernel
{_block(parent_source)}

# Task
Rewrite the current kernel to implement this optimization idea:
> {idea.strip()}

Keep everything that already works; change what the idea needs. Keep the precision rule. Mark
tunable constants with `// tune:`. Reply with the `Idea:` line, then the whole new module in
one ```python block."""
    return _messages(user)


def _parent_section(label: str, parent: Candidate, result: EvalResult | None) -> str:
    return (f"# {label}\nIdea: {parent.idea or '(seed kernel)'}\n"
            f"Measured: {format_result(result)}\n{_block(parent.source)}")


def crossover_prompt(problem_source: str, parent_a: Candidate, result_a: EvalResult | None,
                     parent_b: Candidate, result_b: EvalResult | None) -> list[dict]:
    """Messages asking to merge two parent kernels (sources, ideas and measurements) into one
    that combines the strengths of both.

    Returns: messages; the reply is an ``Idea:`` line and one ```python block.
    """
    user = f"""\
# Reference problem
{_block(problem_source)}

{_parent_section("Parent A", parent_a, result_a)}

{_parent_section("Parent B", parent_b, result_b)}

# Task
Write one kernel that combines the best of both parents: keep the techniques that made each of
them fast, and drop what made either slow or incorrect. If their ideas conflict, pick the one
that fits this problem better and say why in the `Idea:` line. Keep the precision rule and mark
tunable constants with `// tune:`. Reply with the `Idea:` line, then the whole module in one
```python block."""
    return _messages(user)


def repair_prompt(problem_source: str, candidate: Candidate, result: EvalResult) -> list[dict]:
    """Messages asking to fix a rejected candidate, given its reason, detail and the tail of its
    build log or traceback (LOG_TAIL_CHARS characters).

    Returns: messages; the reply is an ``Idea:`` line and one ```python block.
    """
    log = result.log[-LOG_TAIL_CHARS:] if result.log else "(no log)"
    checks = ""
    if result.norm_error_ratio is not None or result.max_error_ratio is not None:
        checks = (f"\nError vs the float64 truth, as a multiple of PyTorch's own FP32 error: "
                  f"norm-wise {result.norm_error_ratio}, element-wise max "
                  f"{result.max_error_ratio} (bound: {result.tolerance_factor}) on the "
                  f"'{result.distribution}' inputs.")
    user = f"""\
# Reference problem
{_block(problem_source)}

# Rejected kernel
Idea: {candidate.idea or '(none stated)'}
{_block(candidate.source)}

# Why it was rejected
Reason: {result.reason.value}
Detail: {result.detail or '(none)'}{checks}
Log tail:
{_block(log, "text")}

# Task
Fix the kernel so that it builds, runs and passes the precision gate, keeping its optimization
idea where possible. If the idea itself breaks the precision rule, fall back to the closest
idea that keeps it. Reply with the `Idea:` line, then the whole fixed module in one ```python
block."""
    return _messages(user)


def port_prompt(problem_source: str) -> list[dict]:
    """Messages asking for a first correct CUDA kernel for a problem that has no seed kernel.

    Returns: messages; the reply is an ``Idea:`` line and one ```python block.
    """
    user = f"""\
# Reference problem
{_block(problem_source)}

# Task
Write a first CUDA implementation of this reference as a candidate module (`ModelNew`).
Correctness first: a straightforward kernel that computes exactly the same function at the
reference's precision, with bounds checks, handling any input size the reference accepts. If
the reference has parameters, create them exactly as it does (same layers, same order), so that
under the same random seed they get the same values. Mark the launch configuration with `// tune:`. Reply with the `Idea:` line, then the whole
module in one ```python block."""
    return _messages(user)
