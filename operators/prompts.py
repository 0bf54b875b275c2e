"""Prompt texts and builders for the LLM operators (operators/idea.py, crossover, repair, port).

Every builder takes the call's SearchContext (evokernel.operators.base) first, so context the
search adds later reaches the prompts without a signature change, and returns OpenAI-style
messages, ``[{"role": "system", ...}, {"role": "user", ...}]``, for ``LLMClient.complete``.

The system prompt (one text for every request) states the candidate format (both forms:
load_inline and NVRTC, evokernel.nvrtc; the request names the one the run prefers,
FORM_REQUEST), that the precision
gate decides by measured error, the checked rules, the ``// tune:`` marker syntax
(evokernel.operators.tunables) and both reply forms: a whole module in one ```python block
(evokernel.operators.parsing.extract_code) or SEARCH/REPLACE edits of the current kernel
(parsing.apply_edits), which requests on a kernel longer than EDIT_MIN_LINES ask for.

Each user message carries what a kernel engineer would look at: the reference, the GPU sheet,
the kernel's source with its measurements (time, speedups over PyTorch eager and
torch.compile, % of the memory floor and of the FP32 compute reference, which bounds it), its
``ptxas -v`` report, per-kernel GPU times and Nsight Compute metrics when known, the lineage's
history, kernels from other lineages, and last a "This request" section with the generation,
the call index, the sample, the assigned idea category and the ideas already taken, so no two
requests built from different contexts are byte-identical. Stable sections come first, so a
provider's prompt cache can reuse the common prefix.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from evokernel.operators.prompt_sections import gpu_sheet, history, kernel_report
from evokernel.records import Candidate, EvalResult

if TYPE_CHECKING:
    from evokernel.operators.base import SearchContext

#: The six seed categories of optimization ideas (key, description), after Stanford CRFM's
#: "fast kernels" search. Idea prompts ask for ideas spanning them, or for the assigned one.
CATEGORIES: tuple[tuple[str, str], ...] = (
    ("memory", "memory hierarchy: global memory coalescing, shared memory tiling, registers"),
    ("async", "asynchronous operations and latency hiding: cp.async, TMA, double buffering, "
              "software pipelining"),
    ("dtypes", "data types within the precision rule: vectorized loads (float4), wider "
               "accumulators"),
    ("compute", "compute and instruction choice: fused multiply-add, warp shuffles, "
                "fewer instructions per element, fusing operations"),
    ("parallelism", "parallelism and occupancy: work per thread, block size, grid shape, "
                    "warps per block, clusters, register and shared-memory pressure"),
    ("control_flow", "loops, branches and indexing: unrolling, removing divergence, cheaper "
                     "index arithmetic"),
)
CATEGORY_KEYS: tuple[str, ...] = tuple(k for k, _ in CATEGORIES)
_CATEGORY_TEXT = dict(CATEGORIES)

#: How much of a build log or traceback the repair prompt shows (its tail), in characters.
LOG_TAIL_CHARS = 6000
#: Kernels longer than this many lines are edited with SEARCH/REPLACE blocks.
EDIT_MIN_LINES = 150
#: Most inspirations (kernels of other lineages) one prompt shows.
INSPIRATION_LIMIT = 2
#: The line the task of an edit request carries (evokernel.demo.scripted_llm keys on it).
EDIT_REQUEST = "Reply with SEARCH/REPLACE blocks"
#: What the "This request" section says of the form the run prefers (SearchContext.candidate_form;
#: the system prompt teaches both).
FORM_REQUEST = {
    "load_inline": "a torch.utils.cpp_extension.load_inline extension (form 1 of the system "
                   "prompt)",
    "nvrtc": "CUDA source compiled with NVRTC by evokernel.nvrtc.compile_kernels and launched "
             "from Python (form 2 of the system prompt; it builds in about a second): write this "
             "form, porting a load_inline kernel shown here when you change it",
    "any": "either form of the system prompt (load_inline or nvrtc): keep the form of the kernel "
           "you change unless the other one serves the idea better",
}

SYSTEM_PROMPT = """\
You are an expert CUDA performance engineer. You write CUDA kernels that run faster than PyTorch
on NVIDIA GPUs while computing the same function to the same accuracy.

# Candidate format
A candidate is a complete Python module that defines `class ModelNew(nn.Module)` with exactly the
same constructor arguments and `forward` signature as the reference `Model`, and returns the same
output (same shape, dtype and values). Its CUDA code is compiled at module level, in one of two
forms; each request says which one the run prefers.

Form 1, load_inline: a PyTorch extension built with `torch.utils.cpp_extension.load_inline`:

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

Form 2, nvrtc: CUDA source compiled with NVRTC by `evokernel.nvrtc.compile_kernels` (it builds
in about a second), its kernels launched from Python on PyTorch's current stream:

```python
import torch
import torch.nn as nn
from evokernel.nvrtc import compile_kernels

cuda_source = r'''
constexpr int BLOCK = 256;  // tune: 128 256 512 1024
__global__ void my_kernel(const float* __restrict__ x, float* __restrict__ y, long long n) { ... }
'''
kernels = compile_kernels(cuda_source, ["my_kernel"])
BLOCK = kernels.constant("BLOCK")   # the source's value, so tuning it changes the launch too

class ModelNew(nn.Module):
    def __init__(self, *same_args_as_Model):
        super().__init__()
        ...
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        kernels.my_kernel.launch((x.numel() + BLOCK - 1) // BLOCK, BLOCK, x, y, x.numel())
        return y
```
`launch(grid, block, *args, shared_mem=0)`: grid and block are ints or tuples of up to 3 dims;
the arguments follow the kernel's parameters, CUDA tensors for pointers (of the pointee's dtype:
float32 for `float*`) and Python numbers for scalars, and are checked against the parameter
types NVRTC reports. No C++ standard library or torch headers: write `long long` (not
`int64_t`), `-__int_as_float(0x7f800000)` for -inf, and the built-in math (`expf`, `fmaf`,
`rsqrtf`, `isnan`); `<cuda_fp16.h>`, `<cuda/std/...>` and `<cooperative_groups.h>` can be
included. Kernels may be templates, named with their arguments (`"tile<64>"`), `extern "C"` or
not; NVRTC options go in `compile_kernels(src, names, options=["-DTILE=64"])`. Check shapes and
dtypes in Python (raise ValueError), allocate outputs with torch, and do the work in your kernels.

Do not pass `-arch` flags in either form; the build chooses the architecture of the GPU in use.
Requests show the build's `ptxas -v` report of the current kernel (registers, spills, shared
memory) when the build gave one.

# Precision: the gate decides, by measurement
The correctness gate measures your output's error against a float64 ground truth, norm-wise and
element-wise, on several input distributions: the problem's own inputs, an offset distribution
with mean 1000 and std 0.1 (it exposes one-pass variance and other cancellation), large and
small scales, and heavy tails. A kernel passes when its error stays within a few times
PyTorch's own FP32 error (TF32 off) on each of them; the bound is stated with each measured
kernel. Nothing else about precision is forbidden: choose by what the gate will measure.
What it has rejected: products with TF32, FP16 or BF16 inputs (it recognizes outputs that match
a lower-precision truth), one-pass variance on offset data, long naive sums, and unstable
formulas (a softmax without max-subtraction). What stays accurate: FP32 FMA, tree and
warp-shuffle reductions, split-K with FP32 partial sums, fused epilogues, max-subtracted
softmax, Welford or two-pass variance, error-compensated schemes. Approximate intrinsics
(`__expf`, `__fdividef`, `--use_fast_math`) are judged like anything else: their error grows
with the argument's range and fast-math flushes denormals, so weigh them against the
distributions above.

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
then either the whole module in exactly one ```python fenced block, or, when the request asks
for edits, SEARCH/REPLACE blocks that change the current kernel:

<<<<<<< SEARCH
lines copied exactly from the current kernel (enough of them to match one place only)
=======
the lines that replace them
>>>>>>> REPLACE

Blocks apply in order, each to the result of the ones before; a block whose SEARCH text is not
found exactly once is not applied and the whole reply is lost, so copy the lines verbatim.
When asked for ideas: reply with the JSON list asked for, in one ```json fenced block.
"""


def _messages(user: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def _block(source: str, lang: str = "python") -> str:
    return f"```{lang}\n{source.rstrip()}\n```"


def asks_for_edits(source: str) -> bool:
    """Whether a request on ``source`` asks for SEARCH/REPLACE edits (more than
    EDIT_MIN_LINES lines) rather than the whole module."""
    return source.count("\n") + 1 > EDIT_MIN_LINES


def _reference(ctx: "SearchContext") -> str:
    return f"# Reference problem\n{_block(ctx.problem.source)}\n\n# GPU\n{gpu_sheet(ctx.device)}"


def _kernel(title: str, cand: Candidate, result: EvalResult | None,
            ctx: "SearchContext") -> str:
    origin = ("the seed kernel" if cand.operator == "seed" else
              f"generation {cand.generation}, made by {cand.operator}")
    return (f"# {title}\nIdea: {cand.idea or '(seed kernel)'}\n({origin}, id {cand.id})\n"
            f"{_block(cand.source)}\n\n## How it does\n{kernel_report(result, ctx.device)}")


def _context(ctx: "SearchContext") -> str:
    """The lineage's history and the inspirations from other lineages."""
    if ctx.lineage:
        past = ("# History of this lineage (its ancestors and their other children; gain = "
                f"speedup over the parent)\n{history(ctx.lineage)}")
    else:
        past = f"# Ideas tried so far (all lineages)\n{history(ctx.history)}"
    parts = [past]
    for n, (cand, result) in enumerate(list(ctx.inspirations)[:INSPIRATION_LIMIT], 1):
        parts.append(f"# Kernel from another lineage ({n}): learn from it, do not copy it "
                     f"blindly\nIdea: {cand.idea or '(seed kernel)'}\n"
                     f"{kernel_report(result, ctx.device, level='###')}\n{_block(cand.source)}")
    return "\n\n".join(parts)


def _request(ctx: "SearchContext", purpose: str, variant: tuple[int, int]) -> str:
    """The "This request" section: what makes the request unique within its generation."""
    j, n = variant
    lines = [f"- generation {ctx.generation}, call {ctx.call_index} of this generation "
             f"({purpose})" + (f", sample {j + 1} of {n}" if n > 1 else "")]
    if ctx.category:
        lines.append(f"- idea category assigned to this call: `{ctx.category}` "
                     f"({_CATEGORY_TEXT.get(ctx.category, 'as named')})")
    lines.append(f"- candidate form: {FORM_REQUEST.get(ctx.candidate_form, ctx.candidate_form)}")
    if ctx.taken_ideas and purpose in ("ideas", "port"):
        lines.append("- ideas already taken in this generation (propose something different "
                     "from them):")
        lines += [f"  - {idea.strip().splitlines()[0][:300]}" for idea in ctx.taken_ideas
                  if idea.strip()]
    return "# This request\n" + "\n".join(lines)


def _reply_format(base: str | None, what: str, name: str = "current kernel") -> str:
    if base is not None and asks_for_edits(base):
        n = base.count("\n") + 1
        return (f"The {name} has {n} lines. {EDIT_REQUEST} (format in the system prompt) after "
                f"the `Idea:` line, each SEARCH section copied exactly from the {name} and "
                "matching one place only. Only if the change rewrites most of the file, send "
                f"the whole {what} in one ```python block instead.")
    return f"Reply with the `Idea:` line, then the whole {what} in one ```python block."


def ideas_prompt(ctx: "SearchContext", parent: Candidate, k: int) -> list[dict]:
    """Messages asking for ``k`` distinct optimization ideas for ``parent`` (its measured result
    is ``ctx.results.get(parent.id)``), in ``ctx.category`` when one is assigned.

    Returns: messages; the reply is a JSON list of {"idea": ..., "category": ...}.
    Raises: ValueError if k < 1.
    """
    if k < 1:
        raise ValueError(f"ideas_prompt: k must be >= 1, got {k}")
    if ctx.category:
        spread = (f"All {k} ideas in the assigned category `{ctx.category}`: "
                  f"{_CATEGORY_TEXT.get(ctx.category, ctx.category)}.")
    else:
        spread = "Spread the ideas over these categories:\n" + "\n".join(
            f"- `{key}`: {desc}" for key, desc in CATEGORIES)
    task = f"""\
# Task
Propose {k} DISTINCT ideas that would make the current kernel faster while passing the precision
gate. Start from what its measurements say: how far it is from the bound, where its GPU time
goes, what its registers, spills and occupancy allow. Do not repeat ideas that were already
tried unless you change them substantially; learn from the rejected ones. {spread}
Each idea is one or two concrete sentences that another engineer could implement without
further questions (name the technique, the tile/block sizes, what moves where).

Reply with exactly one ```json fenced block holding a list of {k} objects:
[{{"idea": "...", "category": "{ctx.category or CATEGORY_KEYS[0]}"}}, ...]
where category is one of: {", ".join(CATEGORY_KEYS)}."""
    return _messages("\n\n".join([
        _reference(ctx), _kernel("Current kernel", parent, ctx.results.get(parent.id), ctx),
        _context(ctx), _request(ctx, "ideas", (0, 1)), task]))


def implement_prompt(ctx: "SearchContext", parent: Candidate, idea: str, *,
                     variant: tuple[int, int] = (0, 1)) -> list[dict]:
    """Messages asking to change ``parent`` so that it implements ``idea``; ``variant`` = (j, m):
    implementation j of m of the same idea (each asked to differ from the others).

    Returns: messages; the reply is an ``Idea:`` line and one ```python block, or SEARCH/REPLACE
        blocks when the parent is longer than EDIT_MIN_LINES lines.
    """
    j, m = variant
    differ = (f" This is implementation {j + 1} of {m} of this idea: make its tile sizes, "
              "work split or structure differ from the obvious first choice." if m > 1 else "")
    task = f"""\
# Task
Rewrite the current kernel to implement this optimization idea:
> {idea.strip()}

Keep everything that already works; change what the idea needs, using the measurements above
(bound, per-kernel time, registers and spills) to choose sizes.{differ} Mark tunable constants
with `// tune:`. {_reply_format(parent.source, "new module")}"""
    return _messages("\n\n".join([
        _reference(ctx), _kernel("Current kernel", parent, ctx.results.get(parent.id), ctx),
        _context(ctx), _request(ctx, "implement", variant), task]))


def crossover_prompt(ctx: "SearchContext", parent_a: Candidate, parent_b: Candidate, *,
                     variant: tuple[int, int] = (0, 1)) -> list[dict]:
    """Messages asking to merge two parents (sources, ideas, measurements, ptxas reports) into
    one kernel; edits, when asked for, apply to parent A.

    Returns: messages; the reply is an ``Idea:`` line and one ```python block (or edits of A).
    """
    task = f"""\
# Task
Write one kernel that combines the best of both parents: keep the techniques that made each of
them fast, and drop what made either slow or incorrect. If their ideas conflict, pick the one
that fits this problem's bound better and say why in the `Idea:` line. Mark tunable constants
with `// tune:`. {_reply_format(parent_a.source, "module", "Parent A kernel")}"""
    return _messages("\n\n".join([
        _reference(ctx), _kernel("Parent A", parent_a, ctx.results.get(parent_a.id), ctx),
        _kernel("Parent B", parent_b, ctx.results.get(parent_b.id), ctx),
        _context(ctx), _request(ctx, "crossover", variant), task]))


def repair_prompt(ctx: "SearchContext", candidate: Candidate, result: EvalResult, *,
                  variant: tuple[int, int] = (0, 1)) -> list[dict]:
    """Messages asking to fix a rejected candidate, given its reason, detail, error ratios, the
    tail of its build log or traceback (LOG_TAIL_CHARS characters) and how its parent did.

    Returns: messages; the reply is an ``Idea:`` line and one ```python block (or edits).
    """
    log = result.log[-LOG_TAIL_CHARS:] if result.log else "(no log)"
    parent_id = candidate.parent_ids[0] if candidate.parent_ids else None
    parent = ctx.results.get(parent_id) if parent_id else None
    before = (f"\n\n## How its parent ({parent_id}) did\n{kernel_report(parent, ctx.device)}"
              if parent is not None else "")
    task = f"""\
# Task
Fix the kernel so that it builds, runs and passes the precision gate, keeping its optimization
idea where possible. If the idea itself cannot pass the gate, fall back to the closest idea
that can. {_reply_format(candidate.source, "fixed module", "rejected kernel")}"""
    rejected = (f"# Rejected kernel\nIdea: {candidate.idea or '(none stated)'}\n"
                f"{_block(candidate.source)}\n\n# Why it was rejected\n"
                f"{kernel_report(result, ctx.device)}\nLog tail:\n{_block(log, 'text')}{before}")
    return _messages("\n\n".join([_reference(ctx), rejected, _context(ctx),
                                  _request(ctx, "repair", variant), task]))


def port_prompt(ctx: "SearchContext", *, variant: tuple[int, int] = (0, 1)) -> list[dict]:
    """Messages asking for a first correct CUDA kernel for a problem that has no seed kernel.

    Returns: messages; the reply is an ``Idea:`` line and one ```python block.
    """
    task = """\
# Task
Write a first CUDA implementation of this reference as a candidate module (`ModelNew`).
Correctness first: a straightforward kernel that computes exactly the same function as
accurately as the reference, with bounds checks, handling any input size the reference accepts.
If the reference has parameters, create them exactly as it does (same layers, same order), so
that under the same random seed they get the same values. Mark the launch configuration with
`// tune:`. Reply with the `Idea:` line, then the whole module in one ```python block."""
    return _messages("\n\n".join([_reference(ctx), _request(ctx, "port", variant), task]))

