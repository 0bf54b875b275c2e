"""A stand-in evaluator for the batch LLM mode's rounds on a machine without a GPU.

A run in the batch mode (``--llm-batch DIR``) stops at every LLM round whose replies are not in
its reply cache. Some rounds need no GPU: the idea mutation's implementations, once its ideas
were answered, are only prompts built from the run store and the reply cache. So
``evokernel run --resume RUN_DIR --llm-batch DIR`` on a machine without a CUDA GPU makes those
rounds with a DeferredEvaluator: it describes the GPU the run recorded (the prompts then show
the device sheet they show on that GPU, so the replies' cache keys match there), and it raises
EvaluationDeferred, before anything is built or run, once a round's candidates are ready to be
evaluated. The run stops ("needs_gpu"), and the same command on a machine with the GPU
evaluates them from the cached replies. A new run, and the Batch API mode
(``--llm-batch-submit``, which evaluates in the same process), still need the GPU at once.

    deferred_evaluator(meta, batch)   the stand-in, or None when the real evaluator is needed
    DeferredEvaluator(info)           Evaluator whose evaluate raises EvaluationDeferred
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from evokernel.errors import EvaluationDeferred
from evokernel.records import Candidate, EvalResult


class DeferredEvaluator:
    """An Evaluator (evokernel.engine.evaluator.Evaluator) that evaluates nothing.

    Args:
        info: the device sheet the run recorded on its GPU (RunStore meta ``device``,
            evokernel.engine.device_sheet), returned as ``info``.
    """

    def __init__(self, info: Mapping[str, Any]):
        self.info = dict(info)

    def evaluate(self, candidates: Sequence[Candidate],
                 on_result: Any = None, **_: Any) -> list[EvalResult]:
        """Raises: EvaluationDeferred, always (nothing is built, run or stored)."""
        gpu = self.info.get("device", "the run's GPU")
        raise EvaluationDeferred(f"{len(candidates)} candidate(s) are ready and wait for "
                                 f"evaluation on a CUDA GPU ({gpu}); none is visible here")

    def close(self) -> None:
        """Nothing to release."""


def deferred_evaluator(meta: Mapping[str, Any] | None, batch: Any,
                       gpu_visible: bool | None = None) -> DeferredEvaluator | None:
    """The stand-in for a resumed run's evaluator on a machine without a GPU, or None.

    Args:
        meta: the resumed run's RunStore.meta() (None: a new run).
        batch: the run's evokernel.llm.batch_mode.BatchMode, or None.
        gpu_visible: whether PyTorch sees a CUDA GPU (None: ask torch).
    Returns: DeferredEvaluator(meta["device"]) when no GPU is visible, the run is resumed in the
        batch mode that writes requests out (``batch.submit`` false) and it recorded the GPU it
        ran on; else None (the caller needs the real evaluator, and a GPU for it).
    """
    if meta is None or batch is None or getattr(batch, "submit", True):
        return None
    device = meta.get("device")
    if not isinstance(device, Mapping) or not device.get("device"):
        return None
    if gpu_visible is None:
        import torch
        gpu_visible = torch.cuda.is_available()
    return None if gpu_visible else DeferredEvaluator(device)
