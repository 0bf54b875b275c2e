"""Make results/prompts-cpu-demo/: the prompts of generations 1 and 2 of two CPU searches (softmax,
whose seed kernel is short and is rewritten whole, and layernorm, whose seed is long and is
edited with SEARCH/REPLACE blocks), rendered by scripts/render_prompts.py.

    python scripts/prompts_cpu_demo.py [OUT_DIR]

EVERYTHING IN IT IS A STAND-IN: the evaluator is evokernel.demo.fake_evaluator (its times are a
hash landscape, not measurements), its GPU sheet is evokernel.engine.device_sheet applied to
H200-like properties typed in here (not read from a device), its ptxas and per-kernel rows are
made up, and the LLM is evokernel.demo.scripted_llm (its ideas are a fixed list, not a model's).
It shows what the prompts look like; the H200 renderings show what they say.
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from render_prompts import render  # noqa: E402

from evokernel import Evolution, LLMConfig, RunConfig, SearchConfig, load_problem  # noqa: E402
from evokernel.demo.fake_evaluator import FakeEvaluator  # noqa: E402
from evokernel.demo.scripted_llm import scripted_reply  # noqa: E402
from evokernel.engine.device_sheet import device_sheet  # noqa: E402
from evokernel.llm.client import LLMClient  # noqa: E402
from evokernel.records import KernelResources, KernelTime  # noqa: E402

#: H200-like device properties, typed in (not read from a device).
TYPED_IN = SimpleNamespace(
    name="fake evaluator: H200-like properties typed in, not a device", major=9, minor=0,
    multi_processor_count=132, regs_per_multiprocessor=65536,
    shared_memory_per_multiprocessor=233472, shared_memory_per_block=49152,
    shared_memory_per_block_optin=232448, max_threads_per_multi_processor=2048, warp_size=32,
    L2_cache_size=60 * 2**20, total_memory=143771 * 2**20, clock_rate=1980000,
    memory_clock_rate=3201000, memory_bus_width=6144)
TYPED_PEAKS = SimpleNamespace(copy_gbs=4000.0, fp32_tflops=50.0)


class DemoEvaluator(FakeEvaluator):
    """The fake evaluator with a typed-in GPU sheet and made-up ptxas and per-kernel rows."""

    def __init__(self, problem):
        super().__init__(problem)
        self.info = {**device_sheet(TYPED_IN, TYPED_PEAKS, "9.0"), "torch": "-", "cuda": "-"}

    def judge(self, c):
        r = super().judge(c)
        if not r.accepted:
            return r
        name = "fake_kernel (made up by the demo evaluator)"
        return dataclasses.replace(
            r, kernels=(KernelTime(name, 7, 1000 * r.candidate_ms, 1, True),),
            resources=(KernelResources(name, registers=32 + len(c.source) % 24,
                                       shared_bytes=1024),))


def run(problem_name: str, run_dir: Path) -> Path:
    llm_cfg = LLMConfig(model="openai/scripted-mock", max_concurrency=8)
    cfg = RunConfig(run_dir=str(run_dir), llm=llm_cfg,
                    search=SearchConfig(population_size=3, offspring_per_generation=3,
                                        generations=2, ideas_per_call=2,
                                        implementations_per_idea=2, crossover_prob=0.34, seed=1))
    problem = load_problem(problem_name)
    llm = LLMClient(llm_cfg, cache_path=run_dir / "llm_cache.sqlite", mock_response=scripted_reply)
    return Evolution(problem, cfg, llm=llm, evaluator=DemoEvaluator(problem)).run().run_dir


def main(out: Path) -> None:
    import shutil
    import tempfile
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("softmax", "layernorm"):
            run_dir = run(name, Path(tmp) / name)
            for gen in (1, 2):
                text = render(run_dir, gen).replace(str(run_dir), f"<cpu demo run: {name}>")
                (out / f"{name}-generation-{gen}.md").write_text(text + "\n", encoding="utf-8")
                print(f"wrote {out / f'{name}-generation-{gen}.md'}")
            shutil.rmtree(run_dir)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "results" / "prompts-cpu-demo")
