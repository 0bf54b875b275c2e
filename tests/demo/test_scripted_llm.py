"""The scripted LLM answers the operators' real prompts: ideas by category without the taken
ones, whole modules for short kernels, SEARCH/REPLACE edits for long ones (that apply, or that
fail on purpose), and repairs of its own injected compile error."""
from __future__ import annotations

import json
import random
import re

from evokernel.demo.scripted_llm import BROKEN, IDEAS, scripted_reply
from evokernel.operators.base import SearchContext
from evokernel.operators.parsing import code_from_reply, extract_code
from evokernel.operators.prompts import (EDIT_REQUEST, crossover_prompt, ideas_prompt,
                                         implement_prompt, repair_prompt)
from evokernel.problem import load_problem
from evokernel.records import Candidate, EvalResult, Reason

SOFTMAX, LAYERNORM = load_problem("softmax"), load_problem("layernorm")


def ctx(problem, **kw) -> SearchContext:
    return SearchContext(problem=problem, generation=1, rng=random.Random(0), **kw)


def ideas_of(reply: str) -> list[dict]:
    return json.loads(re.search(r"```json\n(.*)\n```", reply, re.S).group(1))


def test_ideas_follow_the_category_and_skip_taken_ones():
    seed = Candidate(SOFTMAX.seed_source)
    got = ideas_of(scripted_reply(ideas_prompt(ctx(SOFTMAX, category="parallelism"), seed, 3)))
    assert len(got) == 3 and [g["category"] for g in got[:2]] == ["parallelism"] * 2
    taken = got[0]["idea"]
    again = ideas_of(scripted_reply(ideas_prompt(
        ctx(SOFTMAX, category="parallelism", taken_ideas=(taken,)), seed, 3)))
    assert taken not in [g["idea"] for g in again]
    assert {i for i, _, _ in IDEAS} >= {g["idea"] for g in got}


def test_short_kernels_get_whole_modules_with_a_changed_tunable():
    seed = Candidate(SOFTMAX.seed_source)
    idea = "Keep the row in registers between the max, sum and normalize passes."  # fate ok
    reply = scripted_reply(implement_prompt(ctx(SOFTMAX), seed, f"[memory] {idea}"))
    code = extract_code(reply)
    assert code is not None and code != seed.source and BROKEN not in code
    assert reply.startswith(f"Idea: [memory] {idea}")


def test_long_kernels_get_edits_that_apply_or_fail_as_scripted():
    seed = Candidate(LAYERNORM.seed_source)
    assert seed.source.count("\n") > 150
    ok_idea = "Stage each row through shared memory once and reuse it for every pass."
    prompt = implement_prompt(ctx(LAYERNORM), seed, ok_idea)
    assert EDIT_REQUEST in prompt[1]["content"]
    code, failure = code_from_reply(scripted_reply(prompt), seed.source)
    assert failure == "" and code != seed.source and BROKEN not in code
    fails = "Use float4 vectorized loads and stores on 16-byte aligned rows."   # fate no_code
    code, failure = code_from_reply(scripted_reply(implement_prompt(ctx(LAYERNORM), seed, fails)),
                                    seed.source)
    assert code is None and "is not in the current kernel" in failure
    broken = "Unroll the inner loop by 4 with independent accumulators."        # fate broken
    code, _ = code_from_reply(scripted_reply(implement_prompt(ctx(LAYERNORM), seed, broken)),
                              seed.source)
    assert BROKEN in code
    later = implement_prompt(ctx(LAYERNORM), seed, broken, variant=(1, 2))  # 2nd sample: fine
    assert BROKEN not in code_from_reply(scripted_reply(later), seed.source)[0]


def test_repairs_remove_the_injected_error_in_either_form():
    for problem in (SOFTMAX, LAYERNORM):
        seed = Candidate(problem.seed_source)
        broken = "Unroll the inner loop by 4 with independent accumulators."
        code, _ = code_from_reply(scripted_reply(implement_prompt(ctx(problem), seed, broken)),
                                  seed.source)
        cand = Candidate(code, idea=broken, parent_ids=(seed.id,), operator="idea")
        result = EvalResult.failure(cand.id, Reason.BUILD_ERROR, "error: #error injected")
        fixed, failure = code_from_reply(scripted_reply(repair_prompt(ctx(problem), cand, result)),
                                         cand.source)
        assert failure == "" and BROKEN not in fixed and "class ModelNew" in fixed


def test_crossover_varies_parent_a():
    a = Candidate(SOFTMAX.seed_source)
    b = Candidate(SOFTMAX.seed_source.replace("BLOCK = 256", "BLOCK = 512"), operator="idea")
    reply = scripted_reply(crossover_prompt(ctx(SOFTMAX), a, b))
    code = extract_code(reply) or ""
    assert "class ModelNew" in code and code != a.source
