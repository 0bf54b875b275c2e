"""A small LLM search that tests/search/test_resume_kill.py runs in a subprocess, kills with SIGKILL and
resumes in another subprocess.

The search is the real one (``Evolution`` with the LLM client it builds from the config, so the
run store, the replay cache and the budget accounting are the production ones); the LLM is the
fake OpenAI-compatible server of evokernel/demo/fake_server.py serving evokernel/demo/scripted_llm.py's
replies, and the evaluator is a fake that sleeps a little per candidate and appends each id it
evaluates to a log file, so the test can see what was evaluated, and how often.

    python -m tests.support.killable_search JOBS_JSON      (from the repository root)

JOBS_JSON is a list of jobs, run one after another:
``[{"run_dir": ..., "api_base": ..., "log": ..., "islands": 1, "resume": false}, ...]``.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from tests.support.fakes import KERNEL, FakeEvaluator  # noqa: E402
from evokernel.demo.scripted_llm import BROKEN  # noqa: E402

from evokernel.config import LLMConfig, RunConfig, SearchConfig  # noqa: E402
from evokernel.problem import Problem  # noqa: E402
from evokernel.records import Candidate, EvalResult, Reason  # noqa: E402
from evokernel.search.evolution import Evolution, RunResult  # noqa: E402

REFERENCE = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x): return x\n" \
            "def get_inputs(): return [torch.randn(4)]\ndef get_init_inputs(): return []\n"
EVAL_DELAY_S = 0.03


class LoggingEvaluator(FakeEvaluator):
    """FakeEvaluator's verdicts (and a build error for the scripted LLM's broken kernels), one
    candidate every ``delay_s`` seconds. Each id is appended to ``log`` once its verdict is known
    and before the search stores it, so an id whose verdict never reached the store may be
    evaluated again after a kill, and no other may."""

    def __init__(self, log: str | Path, delay_s: float = EVAL_DELAY_S):
        super().__init__()
        self.log = Path(log)
        self.delay_s = delay_s

    def evaluate(self, candidates: Sequence[Candidate], on_result=None) -> list[EvalResult]:
        out = []
        fd = os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            for c in candidates:
                time.sleep(self.delay_s)
                r = (EvalResult.failure(c.id, Reason.BUILD_ERROR, "nvcc: #error injected")
                     if BROKEN in c.source else self._judge(c))
                os.write(fd, (c.id + "\n").encode())
                self.evaluated.append(c.id)
                if on_result:
                    on_result(r)
                out.append(r)
        finally:
            os.close(fd)
        return out


def config(run_dir: str | Path, api_base: str, islands: int = 1) -> RunConfig:
    llm = LLMConfig(model="openai/fake-model", api_base=api_base, max_concurrency=8)
    search = SearchConfig(population_size=3, offspring_per_generation=3, generations=3,
                          ideas_per_call=2, implementations_per_idea=2, crossover_prob=0.34,
                          seed=3, islands=islands, migration_interval=1, migrants=1)
    return RunConfig(run_dir=str(run_dir), llm=llm, search=search)


def search(job: dict[str, Any]) -> RunResult:
    """Run (or resume) one job; the OpenAI key is the fake server's (any value works)."""
    os.environ.setdefault("OPENAI_API_KEY", "sk-fake")
    run_dir = Path(job["run_dir"])
    path = run_dir.parent / "ident.py"
    if not path.exists():
        path.write_text(REFERENCE)
    problem = Problem(name="ident", path=path, source=REFERENCE, seed_source=KERNEL)
    evo = Evolution(problem, config(run_dir, job["api_base"], job.get("islands", 1)),
                    evaluator=LoggingEvaluator(job["log"]))
    return evo.run(resume=bool(job.get("resume")))


if __name__ == "__main__":
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    for one in json.loads(sys.argv[1]):
        search(one)
