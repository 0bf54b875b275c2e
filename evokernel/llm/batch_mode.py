"""The batch LLM mode of one run (``BatchMode``): what evokernel.search.evolution calls after each
round of operator calls to write the round's pending requests out (evokernel.llm.batch) and stop,
or to get their replies through the provider's Batch API (evokernel.llm.submit) and go on.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from loguru import logger

from evokernel.errors import LLMPending
from evokernel.llm.batch import BatchQueue, Export, write_export


@dataclass
class BatchMode:
    """The batch mode of one run (``--llm-batch DIR``, ``--llm-batch-submit``).

    Args:
        folder: where exports go; None: ``<run_dir>/llm_batch``.
        submit: submit each export through litellm's Batch API, poll, import and go on
            (evokernel.llm.submit), instead of stopping the run.
        poll_s: seconds between polls of a submitted batch.
        max_attempts: times a request is submitted before its batch error is final (the client
            then raises LLMError for it, and the operator skips it as for a failed live call).
        checks: what the import of submitted replies checks (batch_import.import_into's).
    Raises:
        ValueError: poll_s <= 0 or max_attempts < 1.
    """

    folder: Path | None = None
    submit: bool = False
    poll_s: float = 30.0
    max_attempts: int = 3
    queue: BatchQueue = field(default_factory=BatchQueue)
    checks: Any = None
    on_export: Callable[[Export], None] | None = None

    def __post_init__(self) -> None:
        if not self.poll_s > 0 or self.max_attempts < 1:
            raise ValueError(f"BatchMode: need poll_s > 0 and max_attempts >= 1 (got "
                             f"{self.poll_s}, {self.max_attempts})")
        if self.folder is not None:
            self.folder = Path(self.folder)

    def attach(self, llm: Any, store: Any = None) -> None:
        """Put ``llm`` (an LLMClient with a reply cache) into the batch mode; with the run's
        ``store``, the requests it wrote out earlier and still waits for are queued again when
        asked, even past the budget (they were asked within it).

        Raises: ValueError when ``llm`` has no reply cache to import into."""
        if getattr(llm, "cache", None) is None:
            raise ValueError("the batch mode needs an LLM client with a reply cache "
                             "(LLMClient(cache_path=...))")
        llm.batch = self.queue
        if store is not None:
            self.queue.wait_for(r["key"] for r in store.llm_requests()
                                if r["status"] in ("pending", "submitted"))

    def flush(self, store: Any, generation: int, llm: Any) -> bool:
        """Handle the round's queued requests.

        Returns: False when none are queued (the round is complete); True when ``submit`` got
            replies for them (make the round again: it is now answered from the cache).
        Raises:
            LLMPending: without ``submit``, after writing them out (the run stops here).
            LLMError: ``submit``, and the Batch API could not be used.
        """
        requests = self.queue.take()
        if not requests:
            return False
        folder = self.folder or store.run_dir / "llm_batch"
        batch_id = None
        if self.submit:
            from evokernel.llm.submit import open_batch, submit_export, wait_and_import
            batch_id = open_batch(store, requests)     # submitted before the run was killed
        if batch_id is None:
            export = write_export(store, folder, generation, requests)
            where = (f"in the existing {export.path}, reused (the same requests as written "
                     "there before; not written again)" if export.reused
                     else f"written to {export.path}")
            logger.info("LLM batch: {} request(s) of generation {} (round {}) {}",
                        len(requests), generation, export.round, where)
            if self.on_export is not None:
                self.on_export(export)
            if not self.submit:
                raise LLMPending(f"generation {generation}: {len(requests)} LLM request(s) "
                                 f"{where}; import the replies, then resume")
            batch_id = submit_export(export, store, llm)
        wait_and_import(batch_id, store, llm, folder, poll_s=self.poll_s, checks=self.checks)
        keys = {r.custom_id for r in requests}
        for row in store.llm_requests("failed"):
            if row["key"] in keys and row["attempts"] >= self.max_attempts:
                self.queue.fail(row["key"], row["detail"] or "failed in the batch")
        return True
