"""What the experiment scripts share: command-line options for the LLM and the evaluator, and
building the LLM client and evaluator of one search from them.

``--mock`` answers with evokernel/demo/scripted_llm.py through litellm's ``mock_response`` (no
provider, no network); ``--mock-server`` serves the same replies from the fake OpenAI-compatible
server of evokernel/demo/fake_server.py on 127.0.0.1, reached through litellm's real HTTP path;
``--evaluator fake`` judges with evokernel/demo/fake_evaluator.py (no GPU; its numbers are not
measurements). They exist so the scripts' logic can be tested in CI, and so the whole pipeline
can be checked on a GPU without a provider.

Without a GPU, a script that needs one stops with one line on stderr and exit status 2 before it
creates any folder (``require_gpu``, ``run_script``).
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from loguru import logger

from evokernel.demo.fake_evaluator import FakeEvaluator  # noqa: E402
from evokernel.demo.scripted_llm import scripted_reply  # noqa: E402

from evokernel.config import LLMConfig  # noqa: E402
from evokernel.engine.factory import require_gpu as require_any_gpu  # noqa: E402
from evokernel.errors import EvokernelError  # noqa: E402
from evokernel.problem import Problem  # noqa: E402
from evokernel.runs.store import RunStore  # noqa: E402

MOCK_MODEL = "openai/scripted-mock"
#: The fake server speaks the OpenAI API; litellm's hosted_vllm provider reaches it with no key.
SERVER_MODEL = "hosted_vllm/scripted-server"


def add_llm_and_evaluator_args(ap: argparse.ArgumentParser) -> None:
    """--model, --api-base, --mock, --evaluator, --verbose."""
    ap.add_argument("--model", help="litellm model, provider/name (e.g. openai/gpt-5, "
                    "ollama/qwen2.5-coder); API keys come from the provider's usual variables")
    ap.add_argument("--api-base", help="endpoint for local vLLM / Ollama / proxies")
    ap.add_argument("--mock", action="store_true",
                    help="use the scripted LLM (evokernel/demo/scripted_llm.py) instead of a model")
    ap.add_argument("--mock-server", action="store_true",
                    help="serve the scripted LLM from a local fake OpenAI-compatible server "
                         "(evokernel/demo/fake_server.py, 127.0.0.1) through litellm's HTTP path")
    ap.add_argument("--evaluator", choices=("cuda", "fake"), default="cuda",
                    help="cuda: build, gate and time on the GPU (default); fake: a cheap "
                         "deterministic stand-in without a GPU, to test the script")
    ap.add_argument("-v", "--verbose", action="store_true", help="log progress (INFO)")


def require_gpu(args: argparse.Namespace | None = None) -> None:
    """Raises NoGPUError (one line) when the script evaluates on the GPU (no ``--evaluator fake``)
    and PyTorch sees none; call it before creating any folder."""
    if args is not None and getattr(args, "evaluator", "cuda") == "fake":
        return
    hint = (" (--mock --evaluator fake runs the script's logic without one: a demonstration "
            "whose numbers are not measurements)" if args is not None and
            hasattr(args, "evaluator") else "")
    require_any_gpu("needs a CUDA GPU to build, gate and time kernels, and PyTorch sees none "
                    "here; nothing was created" + hint)


def run_script(name: str, main: Any) -> int:
    """Run ``main()`` as the script ``name``: an evokernel error ends it with one line
    ("NAME: what was wrong") and exit status 2, an interrupt with 130."""
    try:
        main()
    except EvokernelError as e:
        print(f"{name}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{name}: interrupted (run it again to resume)", file=sys.stderr)
        return 130
    return 0


def configure_logging(verbose: bool) -> None:
    logger.remove()
    logger.add(sys.stderr, level="INFO" if verbose else "WARNING",
               format="<green>{time:HH:mm:ss}</green> <level>{level: <7}</level> {message}")


@contextmanager
def llm_server(args: argparse.Namespace) -> Iterator[Any]:
    """With --mock-server, a fake OpenAI-compatible server answering with the scripted LLM for
    the duration (``args.model`` and ``args.api_base`` then point at it); else nothing."""
    if not getattr(args, "mock_server", False):
        yield None
        return
    from evokernel.demo.fake_server import FakeOpenAI
    with FakeOpenAI(reply=lambda request: scripted_reply(request["messages"])) as server:
        args.model, args.api_base = SERVER_MODEL, server.api_base
        yield server


def llm_label(args: argparse.Namespace) -> str:
    if args.mock:
        return "scripted LLM (--mock, litellm mock_response)"
    if getattr(args, "mock_server", False):
        return "scripted LLM (--mock-server, fake OpenAI server on 127.0.0.1)"
    return args.model or "none (LLM-free tune operator)"


def llm_config(args: argparse.Namespace, **limits: Any) -> LLMConfig:
    """The LLMConfig the options ask for (``model=None`` without --model or a mock)."""
    model = MOCK_MODEL if args.mock else args.model
    return LLMConfig(model=model, api_base=None if args.mock else args.api_base,
                     max_concurrency=16, **limits)


def llm_client(args: argparse.Namespace, config: LLMConfig, run_dir: Path) -> Any:
    """With --mock or --mock-server, an LLMClient that caches in the run directory like the one
    Evolution builds (a resumed run counts what was spent), answering from the script or from
    this process's server (a resumed run's saved api_base names an older one); otherwise None,
    and Evolution builds the client from ``config`` itself."""
    mock_server = getattr(args, "mock_server", False)
    if not (args.mock or mock_server):
        return None
    from evokernel.llm.client import LLMClient
    spent = None
    if resuming(run_dir):
        store = RunStore(run_dir)
        spent = store.llm_usage()
        store.close()
    run_dir.mkdir(parents=True, exist_ok=True)
    if mock_server:
        config = dataclasses.replace(config, api_base=args.api_base)
    return LLMClient(config, cache_path=run_dir / "llm_cache.sqlite", spent=spent,
                     mock_response=scripted_reply if args.mock else None)


def evaluator(args: argparse.Namespace, problem: Problem) -> Any:
    """The fake evaluator with --evaluator fake; None (Evolution's CudaEvaluator) otherwise."""
    return FakeEvaluator(problem) if args.evaluator == "fake" else None


def resuming(run_dir: Path) -> bool:
    """Whether ``run_dir`` already holds a run (the scripts then resume it)."""
    return (run_dir / "run.sqlite").exists()
