"""``--llm-batch-submit``: an export through the provider's Batch API with litellm (files +
batches), polled to its end, its results imported (evokernel.llm.batch_import).

OpenAI's Batch API (https://platform.openai.com/docs/guides/batch): upload the JSONL with
``purpose="batch"`` (``litellm.create_file``), create the batch on ``/v1/chat/completions`` with a
24 h window (``litellm.create_batch``), poll ``litellm.retrieve_batch`` until it is completed,
failed, expired or cancelled, then download its output and error files
(``litellm.file_content``). The batch id is recorded with each request in the run store, so a
run killed while it waits polls the same batch when resumed instead of paying again.
"""
from __future__ import annotations

import time
from typing import Any

from loguru import logger

from evokernel.errors import LLMError
from evokernel.llm.batch import ENDPOINT, BatchRequest, Export
from evokernel.llm.retry import load_litellm

#: The states a batch ends in.
ENDED = ("completed", "failed", "expired", "cancelled")


def _provider_args(llm: Any, models: set[str]) -> dict[str, Any]:
    """litellm's provider arguments for one export (``custom_llm_provider``, ``api_base``).

    Raises: LLMError when the export's models go to more than one provider (one batch file
        goes to one provider)."""
    litellm = load_litellm()
    providers = {litellm.get_llm_provider(model=m)[1] for m in models}
    if len(providers) != 1:
        raise LLMError(f"--llm-batch-submit: one batch goes to one provider, but the requests "
                       f"go to {sorted(providers)} (models {sorted(models)})")
    args: dict[str, Any] = {"custom_llm_provider": providers.pop()}
    if llm.config.api_base:
        args["api_base"] = llm.config.api_base
    return args


def open_batch(store: Any, requests: list[BatchRequest]) -> str | None:
    """The id of the batch already submitted for exactly these requests (a run killed while it
    waited), or None."""
    rows = {r["key"]: r for r in store.llm_requests()}
    ids = {rows[r.custom_id]["batch_id"] if r.custom_id in rows
           and rows[r.custom_id]["status"] == "submitted" else None for r in requests}
    return ids.pop() if len(ids) == 1 and None not in ids else None


def submit_export(export: Export, store: Any, llm: Any) -> str:
    """Upload ``export`` and create its batch; the requests are recorded as submitted.
    Returns: the batch id.
    Raises: LLMError when the provider refuses the file or the batch."""
    models = {r["model"] for r in store.llm_requests() if r["key"] in export.custom_ids}
    args = _provider_args(llm, models)
    litellm = load_litellm()
    try:
        with export.path.open("rb") as f:
            uploaded = litellm.create_file(file=f, purpose="batch", **args)
        batch = litellm.create_batch(
            completion_window="24h", endpoint=ENDPOINT, input_file_id=uploaded.id,
            metadata={"evokernel_run": store.run_dir.name,
                      "generation": str(export.generation), "round": str(export.round)},
            **args)
    except Exception as e:
        raise LLMError(f"--llm-batch-submit: {export.path}: the Batch API refused it: "
                       f"{type(e).__name__}: {str(e)[:300]} (the requests stay written out; "
                       "import replies by hand or resume to try again)") from e
    for cid in export.custom_ids:
        store.set_llm_request(cid, "submitted", batch_id=batch.id)
    logger.info("LLM batch {}: {} requests submitted ({})", batch.id, len(export.custom_ids),
                export.path.name)
    return batch.id


def wait_and_import(batch_id: str, store: Any, llm: Any, folder: Any, *,
                    poll_s: float, checks: Any = None) -> None:
    """Poll batch ``batch_id`` until it ends, download its output and error files into
    ``folder`` and import them (``checks``: batch_import.import_into's). A request the batch did
    not answer is marked failed.

    Raises: LLMError when the batch cannot be retrieved or downloaded."""
    from evokernel.llm.batch_import import import_into
    keys = [r["key"] for r in store.llm_requests() if r["batch_id"] == batch_id]
    args = _provider_args(llm, {r["model"] for r in store.llm_requests()
                                if r["batch_id"] == batch_id})
    litellm = load_litellm()
    status = None
    try:
        while True:
            batch = litellm.retrieve_batch(batch_id=batch_id, **args)
            if batch.status != status:
                status = batch.status
                logger.info("LLM batch {}: {}", batch_id, status)
            if status in ENDED:
                break
            time.sleep(poll_s)
        for name in ("output_file_id", "error_file_id"):
            file_id = getattr(batch, name, None)
            if not file_id:
                continue
            content = litellm.file_content(file_id=file_id, **args)
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{batch_id}-{name.split('_')[0]}.jsonl"
            path.write_bytes(content.content)
            report = import_into(store, llm.cache, path, checks=checks)
            for problem in report.problems:
                logger.warning("LLM batch {}: {}", batch_id, problem)
            for note in report.notes:
                logger.warning("LLM batch {}: {}", batch_id, note)
    except LLMError:
        raise
    except Exception as e:
        raise LLMError(f"LLM batch {batch_id}: {type(e).__name__}: {str(e)[:300]} (resume "
                       "the run to poll it again)") from e
    why = f"batch {batch_id} ended {status} without a reply for it"
    errors = getattr(getattr(batch, "errors", None), "data", None) or []
    if errors:
        why += f" ({'; '.join(str(getattr(e, 'message', e)) for e in errors)})"
    answered = llm.cache.keys()
    for key in keys:
        if key not in answered and _status(store, key) == "submitted":
            store.set_llm_request(key, "failed", detail=why)


def _status(store: Any, key: str) -> str | None:
    return next((r["status"] for r in store.llm_requests() if r["key"] == key), None)
