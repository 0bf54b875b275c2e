"""``evokernel llm import SOURCE RUN_DIR``: replies of the batch mode's requests into the run's
reply cache (evokernel.llm.batch writes the requests out).

SOURCE is either an OpenAI Batch API output (or error) file, one JSON object a line::

    {"id": "batch_req_...", "custom_id": "<key>", "response": {"status_code": 200,
     "request_id": "...", "body": <a chat completion>}, "error": null}

(https://platform.openai.com/docs/guides/batch), or a folder of reply files, ``<custom_id>.txt``
each holding the reply text verbatim (a batch folder is read from its ``replies/``), with an
optional manifest ``answered_by.json`` ({"answered_by": "<who answered>", "scripted": false}).

Every problem is named (file and line, or file) and costs only that reply: nothing already in
the cache is overwritten, and a request whose reply is missing or unusable stays pending, so
``evokernel run --resume`` writes it out again. The problems: a line that is not JSON (a
truncated file), a line without a custom_id, an unknown custom_id (no request of this run), the
same custom_id twice with different replies (neither is imported; each failed line is named
with its own reason), a reply that conflicts with one already imported, a non-200 status or an
error object, an empty reply (a line whose message content is empty, whitespace or null, or an
empty reply file), a non-UTF-8 reply file. A reply without code is stored verbatim (the
evaluator names it ``no_code``). ``checks`` (by request purpose; the command line passes
evokernel.cli.llm.reply_checks: an ideas reply must hold an idea the idea mutation's parser
reads) name a reply its operator cannot use: it is stored verbatim too, named in the notes, and
its request's detail ends with UNUSABLE_REPLY (``show`` counts it as a failed call).

Tokens: a Batch API reply's own usage, priced at litellm's batch price; a reply file carries no
usage, so its tokens are counted (evokernel.llm.tokens) and its cost is unknown (0.0).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from evokernel.errors import ConfigError
from evokernel.llm.batch import MANIFEST
from evokernel.llm.cache import STAND_IN, LLMReply, ReplyCache
from evokernel.records import UNUSABLE_REPLY

#: Per request purpose, why a reply is of no use to its operator (None: usable).
ReplyChecks = Mapping[str, Callable[[str], "str | None"]]


@dataclass(frozen=True)
class Reply:
    """One reply read from SOURCE: its text or its error, where it was read, and its usage."""

    custom_id: str
    where: str                           # "file:line" or the reply file
    text: str | None = None              # None: the request failed (``error``)
    error: str | None = None
    usage: dict[str, int] | None = None  # from a Batch API body; None: count it
    answered_by: str | None = None
    scripted: str | None = None
    truncated: bool = False              # finish_reason "length": cut at max_tokens


@dataclass(frozen=True)
class ImportReport:
    """What an import did. ``problems``: one line each, naming the file and line (or file);
    ``pending``: "key (purpose, generation N)" of the requests still without a reply."""

    source: Path
    run_dir: Path
    imported: tuple[str, ...]
    already: tuple[str, ...]
    problems: tuple[str, ...]
    pending: tuple[str, ...]
    counted: int = 0
    batch_folder: Path | None = None     # where the run's requests were written out
    notes: tuple[str, ...] = ()          # imported as written, but worth knowing

    def text(self) -> str:
        """The report as printed by ``evokernel llm import``."""
        lines = [f"imported {_n(len(self.imported), 'reply', 'replies')} from {self.source} into "
                 f"{self.run_dir / 'llm_cache.sqlite'}"
                 + (f" ({self.counted} with tokens counted: the replies carried no usage)"
                    if self.counted else "")]
        if self.already:
            lines.append(f"{_n(len(self.already), 'reply was', 'replies were')} already "
                         "imported (unchanged)")
        if self.problems:
            lines.append(f"{_n(len(self.problems), 'problem', 'problems')} (nothing in the cache "
                         "was overwritten; a request without an imported reply stays pending):")
            lines += [f"  {p}" for p in self.problems]
        if self.notes:
            lines.append("notes:")
            lines += [f"  {n}" for n in self.notes]
        if self.pending:
            lines.append(f"still pending, no reply yet ({len(self.pending)}):")
            lines += [f"  {p}" for p in self.pending]
        lines.append(f"next: evokernel run --resume {self.run_dir} --llm-batch "
                     f"{self.batch_folder or 'DIR'} "
                     + ("(writes the pending requests out again)" if self.pending
                        else "(goes on from the cache)"))
        if self.batch_folder is None:
            lines.append("  (DIR: the batch folder the run's requests were written to)")
        return "\n".join(lines)


def _n(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _completion_text(body: Any) -> str | None:
    """The reply text of a chat completion body, or None when it has no message."""
    try:
        message = body["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        return None
    if not isinstance(message, dict):
        return None
    content = message.get("content")
    if content is None or content == []:    # a refusal, or no text: kept as what it is
        content = message.get("refusal") or ""
    if isinstance(content, list) and content and all(
            isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
            for p in content):              # content as text parts: their text, in order
        return "".join(p["text"] for p in content)
    return content if isinstance(content, str) else json.dumps(content)


def _empty_reply(body: dict[str, Any], cut: bool) -> str:
    """Why a status-200 line with no reply text is refused (an empty reply file is, too)."""
    content = body["choices"][0]["message"].get("content")
    kind = "null" if content is None else "whitespace only" if content else "empty"
    return (f"empty reply (the message's content is {kind}"
            + ("; finish_reason \"length\": max_tokens ran out before any text" if cut else "")
            + "; not imported)")


def _batch_line(obj: Any, where: str) -> Reply | str:
    """One Batch API output line as a Reply, or the problem with it."""
    if not isinstance(obj, dict) or not isinstance(obj.get("custom_id"), str):
        return f"{where}: no custom_id (not a Batch API output line)"
    cid = obj["custom_id"]
    if obj.get("error"):
        err = obj["error"]
        message = err.get("message") if isinstance(err, dict) else None
        return Reply(cid, where, error=f"error object: {message or json.dumps(err)}")
    response = obj.get("response")
    if not isinstance(response, dict):
        return Reply(cid, where, error="no response object")
    body = response.get("body")
    status = response.get("status_code")
    if status != 200:
        message = body.get("error", {}).get("message") if isinstance(body, dict) and \
            isinstance(body.get("error"), dict) else None
        return Reply(cid, where, error=f"status {status}" + (f": {message}" if message else ""))
    text = _completion_text(body)
    if text is None:
        return Reply(cid, where, error="status 200 but the body holds no message")
    usage = body.get("usage") if isinstance(body.get("usage"), dict) else None
    fingerprint = str(body.get("system_fingerprint") or "")
    choice = body["choices"][0] if isinstance(body.get("choices"), list) else {}
    cut = isinstance(choice, dict) and choice.get("finish_reason") == "length"
    if not text.strip():
        return Reply(cid, where, error=_empty_reply(body, cut))
    return Reply(cid, where, text=text, truncated=cut,
                 usage={k: int(usage.get(k) or 0) for k in ("prompt_tokens",
                                                            "completion_tokens")}
                 if usage and (usage.get("prompt_tokens") or usage.get("completion_tokens"))
                 else None,
                 answered_by=body.get("model") if isinstance(body.get("model"), str) else None,
                 scripted=fingerprint if fingerprint.startswith(STAND_IN) else None)


def read_results(path: Path) -> tuple[list[Reply], list[str]]:
    """The replies of a Batch API output file, and the problems of its unreadable lines."""
    replies: list[Reply] = []
    problems: list[str] = []
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror})") from e
    for n, line in enumerate(raw.splitlines(), 1):
        where = f"{path}:{n}"
        if not line.strip():
            continue
        try:
            obj = json.loads(line.decode("utf-8"))
        except UnicodeDecodeError:
            problems.append(f"{where}: not UTF-8 text")
            continue
        except json.JSONDecodeError as e:
            problems.append(f"{where}: not valid JSON (a truncated line?): {e.msg} (column "
                            f"{e.colno})")
            continue
        got = _batch_line(obj, where)
        (problems.append if isinstance(got, str) else replies.append)(got)
    return replies, problems


def read_reply_files(folder: Path, *, answered_by: str | None,
                     scripted: str | None) -> tuple[list[Reply], list[str]]:
    """The replies in a folder of ``<custom_id>.txt`` files (and its manifest), and the
    problems of unusable files. ``answered_by``/``scripted`` override the manifest's."""
    problems: list[str] = []
    manifest: dict[str, Any] = {}
    if (folder / MANIFEST).exists():
        try:
            manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
            if not isinstance(manifest, dict):
                raise ValueError("not a JSON object")
        except (ValueError, UnicodeDecodeError) as e:
            problems.append(f"{folder / MANIFEST}: not a readable manifest ({e}); expected "
                            '{"answered_by": "...", "scripted": false}')
            manifest = {}
    # A label given here names these replies' writer: the manifest's "answered_by" is not theirs.
    who = answered_by or (None if scripted else manifest.get("answered_by"))
    label = scripted or (f"replies written by {who or 'a script'}" if manifest.get("scripted")
                         else None)
    replies: list[Reply] = []
    for path in sorted(folder.iterdir()):
        if path.name == MANIFEST or path.name.endswith(".tmp"):
            continue
        if path.suffix != ".txt" or not path.is_file():
            problems.append(f"{path}: ignored (a reply file is <custom_id>.txt)")
            continue
        try:
            text = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as e:
            problems.append(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})")
            continue
        if not text.strip():
            problems.append(f"{path}: empty reply file (not imported)")
            continue
        replies.append(Reply(path.stem, str(path), text=text, answered_by=who, scripted=label))
    return replies, problems


@dataclass
class _Importer:
    """Applies read replies to the run's store and cache (``import_replies``)."""

    store: Any
    cache: ReplyCache
    from_files: bool
    checks: ReplyChecks = field(default_factory=dict)
    imported: list[str] = field(default_factory=list)
    already: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    unusable: list[str] = field(default_factory=list)   # "where: why", stored all the same
    counted: int = 0

    def apply(self, replies: list[Reply]) -> None:
        requests = {r["key"]: r for r in self.store.llm_requests()}
        by_id: dict[str, list[Reply]] = {}
        for r in replies:
            by_id.setdefault(r.custom_id, []).append(r)
        for cid, group in by_id.items():
            if cid not in requests:
                self.problems += [f"{r.where}: custom_id {cid}: unknown (no request of this "
                                  "run has that id)" for r in group]
                continue
            ok = [r for r in group if r.text is not None]
            failed = [r for r in group if r.text is None]
            # each failed line with its own reason; a real reply on another line still counts
            self.problems += [f"{r.where}: custom_id {cid}: {r.error}" for r in failed]
            texts = {r.text for r in ok}
            if len(texts) > 1:
                self.problems.append(f"custom_id {cid}: {len(ok)} different replies ("
                                     f"{', '.join(r.where for r in ok)}); none imported")
                continue
            if len(ok) > 1:
                self.problems.append(f"custom_id {cid}: {len(ok)} lines ("
                                     f"{', '.join(r.where for r in ok)}); the same reply, "
                                     "imported once")
            if ok:
                self._put(ok[0], requests[cid])
            elif self.cache.get(cid) is None:
                self.store.set_llm_request(cid, "failed", detail=f"{failed[-1].where}: "
                                                                 f"{failed[-1].error}")

    def _put(self, reply: Reply, request: dict[str, Any]) -> None:
        cid, text = reply.custom_id, reply.text or ""
        stored = self.cache.get(cid)
        if stored is not None:
            if stored["text"] == text:
                self.already.append(cid)
            else:
                self.problems.append(f"{reply.where}: custom_id {cid}: a different reply was "
                                     "imported before; kept that one")
            return
        from evokernel.llm.tokens import count_tokens, price_usd
        model = request["model"]
        if reply.usage is not None:   # a stand-in's own numbers are placeholders
            prompt, completion = reply.usage["prompt_tokens"], reply.usage["completion_tokens"]
            source = "stand-in" if reply.scripted else "provider"
        else:
            prompt, completion = count_tokens(model, request["request"]["messages"], text)
            source = "tokenizer"
            self.counted += 1
        cost = 0.0 if self.from_files else price_usd(model, prompt, completion, batch=True)
        self.cache.put(cid, LLMReply(text=text, model=model, prompt_tokens=prompt,
                                     completion_tokens=completion, reasoning_tokens=0,
                                     cost_usd=cost, cached=False, latency_s=0.0,
                                     usage_source=source, scripted=reply.scripted,
                                     origin="batch", answered_by=reply.answered_by),
                       unbilled=True)
        check = self.checks.get(request["purpose"])
        why = check(text) if check is not None else None
        self.store.set_llm_request(cid, "answered", detail=reply.where if why is None
                                   else f"{reply.where}: {why} {UNUSABLE_REPLY}")
        self.imported.append(cid)
        if why is not None:
            self.unusable.append(f"{reply.where}: {why}")


def import_into(store: Any, cache: ReplyCache, source: Path, *, answered_by: str | None = None,
                scripted: str | None = None, checks: ReplyChecks | None = None) -> ImportReport:
    """``import_replies`` into an open RunStore and ReplyCache (``--llm-batch-submit`` uses it
    with the run's own). Raises: ConfigError when ``source`` is missing or unreadable."""
    source = Path(source)
    if not source.exists():
        raise ConfigError(f"{source}: no such file or folder (expected a Batch API output "
                          "file or a folder of <custom_id>.txt replies)")
    from_files = source.is_dir()
    if from_files:
        folder = source / "replies" if (source / "replies").is_dir() else source
        replies, problems = read_reply_files(folder, answered_by=answered_by, scripted=scripted)
    else:
        replies, problems = read_results(source)
        if answered_by or scripted:
            replies = [Reply(r.custom_id, r.where, r.text, r.error, r.usage,
                             answered_by or r.answered_by, scripted or r.scripted, r.truncated)
                       for r in replies]
    importer = _Importer(store, cache, from_files, dict(checks or {}), problems=problems)
    importer.apply(replies)
    notes = [f"{r.where}: cut at the request's max_tokens (finish_reason \"length\"); "
             "imported as written" for r in replies if r.truncated and r.text is not None]
    notes += [f"{x}; imported as written, and its call gives the generation nothing (a "
              "failed call)" for x in importer.unusable]
    if from_files and not replies and not problems:
        notes.append(f"{folder}: no reply files (<custom_id>.txt) to import")
    cached = cache.keys()
    rows = store.llm_requests()
    pending = tuple(f"{r['key']} ({r['purpose']}, generation {r['generation']}"
                    + (f"; {r['detail']}" if r["status"] == "failed" else "") + ")"
                    for r in rows if r["key"] not in cached)
    given = (folder.parent if folder.name == "replies" else folder) if from_files else None
    return ImportReport(source=source, run_dir=store.run_dir, imported=tuple(importer.imported),
                        already=tuple(importer.already), problems=tuple(importer.problems),
                        pending=pending, counted=importer.counted, notes=tuple(notes),
                        batch_folder=_batch_folder(rows, given))


def _batch_folder(rows: list[dict[str, Any]], given: Path | None) -> Path | None:
    """The batch folder to resume with: the folder given, when it holds this run's request
    files (the run's batch folder, or a copy of it); else the folder the run's latest export
    was written to, when it is there; else None (the advice then names DIR)."""
    if given is not None and any((given / "requests" / f"{r['key']}.json").is_file()
                                 for r in rows):
        return given
    latest = max(rows, key=lambda r: r["exported_s"] or 0.0, default=None)
    if latest is not None and latest["export"] and Path(latest["export"]).parent.is_dir():
        return Path(latest["export"]).parent
    return None


def import_replies(source: str | Path, run_dir: str | Path, *, answered_by: str | None = None,
                   scripted: str | None = None,
                   checks: ReplyChecks | None = None) -> ImportReport:
    """Import the replies in ``source`` (a Batch API output file, or a folder of reply files;
    see the module docstring) into ``run_dir``'s reply cache (``llm_cache.sqlite``).

    Args:
        answered_by: who answered (recorded with each reply; default: a Batch API body's
            ``model``, or the folder's manifest).
        scripted: label the replies as written by this stand-in, not a model (default: the
            fake server's fingerprint, or the manifest's ``"scripted": true``).
        checks: per request purpose, why a reply is of no use to its operator, or None
            (evokernel.cli.llm.reply_checks); such a reply is imported and named in the notes.
    Returns: the ImportReport (problems are reported there, not raised).
    Raises:
        ConfigError: ``run_dir`` is not a run directory, or ``source`` is missing or unreadable.
    """
    from evokernel.runs.store import RunStore
    store = RunStore(run_dir)
    try:
        return import_into(store, ReplyCache(Path(run_dir) / "llm_cache.sqlite"), Path(source),
                           answered_by=answered_by, scripted=scripted, checks=checks)
    finally:
        store.close()
