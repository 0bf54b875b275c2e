"""scripts/render_prompts.py on a CPU run (fake evaluator, scripted LLM): one Markdown section
per request of the generation, rebuilt with the operators' builders, labelled as stand-ins; bad
input named."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from evokernel import Evolution, LLMConfig, RunConfig, SearchConfig, load_problem
from evokernel.demo.fake_evaluator import FakeEvaluator
from evokernel.demo.scripted_llm import scripted_reply
from evokernel.llm.client import LLMClient
from evokernel.operators.prompts import EDIT_REQUEST
from evokernel.runs.store import RunStore

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "render_prompts.py"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("render")
    cfg = RunConfig(run_dir=str(root / "run"), llm=LLMConfig(model="openai/scripted-mock"),
                    search=SearchConfig(population_size=3, offspring_per_generation=3,
                                        generations=1, ideas_per_call=2,
                                        implementations_per_idea=2, crossover_prob=0.34,
                                        seed=1))
    problem = load_problem("layernorm")              # a long seed: edits are asked for
    llm = LLMClient(cfg.llm, cache_path=root / "llm.sqlite", mock_response=scripted_reply)
    return Evolution(problem, cfg, llm=llm, evaluator=FakeEvaluator(problem)).run().run_dir


def render(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=120)


def test_renders_each_request_of_the_generation(run_dir, tmp_path):
    out = tmp_path / "gen1.md"
    done = render(str(run_dir), "--generation", "1", "--out", str(out))
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert "RENDERED FROM FAKE NUMBERS" in text and "not proposed by a model" in text
    assert text.count("## System prompt") == 1
    kids = [c for c in RunStore(run_dir, read_only=True).candidates().values()
            if c.generation == 1 and c.operator == "idea"]
    heads = [ln for ln in text.splitlines() if ln.startswith("## Request ")]
    assert sum(": implement (" in h for h in heads) == len(kids) > 0
    assert sum(": ideas (" in h for h in heads) == len({c.parent_ids for c in kids})
    assert "Propose 2 DISTINCT ideas" in text and EDIT_REQUEST in text
    assert "implementation 1 of 2" in text and "generation 1, call 0 of this generation" in text
    assert render(str(run_dir)).stdout.strip() == text.strip()      # default: the last one


def test_bad_input_is_named(run_dir, tmp_path):
    done = render(str(tmp_path))
    assert done.returncode == 2 and f"{tmp_path}: not a run directory" in done.stderr
    done = render(str(run_dir), "--generation", "7")
    assert done.returncode == 2 and "generation 7 made no LLM request" in done.stderr
