"""The content of every prompt as the (fake) OpenAI server receives it: each item an engineer
needs is in the request, no rate of a lower precision is, the gate is the precision rule, and no
two requests built from different contexts are identical. Replies are scripted; no test calls a
real LLM provider. The GPU figures are H200-like values typed into tests/engine (not measured)."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from evokernel.config import LLMConfig
from evokernel.demo.fake_evaluator import FakeEvaluator
from evokernel.demo.fake_server import FakeOpenAI
from evokernel.engine.device_sheet import device_sheet
from evokernel.engine.evaluator import static_check
from evokernel.llm.client import LLMClient
from evokernel.operators import (Attempt, IdeaMutation, LLMCrossover, Repair, SearchContext,
                                 SeedPort)
from evokernel.operators.prompts import (EDIT_MIN_LINES, EDIT_REQUEST, SYSTEM_PROMPT,
                                         crossover_prompt, ideas_prompt, implement_prompt,
                                         port_prompt, repair_prompt)
from evokernel.problem import load_problem
from evokernel.records import (NO_CODE_NOTE, Candidate, EvalResult, KernelProfile,
                               KernelResources, KernelTime, Reason, Verdict)
from tests.engine.test_device_sheet import H200_LIKE, PEAKS

SOFTMAX = load_problem("softmax")
KNAME = "void softmax_row_kernel<256>(float const*, float*, int, int)"


def accepted(cand: Candidate, ms: float, **kw) -> EvalResult:
    return EvalResult(candidate_id=cand.id, verdict=Verdict.ACCEPT, reason=Reason.OK,
                      reference_ms=1.064, candidate_ms=ms, compile_ms=0.872, floor_ms=0.268,
                      norm_error_ratio=1.1, max_error_ratio=0.9, tolerance_factor=16.0, **kw)


SEED = Candidate(SOFTMAX.seed_source)
SEED_RESULT = accepted(
    SEED, 0.52, compute_floor_ms=0.0021,
    kernels=(KernelTime(KNAME, 7, 512.3, 1, True), KernelTime("void at::copy_kernel", 7, 4.1,
                                                              1, False)),
    resources=(KernelResources(KNAME, registers=40, spill_store_bytes=96, spill_load_bytes=128,
                               shared_bytes=1024, stack_bytes=8),),
    profile=(KernelProfile(KNAME, 1, 511.9, 51.7, 86.4, 22.9, 13.2),))
OTHER = Candidate(SOFTMAX.seed_source.replace("BLOCK = 256", "BLOCK = 512"),
                  idea="[memory] float4 loads, 4 rows per block", operator="idea", generation=1)
OTHER_RESULT = accepted(OTHER, 0.31)
#: The worker's info: the sheet plus what else it carries (lower-precision rates included).
DEVICE = {**device_sheet(H200_LIKE, PEAKS, "9.0"), "tf32_tflops": 378.0, "bf16_tflops": 710.0,
          "floor_bound": "memory", "torch": "2.14.1"}
LINEAGE = (Attempt("[memory] stage rows in shared memory", "idea", 2.5, "ok", 2.0, "", "a", 1),
           Attempt("[compute] one-pass sum of squares", "idea", 0.0, "accumulation_error", 2.0,
                   "norm ratio 40.2 > 16 on the 'offset' inputs (seed 1)", "b", 1),
           Attempt("tune BLOCK=512", "tune", 2.1, "ok", 2.0, "", "c", 1))


def context(llm=None, **kw) -> SearchContext:
    base = dict(problem=SOFTMAX, generation=2, rng=random.Random(0), llm=llm,
                results={SEED.id: SEED_RESULT, OTHER.id: OTHER_RESULT}, device=DEVICE,
                lineage=LINEAGE, inspirations=((OTHER, OTHER_RESULT),), category="memory",
                taken_ideas=("use float4 loads",), call_index=5, candidate_form="load_inline")
    base.update(kw)
    return SearchContext(**base)


#: What the GPU sheet must say (132 SMs; per-SM registers, shared memory, threads; opt-in shared
#: memory per block; L2; HBM; FP32 rate; clusters; compute capability).
GPU_ITEMS = ("132 SMs", "65536 32-bit registers", "228 KiB shared memory", "2048 threads",
             "227 KiB of dynamic shared memory", "L2 60.0 MiB", "copy bandwidth 4022 GB/s",
             "peak 4917 GB/s", "measured read 4310 GB/s", "51.2 TFLOP/s measured",
             "thread-block clusters",
             "compute capability 9.0", "sm_90")
#: What the parent's report must say (time, speedups, floors and bound, ptxas, kernels, ncu).
KERNEL_ITEMS = ("time: 0.52 ms", "PyTorch eager (TF32 off): 1.064 ms -> speedup 2.05x",
                "torch.compile: 0.872 ms -> speedup 1.68x", "memory floor: 0.268 ms",
                "takes 194% of it", "FP32 compute reference: 0.0021 ms", "24762% of it",
                "bound: memory",   # 40 registers: 1280 a warp, 65536 / 1280 -> 51 warps
                f"| `{KNAME}` | 40 | 51 | 96 | 128 | 8 | 1024 |",
                "| candidate | 1 | 512.3 | 99% |", "| library | 1 | 4.1 | 1% |",
                "DRAM throughput % of peak", f"| `{KNAME}` | 1 | 511.9 | 52 | 86 | 23 | 13 |",
                "error: norm-wise 1.1x and element-wise 0.9x")
LINEAGE_ITEMS = ("gain 1.25x over its parent", "rejected (accumulation_error): norm ratio 40.2",
                 "1 tune variants", "History of this lineage")
REQUEST_ITEMS = ("generation 2, call 5 of this generation", "`memory` (memory hierarchy",
                 "candidate form: a torch.utils.cpp_extension.load_inline extension (form 1")


def assert_has(text: str, items) -> None:
    missing = [i for i in items if i not in text]
    assert not missing, missing


def assert_no_lower_precision_rates(text: str) -> None:
    assert "378" not in text and "710" not in text and "tf32_tflops" not in text


def served(run, reply) -> list[dict]:
    """The requests the fake OpenAI server received while ``run(client)`` ran."""
    with FakeOpenAI(reply=reply) as server:
        client = LLMClient(LLMConfig(model="openai/fake-model", api_base=server.api_base,
                                     max_retries=0))
        run(client)
        return list(server.requests)


def code(tag: str) -> str:
    return f"Idea: {tag}\n```python\n{SOFTMAX.seed_source}# {tag}\n```\n"


def ideas_then_code(req: dict) -> str:
    if "DISTINCT ideas" in req["messages"][-1]["content"]:
        return '```json\n[{"idea": "keep rows in registers", "category": "memory"}]\n```'
    return code("impl")


@pytest.fixture(autouse=True)
def fake_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake")


def test_ideas_and_implement_requests_carry_everything(fake_key):
    reqs = served(lambda c: IdeaMutation(k=1, m=2)(SEED, context(c)), ideas_then_code)
    assert len(reqs) == 3
    for req in reqs:
        system, user = (m["content"] for m in req["messages"])
        assert system == SYSTEM_PROMPT
        assert_has(user, (SOFTMAX.source.strip(), SEED.source.strip(), *GPU_ITEMS,
                          *KERNEL_ITEMS, *LINEAGE_ITEMS, *REQUEST_ITEMS,
                          "Kernel from another lineage (1)", OTHER.source.strip(),
                          "speedup 3.43x"))
        assert_no_lower_precision_rates(user)
    ideas, impl1, impl2 = (r["messages"][-1]["content"] for r in reqs)
    assert "Propose 1 DISTINCT ideas" in ideas and "All 1 ideas in the assigned category" in ideas
    assert "use float4 loads" in ideas                        # taken ideas: in the ideas call
    assert "> [memory] keep rows in registers" in impl1    # (the two arrive in either order)
    assert sorted(("implementation 1 of 2" in x, "implementation 2 of 2" in x)
                  for x in (impl1, impl2)) == [(False, True), (True, False)]


def test_crossover_request_shows_both_parents_fully(fake_key):
    reqs = served(lambda c: LLMCrossover(children=2)(SEED, OTHER, context(c)),
                  lambda req: code("merged"))
    assert len(reqs) == 2
    for req in reqs:
        user = req["messages"][-1]["content"]
        assert_has(user, ("# Parent A", "# Parent B", SEED.source.strip(), OTHER.source.strip(),
                          *GPU_ITEMS, *KERNEL_ITEMS, *LINEAGE_ITEMS, *REQUEST_ITEMS,
                          "float4 loads, 4 rows per block", "time: 0.31 ms"))
        assert_no_lower_precision_rates(user)
    assert reqs[0] != reqs[1]                               # (they arrive in either order)
    assert sum("sample 2 of 2" in r["messages"][-1]["content"] for r in reqs) == 1


def test_repair_request_shows_the_rejection_its_log_and_the_parent(fake_key):
    broken = Candidate(SEED.source.replace("BLOCK = 256", "BLOCK = 4096"), idea="big blocks",
                       parent_ids=(SEED.id,), operator="idea", generation=1)
    result = EvalResult.failure(broken.id, Reason.RUNTIME_ERROR, "invalid configuration argument",
                                log="Traceback ...\nRuntimeError: CUDA error: invalid "
                                    "configuration argument")
    reqs = served(lambda c: Repair()(broken, result, context(c)), lambda req: code("fixed"))
    user = reqs[0]["messages"][-1]["content"]
    assert_has(user, ("# Rejected kernel", broken.source.strip(), "rejected: runtime_error: "
                      "invalid configuration argument", "RuntimeError: CUDA error", 
                      f"How its parent ({SEED.id}) did", *KERNEL_ITEMS, *GPU_ITEMS,
                      *LINEAGE_ITEMS, *REQUEST_ITEMS))
    assert_no_lower_precision_rates(user)


def test_port_request_has_the_reference_gpu_and_request(fake_key):
    reqs = served(lambda c: SeedPort()(SOFTMAX, context(c)), lambda req: code("port"))
    user = reqs[0]["messages"][-1]["content"]
    assert_has(user, (SOFTMAX.source.strip(), *GPU_ITEMS, *REQUEST_ITEMS, "use float4 loads",
                      "Write a first CUDA implementation"))
    assert_no_lower_precision_rates(user)


def test_the_gate_is_the_precision_rule():
    assert "__expf" in SYSTEM_PROMPT and "judged like anything else" in SYSTEM_PROMPT
    assert "no approximate intrinsics" not in SYSTEM_PROMPT and "`__expf` or" not in SYSTEM_PROMPT
    assert "the gate decides, by measurement" in SYSTEM_PROMPT
    assert "mean 1000 and std 0.1" in SYSTEM_PROMPT and "// tune:" in SYSTEM_PROMPT


def test_rejected_parent_and_unknown_gpu_are_said_so():
    bad = EvalResult.failure(SEED.id, Reason.ACCUMULATION_ERROR, "norm ratio 40 > 16",
                             norm_error_ratio=40.0, max_error_ratio=3.0, tolerance_factor=16.0,
                             distribution="offset")
    user = ideas_prompt(context(results={SEED.id: bad}, device={}, lineage=(), history=LINEAGE),
                        SEED, 2)[1]["content"]
    assert_has(user, ("rejected: accumulation_error: norm ratio 40 > 16", "norm-wise 40.0",
                      "(bound 16.0) on the 'offset' inputs", "- unknown (assume",
                      "# Ideas tried so far (all lineages)", "gain 1.25x"))
    assert "ptxas" not in user and "Nsight" not in user         # no empty tables
    assert "not evaluated yet" in implement_prompt(context(results={}), SEED, "x")[1]["content"]


def test_no_two_requests_from_different_contexts_are_identical():
    builders = [lambda ctx: ideas_prompt(ctx, SEED, 2),
                lambda ctx: implement_prompt(ctx, SEED, "idea"),
                lambda ctx: crossover_prompt(ctx, SEED, OTHER),
                lambda ctx: repair_prompt(ctx, OTHER, EvalResult.failure(OTHER.id,
                                                                         Reason.BUILD_ERROR, "x")),
                lambda ctx: port_prompt(ctx)]
    contexts = [context(call_index=i, category=c) for i in range(4)
                for c in (None, "memory", "async")] + [context(generation=3),
                                                        context(candidate_form="any")]
    for build in builders:
        bodies = [json.dumps(build(ctx)) for ctx in contexts]
        assert len(set(bodies)) == len(bodies)
    samples = {json.dumps(implement_prompt(context(), SEED, "idea", variant=(j, 3)))
               for j in range(3)}
    assert len(samples) == 3


def test_four_ideas_calls_of_a_generation_reach_the_server_distinct(fake_key):
    def run(client):
        for i in range(4):
            IdeaMutation(k=2, m=1).ideas(SEED, context(client, call_index=i), 2)
    reqs = served(run, lambda req: '```json\n["a b c", "d e f"]\n```')
    assert len({json.dumps(r["messages"]) for r in reqs}) == 4


# --- edits: long parents get SEARCH/REPLACE requests, applied or kept with the failing block ---

LONG = SOFTMAX.seed_source + "".join(f"# padding line {i}\n" for i in range(EDIT_MIN_LINES))
LONG_CAND = Candidate(LONG, idea="long kernel", operator="idea", generation=1)
EDIT = ("Idea: bigger blocks\n```\n<<<<<<< SEARCH\nconstexpr int BLOCK = 256;  // tune: 64 128 "
        "256 512 1024\n=======\nconstexpr int BLOCK = 512;  // tune: 64 128 256 512 1024\n"
        ">>>>>>> REPLACE\n```\n")


def test_long_parent_gets_an_edit_request_and_the_edit_is_applied(fake_key):
    ctx_results = {LONG_CAND.id: accepted(LONG_CAND, 0.5)}
    children = []

    def run(client):
        children.extend(IdeaMutation(k=1, m=1)(LONG_CAND, context(client, results=ctx_results)))
    reqs = served(run, lambda req: ideas_then_code(req) if "DISTINCT" in
                  req["messages"][-1]["content"] else EDIT)
    implement = reqs[1]["messages"][-1]["content"]
    assert EDIT_REQUEST in implement and f"has {LONG.count(chr(10)) + 1} lines" in implement
    assert "Reply with SEARCH/REPLACE" not in ideas_prompt(context(), SEED, 1)[1]["content"]
    (child,) = children
    assert child.source == LONG.replace("BLOCK = 256;", "BLOCK = 512;")
    assert child.parent_ids == (LONG_CAND.id,) and static_check(child) is None


def test_an_edit_that_does_not_apply_is_kept_as_no_code_naming_the_block(fake_key):
    bad = EDIT.replace("BLOCK = 256;", "BLOCK = 128;", 1)
    children = []
    served(lambda c: children.extend(Repair()(LONG_CAND, EvalResult.failure(
        LONG_CAND.id, Reason.BUILD_ERROR, "x"), context(c))), lambda req: bad)
    (child,) = children
    assert child.source.startswith(NO_CODE_NOTE) and child.source.endswith(bad)
    assert child.no_code_note.startswith("block 1 of 1 (reply line 3, SEARCH starting "
                                         "'constexpr int BLOCK = 128;")
    for verdict in (static_check(child), FakeEvaluator(SOFTMAX).judge(child)):
        assert verdict.reason is Reason.NO_CODE and verdict.detail == child.no_code_note
        assert "is not in the" in verdict.detail
