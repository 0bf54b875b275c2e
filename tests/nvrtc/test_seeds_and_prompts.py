"""The NVRTC form across the search: its seed kernels load, have no fault and compile on the CPU;
the tune operator's markers set what the launch uses; the scripted LLM's implementations and
repairs keep the form; the prompts teach both forms and state the run's; --candidate-form."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from evokernel.build.forms import form_name, nvrtc_calls
from evokernel.cli.kernel_faults import kernel_faults
from evokernel.demo.scripted_llm import BROKEN, scripted_reply
from evokernel.nvrtc import NvrtcCompileError
from evokernel.nvrtc import compiler
from evokernel.nvrtc.compiler import CompileSpec
from evokernel.nvrtc.runtime import Kernels
from evokernel.operators.base import SearchContext
from evokernel.operators.parsing import code_from_reply
from evokernel.operators.prompts import (FORM_REQUEST, SYSTEM_PROMPT, implement_prompt,
                                         repair_prompt)
from evokernel.operators.tune import TuneMutation
from evokernel.problem import builtin_names, load_problem
from evokernel.records import Candidate, EvalResult, Reason

SEEDS = Path(__file__).resolve().parents[2] / "problems" / "seeds" / "nvrtc"


def compile_all(source: str) -> list:
    """Every compile_kernels call of ``source`` compiled for sm_90 (the build step's way)."""
    calls, deferred = nvrtc_calls(source)
    assert calls and not deferred
    return [compiler.compile_spec(CompileSpec(c.source, c.names, c.options, "9.0"))
            for c in calls]


@pytest.mark.parametrize("name", builtin_names())
def test_each_problem_has_an_nvrtc_seed_that_loads_and_compiles(name):
    nv, li = load_problem(name, form="nvrtc"), load_problem(name)
    assert form_name(nv.seed_source) == "nvrtc" and form_name(li.seed_source) == "load_inline"
    assert load_problem(name, form="any").seed_source == li.seed_source
    assert nv.seed_source == (SEEDS / f"{name}.py").read_text()
    assert kernel_faults(SEEDS / f"{name}.py", nv.seed_source) == []
    for done in compile_all(nv.seed_source):
        assert done.cubin[:4] == b"\x7fELF" and done.resources


def test_a_problem_without_an_nvrtc_seed_falls_back_to_its_own(tmp_path):
    (tmp_path / "seeds").mkdir()
    src = (Path(__file__).resolve().parents[2] / "problems" / "softmax.py").read_text()
    (tmp_path / "p.py").write_text(src)
    (tmp_path / "seeds" / "p.py").write_text((SEEDS.parent / "softmax.py").read_text())
    assert form_name(load_problem(tmp_path / "p.py", form="nvrtc").seed_source) == "load_inline"


def test_tuning_an_nvrtc_seed_changes_the_constant_its_launch_reads():
    seed = Candidate(load_problem("softmax", form="nvrtc").seed_source, operator="seed")
    ctx = SearchContext(problem=load_problem("softmax", form="nvrtc"), generation=1,
                        rng=random.Random(1), candidate_form="nvrtc")
    [child] = TuneMutation()(seed, ctx)
    [call] = nvrtc_calls(child.source)[0]
    block = Kernels.__new__(Kernels)
    block.source = call.source
    assert child.idea.startswith("tune BLOCK=")
    assert block.constant("BLOCK") == int(child.idea.split("=")[1]) != 256
    assert compile_all(child.source)


def test_the_scripted_llm_keeps_the_nvrtc_form_and_repairs_its_error():
    problem = load_problem("softmax", form="nvrtc")
    seed = Candidate(problem.seed_source, operator="seed")
    ctx = SearchContext(problem=problem, generation=1, rng=random.Random(0),
                        candidate_form="nvrtc")
    idea = "Unroll the inner loop by 4 with independent accumulators."      # fate: broken
    broken, _ = code_from_reply(scripted_reply(implement_prompt(ctx, seed, f"[x] {idea}")),
                                seed.source)
    assert form_name(broken) == "nvrtc" and BROKEN in broken
    with pytest.raises(NvrtcCompileError, match="#error directive"):
        compile_all(broken)
    child = Candidate(broken, idea=idea, parent_ids=(seed.id,), operator="idea")
    failed = EvalResult.failure(child.id, Reason.BUILD_ERROR, "NVRTC compile error")
    fixed, _ = code_from_reply(scripted_reply(repair_prompt(ctx, child, failed)), broken)
    assert form_name(fixed) == "nvrtc" and BROKEN not in fixed and compile_all(fixed)


def test_the_prompts_teach_both_forms_and_state_the_runs():
    assert "Form 1, load_inline" in SYSTEM_PROMPT and "Form 2, nvrtc" in SYSTEM_PROMPT
    assert "compile_kernels(cuda_source, [\"my_kernel\"])" in SYSTEM_PROMPT
    assert "kernels.constant(\"BLOCK\")" in SYSTEM_PROMPT and "long long" in SYSTEM_PROMPT
    seed = Candidate(load_problem("softmax").seed_source, operator="seed")
    for form in ("load_inline", "nvrtc", "any"):
        ctx = SearchContext(problem=load_problem("softmax"), generation=1,
                            rng=random.Random(0), candidate_form=form)
        user = implement_prompt(ctx, seed, "idea")[1]["content"]
        assert f"- candidate form: {FORM_REQUEST[form]}" in user
    assert "porting a load_inline kernel" in FORM_REQUEST["nvrtc"]


def test_candidate_form_flag_reaches_the_search_config_and_its_contexts():
    import argparse

    from evokernel.cli import options
    from evokernel.config import SearchConfig
    from evokernel.errors import ConfigError
    from evokernel.search.contexts import GenerationContexts
    p = argparse.ArgumentParser()
    options.add_search_arguments(p)
    assert options.search_config(p.parse_args([])).candidate_form == "load_inline"
    cfg = options.search_config(p.parse_args(["--candidate-form", "nvrtc"]))
    assert cfg.candidate_form == "nvrtc"
    with pytest.raises(SystemExit):
        p.parse_args(["--candidate-form", "cupy"])
    with pytest.raises(ConfigError, match="candidate_form must be one of"):
        SearchConfig(candidate_form="cupy")
    import inspect
    assert "candidate_form=self.search.candidate_form" in inspect.getsource(GenerationContexts)
