"""The batch LLM mode's command line (evokernel.llm.batch): ``run``'s ``--llm-batch`` flags, what
a stopped run prints, and ``evokernel llm import`` / ``evokernel llm pending``.

    evokernel run softmax --model openai/gpt-5 --llm-batch DIR     writes a round's requests
    evokernel llm import RESULTS.jsonl RUN_DIR                     a Batch API output file
    evokernel llm import DIR RUN_DIR                               or DIR/replies/<id>.txt files
    evokernel run --resume RUN_DIR --llm-batch DIR                 goes on from the cache
    evokernel run softmax --model openai/gpt-5 --llm-batch-submit  all through the Batch API

evokernel.cli.main calls ``add_run_flags`` and ``add_llm_command`` while it builds its parser.
"""
from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from evokernel.errors import ConfigError

#: ``run`` options (argparse dests) that may be given with ``--resume``: the batch mode is chosen
#: per invocation, not stored in the run's config.
RESUME_FLAGS = ("llm_batch", "llm_batch_submit", "llm_batch_poll_s")


def add_run_flags(parser: argparse.ArgumentParser) -> None:
    """Add ``--llm-batch DIR``, ``--llm-batch-submit`` and ``--llm-batch-poll-s`` to ``run``."""
    g = parser.add_argument_group(
        "batch LLM mode", "write requests out instead of sending them; give these again with "
        "--resume (the mode is not stored with the run)")
    g.add_argument("--llm-batch", metavar="DIR",
                   help="write each round's requests whose replies are not in the run's reply "
                        "cache to DIR (OpenAI batch JSONL, and DIR/requests/<id>.json each) "
                        "and stop before evaluating that round; then `evokernel llm import` "
                        "and `evokernel run --resume RUN_DIR --llm-batch DIR`")
    g.add_argument("--llm-batch-submit", action="store_true",
                   help="submit each round through the provider's Batch API (litellm files + "
                        "batches), poll until it ends, import and go on (DIR default: "
                        "RUN_DIR/llm_batch)")
    g.add_argument("--llm-batch-poll-s", type=float, default=30.0, metavar="S",
                   help="seconds between polls of a submitted batch")


def batch_mode(args: argparse.Namespace, model: str | None) -> Any:
    """The BatchMode the flags ask for (None without them).

    Raises: ConfigError without a model (the requests name it, and it is part of each reply's
        cache key) or with a poll interval that is not positive."""
    if not getattr(args, "llm_batch", None) and not getattr(args, "llm_batch_submit", False):
        return None
    if model is None:
        raise ConfigError("--llm-batch/--llm-batch-submit need --model provider/name: the "
                          "requests name the model, and it is part of each reply's cache key")
    if not args.llm_batch_poll_s > 0:
        raise ConfigError(f"--llm-batch-poll-s must be > 0, got {args.llm_batch_poll_s}")
    from evokernel.llm.batch_mode import BatchMode
    return BatchMode(folder=Path(args.llm_batch) if args.llm_batch else None,
                     submit=args.llm_batch_submit, poll_s=args.llm_batch_poll_s,
                     checks=reply_checks())


def reply_checks() -> dict[str, Callable[[str], str | None]]:
    """What an import checks of a reply, by its request's purpose (evokernel.llm.batch_import):
    an ideas reply must hold an idea that the idea mutation's own parser reads. A reply that
    fails is imported all the same (verbatim), and named."""
    from evokernel.operators.parsing import parse_ideas
    return {"ideas": lambda text: None if parse_ideas(text, 1) else
            "a reply to an ideas request with no readable ideas"}


def stop_message(run_dir: Path, mode: Any, again: str = "") -> str:
    """What a run stopped by the batch mode prints: the round's file, how many requests and
    what for, and the import and resume commands (``again``: flags of this resumption the
    resume command repeats, e.g. " --eval-timeout 60")."""
    from evokernel.runs.store import RunStore
    store = RunStore(run_dir, read_only=True)
    try:
        pending = store.llm_requests("pending")
    finally:
        store.close()
    if not pending:
        return "LLM batch: no request is pending"
    latest = max(pending, key=lambda r: r["exported_s"])
    mine = [r for r in pending if r["export"] == latest["export"]]
    kinds = ", ".join(f"{n} {p}" for p, n in sorted(Counter(r["purpose"] for r in mine).items()))
    # The folder of this invocation, not the path stored when the run was somewhere else.
    folder = Path(mode.folder) if mode.folder is not None else Path(latest["export"]).parent
    export = folder / Path(latest["export"]).name
    batch_flag = f"--llm-batch {folder}" if mode.folder is not None else "--llm-batch-submit"
    return "\n".join([
        f"LLM batch: generation {latest['generation']} waits for {len(mine)} "
        f"{'reply' if len(mine) == 1 else 'replies'} ({kinds}).",
        f"  requests (OpenAI Batch API input): {export}",
        f"  one file per request:              {folder / 'requests'}/<custom_id>.json",
        f"  (answer each alone; save the reply verbatim as {folder / 'replies'}/<custom_id>.txt)",
        "next:",
        f"  evokernel llm import RESULTS.jsonl {run_dir}    (the Batch API's output file)",
        f"  evokernel llm import {folder} {run_dir}    (or the reply files)",
        f"  evokernel run --resume {run_dir} {batch_flag}{again}"])


def add_llm_command(sub: Any) -> None:
    """Add ``evokernel llm import`` and ``evokernel llm pending`` to the subcommands ``sub``."""
    p = sub.add_parser("llm", help="the batch LLM mode: import replies, list pending requests")
    cmds = p.add_subparsers(dest="llm_command", required=True, metavar="ACTION",
                            help="import: replies into a run; pending: requests still waiting")
    imp = cmds.add_parser(
        "import", help="fill a run's reply cache from a Batch API output file or reply files",
        description="Import replies into RUN_DIR's reply cache. SOURCE: an OpenAI Batch API "
        "output (or error) file, one JSON line per reply; or a folder of <custom_id>.txt reply "
        "files (a batch folder's replies/ is used), with an optional answered_by.json "
        '{"answered_by": "...", "scripted": false}. Problems are named by file and line; '
        "nothing already imported is overwritten; exit status 1 when there were problems.")
    imp.add_argument("source", help="Batch API output file, or a folder of reply files")
    imp.add_argument("run_dir", help="the run directory")
    imp.add_argument("--answered-by", metavar="NAME",
                     help="who answered, as exactly as you can name it (recorded per reply)")
    imp.add_argument("--scripted", metavar="LABEL",
                     help="the replies were written by a stand-in (a script), not a model: "
                          "label them LABEL in the store, `show` and `report`")
    imp.set_defaults(func=cmd_llm_import)
    pend = cmds.add_parser("pending", help="list the requests of a run still waiting for replies")
    pend.add_argument("run_dir")
    pend.set_defaults(func=cmd_llm_pending)


def cmd_llm_import(args: argparse.Namespace) -> int:
    from evokernel.llm.batch_import import import_replies
    report = import_replies(args.source, args.run_dir, answered_by=args.answered_by,
                            scripted=args.scripted, checks=reply_checks())
    print(report.text())
    return 1 if report.problems else 0


def cmd_llm_pending(args: argparse.Namespace) -> int:
    """Print the requests without a reply; exit status 0 when there are none, 1 otherwise."""
    from evokernel.llm.cache import ReplyCache
    from evokernel.runs.store import RunStore
    store = RunStore(args.run_dir, read_only=True)
    try:
        rows = store.llm_requests()
    finally:
        store.close()
    cache = Path(args.run_dir) / "llm_cache.sqlite"
    have = ReplyCache(cache).keys() if cache.exists() else set()
    waiting = [r for r in rows if r["key"] not in have]
    for r in waiting:
        print(f"{r['key']}  {r['purpose']:<10} generation {r['generation']}  {r['status']}"
              + (f": {r['detail']}" if r["status"] == "failed" and r["detail"] else "")
              + f"  ({r['export']})")
    print(f"{len(waiting)} of {len(rows)} batch requests wait for replies")
    return 1 if waiting else 0
