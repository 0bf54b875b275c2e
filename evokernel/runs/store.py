"""The run store: one directory per run, written as each candidate finishes.

Layout of a run directory:
    config.json     the RunConfig (evokernel.config), written once
    problem.py      a copy of the reference problem
    run.sqlite      candidates, results, generations, the DEAP Logbook (one statistics record
                    per generation), LLM calls, the batch mode's requests and run metadata
                    (SQLite, WAL mode, so ``evokernel show`` can read a run that is still going)
    llm_cache.sqlite  the replies by request key (evokernel.llm.cache), for replay
    best.py         the best accepted kernel, as a standalone candidate file

SQLite (stdlib) gives atomic, crash-safe writes: a run killed with kill -9 at any point loses at
most the record being written, and resumes from what is there (evokernel.search.evolution).

``RunStore(run_dir, read_only=True)`` (``evokernel show``/``report``/``export``) never writes to
the run directory: a run that is still going is read through SQLite's read-only mode (sharing
the writer's WAL), and a finished one as an immutable file, so no ``-wal``/``-shm`` files appear
beside a committed run and its bytes stay as they are.

``create`` writes the store whole (its tables and the problem's name) under a temporary name and
renames it into place, so ``run.sqlite`` is never empty or half made. Opening a store, for
reading or writing, first checks that it is one (``evokernel.runs.schema``): an empty file, a SQLite file
of another program, or a corrupt one is refused with a ConfigError that names the file and says
which it is, before anything is read or written.
"""
from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from evokernel.config import RunConfig
from evokernel.errors import ConfigError
from evokernel.problem import Problem
from evokernel.records import UNUSABLE_REPLY, Candidate, EvalResult
from evokernel.runs.schema import CORE_TABLES, SCHEMA, check_file, check_store, is_wal_file

#: The states of a batch-mode request (``llm_requests.status``): written out and waiting,
#: handed to a batch API, its reply imported, or failed (the batch or the import said why; it is
#: written out again when the run resumes).
REQUEST_STATES = ("pending", "submitted", "answered", "failed")
#: Words that name a stand-in model (experiments' "openai/scripted-mock", the demo server's
#: "hosted_vllm/scripted-server"): calls recorded before replies carried a ``scripted`` label
#: are labelled by their model's name.
STAND_IN_NAMES = ("scripted", "mock", "fake")


def legacy_stand_in(call: dict[str, Any]) -> str | None:
    """The label of a call recorded before the ``scripted`` field existed whose model is named
    as a stand-in (STAND_IN_NAMES); None for a labelled record or any other model."""
    if "scripted" in call:
        return None
    name = str(call.get("model") or "").rsplit("/", 1)[-1].lower()
    if any(word in name for word in STAND_IN_NAMES):
        return f"{call['model']} (a stand-in by its name; recorded before replies were labelled)"
    return None


_REQUEST_FIELDS = ("key", "generation", "purpose", "sample_index", "model", "request", "export",
                   "status", "detail", "batch_id", "attempts", "exported_s", "answered_s")


class RunStore:
    """Read and write one run directory. Thread-safe (LLM threads record their calls)."""

    def __init__(self, run_dir: str | Path, *, read_only: bool = False):
        """Open an existing run directory (see ``create`` to make one).

        Args:
            run_dir: the run directory.
            read_only: open for reading only (show, report, export): nothing in the directory
                is created or changed, and writes raise ConfigError.
        Raises:
            ConfigError: ``run_dir`` holds no run store, or its run.sqlite is empty, of
                another program or corrupt (``check_store``); nothing is written then.
        """
        self.run_dir = Path(run_dir)
        self.read_only = read_only
        db = self.run_dir / "run.sqlite"
        if not db.is_file():
            raise ConfigError(f"{self.run_dir}: not a run directory (no run.sqlite)")
        check_file(db)
        self._lock = threading.Lock()
        if read_only:
            # A live writer keeps run.sqlite-wal open; without one, SQLite's read-only mode
            # would still create -wal/-shm files, so a finished run is opened as immutable.
            live = Path(f"{db}-wal").exists() or not is_wal_file(db)
            uri = db.resolve().as_uri() + ("?mode=ro" if live else "?immutable=1")
            self._db = sqlite3.connect(uri, uri=True, check_same_thread=False, timeout=30.0)
        else:
            self._db = sqlite3.connect(db, check_same_thread=False, timeout=30.0)
        try:
            check_store(self._db, db)
        except ConfigError:
            self._db.close()
            raise
        if read_only:
            return
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(SCHEMA)

    @classmethod
    def create(cls, run_dir: str | Path, config: RunConfig, problem: Problem) -> "RunStore":
        """Make a new run directory with its config and a copy of the problem.

        Raises:
            ConfigError: the directory already holds a run (resume it instead).
        """
        run_dir = Path(run_dir)
        db_file = run_dir / "run.sqlite"
        if db_file.is_file() and db_file.stat().st_size == 0:
            raise ConfigError(f"{db_file}: an empty file (0 bytes), not a run to resume: the "
                              "run never started; delete it or choose another --run-dir")
        if db_file.exists():
            raise ConfigError(f"{run_dir}: already holds a run; resume it with --resume "
                              "or choose another --run-dir")
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.json").write_text(config.to_json() + "\n")
        (run_dir / "problem.py").write_text(problem.source)
        if problem.seed_source is not None:   # resume needs it if killed before generation 0
            (run_dir / "seed.py").write_text(problem.seed_source)
        new = run_dir / "run.sqlite.new"      # whole before it is run.sqlite (check_store)
        new.unlink(missing_ok=True)
        db = sqlite3.connect(new)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(SCHEMA)
            db.executemany("INSERT INTO meta VALUES (?,?)", [
                ("problem", json.dumps({"name": problem.name, "path": str(problem.path)})),
                ("started_s", json.dumps(time.time()))])
            db.commit()
        finally:
            db.close()
        os.replace(new, run_dir / "run.sqlite")
        return cls(run_dir)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- writes -----------------------------------------------------------------------------
    def _write(self, sql: str, args: tuple[Any, ...]) -> None:
        if self.read_only:
            raise ConfigError(f"{self.run_dir}: run store opened read-only")
        with self._lock:
            self._db.execute(sql, args)
            self._db.commit()

    def add_candidate(self, c: Candidate) -> None:
        """Record a proposal (idempotent: a candidate already stored is kept as it was)."""
        self._write("INSERT OR IGNORE INTO candidates VALUES (?,?,?,?,?,?,?)",
                    (c.id, c.source, c.idea, json.dumps(list(c.parent_ids)), c.operator,
                     c.generation, time.time()))

    def add_result(self, r: EvalResult) -> None:
        """Record a verdict (the latest one for a candidate wins)."""
        self._write("INSERT OR REPLACE INTO results VALUES (?,?,?,?,?,?)",
                    (r.candidate_id, r.verdict.value, r.reason.value, r.speedup,
                     json.dumps(r.to_dict()), time.time()))

    def end_generation(self, generation: int, population: list[str], best_id: str | None,
                       best_speedup: float, valid: int, total: int,
                       rng_state: Any = None, logbook: dict[str, Any] | None = None) -> None:
        """Mark a generation complete: its surviving population, the RNG state after it and its
        Logbook record (DEAP ``tools.Logbook`` entry: gen, nevals, max, ...), in one
        transaction, so a resumed run finds both or neither."""
        if self.read_only:
            raise ConfigError(f"{self.run_dir}: run store opened read-only")
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO generations VALUES (?,?,?,?,?,?,?,?)",
                             (generation, json.dumps(population), best_id, best_speedup, valid,
                              total, json.dumps(rng_state), time.time()))
            if logbook is not None:
                self._db.execute("INSERT OR REPLACE INTO logbook VALUES (?,?)",
                                 (generation, json.dumps(logbook)))
            self._db.commit()

    def record_llm_call(self, data: dict[str, Any]) -> None:
        """Record one LLM call as evokernel.llm.client reports it (purpose, model, tokens,
        cost_usd, cached, usage_source, scripted, origin, answered_by, key, error, ...).
        A cache hit on a request this run already recorded is not recorded again: a resumed
        round makes its calls again from the cache, and would count them once per resume."""
        if data.get("cached") and data.get("key"):
            with self._lock:
                seen = self._db.execute("SELECT 1 FROM llm_calls WHERE json_extract(data, "
                                        "'$.key') = ? LIMIT 1", (data["key"],)).fetchone()
            if seen:
                return
        self._write("INSERT INTO llm_calls (data, at_s) VALUES (?,?)",
                    (json.dumps(data), time.time()))

    def add_llm_requests(self, generation: int, export: str,
                         requests: list[dict[str, Any]]) -> None:
        """Record requests the batch mode wrote out (evokernel.llm.batch) as "pending" in the
        export file ``export``. Each dict: key, purpose, sample_index, model, request (the
        request file's JSON). A request written out again is pending again, with its attempts
        counted."""
        now = time.time()
        rows = [(r["key"], generation, r["purpose"], r["sample_index"], r["model"],
                 json.dumps(r["request"]), export, now) for r in requests]
        if self.read_only:
            raise ConfigError(f"{self.run_dir}: run store opened read-only")
        with self._lock:
            self._db.executemany(
                "INSERT INTO llm_requests (key, generation, purpose, sample_index, model, request,"
                " export, status, attempts, exported_s) VALUES (?,?,?,?,?,?,?,'pending',1,?) "
                "ON CONFLICT(key) DO UPDATE SET export = excluded.export, status = 'pending', "
                "detail = NULL, batch_id = NULL, attempts = attempts + 1, "
                "exported_s = excluded.exported_s", rows)
            self._db.commit()

    def set_llm_request(self, key: str, status: str, *, detail: str | None = None,
                        batch_id: str | None = None) -> None:
        """Set a batch-mode request's status (REQUEST_STATES) and why (``detail``); "answered"
        also stamps the time. Raises: ValueError for an unknown status."""
        if status not in REQUEST_STATES:
            raise ValueError(f"set_llm_request: status must be one of {REQUEST_STATES}, "
                             f"got {status!r}")
        self._write("UPDATE llm_requests SET status = ?, detail = ?, "
                    "batch_id = COALESCE(?, batch_id), answered_s = ? WHERE key = ?",
                    (status, detail, batch_id, time.time() if status == "answered" else None,
                     key))

    def set_meta(self, key: str, value: Any) -> None:
        self._write("INSERT OR REPLACE INTO meta VALUES (?,?)", (key, json.dumps(value)))

    # -- reads ------------------------------------------------------------------------------
    def _rows(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            try:
                return self._db.execute(sql, args).fetchall()
            except sqlite3.OperationalError as e:
                if "no such table" in str(e) and self.read_only and not any(
                        f" {t} " in f" {sql} " for t in CORE_TABLES):
                    return []                 # an older store opened read-only: none yet
                raise ConfigError(f"{self.run_dir / 'run.sqlite'}: cannot read the run store: "
                                  f"{e}") from e
            except sqlite3.DatabaseError as e:
                raise ConfigError(f"{self.run_dir / 'run.sqlite'}: not a readable run store "
                                  f"({e})") from e

    def config(self) -> RunConfig:
        """The run's config.json. Raises: ConfigError naming the file when it is missing or
        malformed."""
        path = self.run_dir / "config.json"
        try:
            return RunConfig.from_dict(json.loads(path.read_text()))
        except FileNotFoundError as e:
            raise ConfigError(f"{path}: missing (not a complete run directory)") from e
        except (json.JSONDecodeError, UnicodeDecodeError, AttributeError) as e:
            raise ConfigError(f"{path}: not a valid config file ({e})") from e

    def meta(self) -> dict[str, Any]:
        return {k: json.loads(v) for k, v in self._rows("SELECT key, value FROM meta")}

    def candidates(self) -> dict[str, Candidate]:
        """Every stored candidate by id, in the order they were proposed."""
        rows = self._rows("SELECT id, source, idea, parent_ids, operator, generation "
                          "FROM candidates ORDER BY rowid")
        return {r[0]: Candidate(source=r[1], idea=r[2] or "", parent_ids=tuple(json.loads(r[3])),
                                operator=r[4], generation=r[5]) for r in rows}

    def results(self) -> dict[str, EvalResult]:
        """Every verdict by candidate id."""
        return {r[0]: EvalResult.from_dict(json.loads(r[1]))
                for r in self._rows("SELECT candidate_id, data FROM results ORDER BY rowid")}

    def generations(self) -> list[dict[str, Any]]:
        """Completed generations, oldest first."""
        rows = self._rows("SELECT generation, population, best_id, best_speedup, valid, total, "
                          "rng_state, finished_s FROM generations ORDER BY generation")
        return [{"generation": g, "population": json.loads(p), "best_id": b,
                 "best_speedup": s, "valid": v, "total": t, "rng_state": json.loads(rs),
                 "finished_s": f} for g, p, b, s, v, t, rs, f in rows]

    def logbook(self) -> list[dict[str, Any]]:
        """The Logbook records of the completed generations, oldest first ([] for a run made
        before the Logbook was kept)."""
        return [json.loads(r) for (r,) in self._rows(
            "SELECT record FROM logbook ORDER BY generation")]

    def last_write_s(self) -> float | None:
        """Unix time (s) of the newest record of any kind, or None for an empty store."""
        times = [t for (t,) in self._rows(
            "SELECT MAX(created_s) FROM candidates UNION ALL SELECT MAX(evaluated_s) FROM results "
            "UNION ALL SELECT MAX(finished_s) FROM generations UNION ALL SELECT MAX(at_s) "
            "FROM llm_calls") if t is not None]
        return max(times) if times else None

    def compile_baseline_ms(self) -> float | None:
        """The torch.compile baseline (ms) the run measured, for a resumed run to reuse: None
        when it measured none, or when this machine's first GPU or torch version is not the
        one it was measured on (then it is measured again)."""
        device = self.meta().get("device") or {}
        ms = device.get("compile_ms")
        if not isinstance(ms, (int, float)) or not ms > 0:
            return None
        import torch
        if not torch.cuda.is_available() or torch.__version__ != device.get("torch") \
                or torch.cuda.get_device_name(0) != device.get("device"):
            return None
        return float(ms)

    def llm_calls(self) -> list[dict[str, Any]]:
        return [json.loads(d) for (d,) in self._rows("SELECT data FROM llm_calls ORDER BY id")]

    def llm_requests(self, status: str | None = None) -> list[dict[str, Any]]:
        """The batch mode's requests (all, or those with ``status``), in the order they were
        first written out; ``request`` is the request file's JSON."""
        where, args = ("WHERE status = ?", (status,)) if status else ("", ())
        rows = self._rows(f"SELECT {', '.join(_REQUEST_FIELDS)} FROM llm_requests {where} "
                          "ORDER BY rowid", args)
        out = [dict(zip(_REQUEST_FIELDS, r)) for r in rows]
        for r in out:
            r["request"] = json.loads(r["request"])
        return out

    def llm_usage(self) -> dict[str, Any]:
        """Totals over every recorded LLM call: calls, tokens by kind and cost_usd of the calls
        actually sent or imported (replayed cache hits cost nothing), and the number of cache
        hits (``cached``); where the tokens came from (``usage_sources``: {"provider" or
        "tokenizer": calls}, over the calls that count tokens); ``origins`` ({"live" or
        "batch": calls}); ``scripted`` (how many calls a stand-in answered, replays included)
        and ``scripted_by`` (their labels); ``answered_by`` (who answered imported replies);
        ``batch_requests`` and ``batch_waiting``: the batch mode's requests, and those without
        an imported reply yet; ``batch_unusable``: imported replies their operator cannot use."""
        total: dict[str, Any] = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0,
                                 "reasoning_tokens": 0, "cost_usd": 0.0, "cached": 0,
                                 "usage_sources": {}, "origins": {}, "scripted": 0,
                                 "scripted_by": [], "answered_by": []}
        states = self._rows("SELECT status, detail FROM llm_requests")
        total["batch_requests"] = len(states)
        total["batch_waiting"] = sum(s != "answered" for s, _ in states)
        total["batch_unusable"] = sum(s == "answered" and str(d).endswith(UNUSABLE_REPLY)
                                      for s, d in states)
        for c in self.llm_calls():
            total["calls"] += 1
            total["cached"] += int(bool(c.get("cached")))
            scripted = c.get("scripted") or legacy_stand_in(c)
            if scripted:
                total["scripted"] += 1
                if scripted not in total["scripted_by"]:
                    total["scripted_by"].append(scripted)
            if c.get("cached") or c.get("error"):
                continue
            origin = c.get("origin") or "live"
            total["origins"][origin] = total["origins"].get(origin, 0) + 1
            source = c.get("usage_source") or ("stand-in" if scripted else "provider")
            total["usage_sources"][source] = total["usage_sources"].get(source, 0) + 1
            if c.get("answered_by") and c["answered_by"] not in total["answered_by"]:
                total["answered_by"].append(c["answered_by"])
            for k in ("prompt_tokens", "completion_tokens", "reasoning_tokens"):
                total[k] += int(c.get(k) or 0)
            total["cost_usd"] += float(c.get("cost_usd") or 0.0)
        return total

    def best(self) -> tuple[Candidate, EvalResult] | None:
        """The accepted candidate with the highest fitness, or None. Fitness is the speedup over
        the run's baseline (config.evaluation.baseline: eager, or torch.compile), as in the
        search; ties go to the earlier candidate."""
        try:
            by_compile = self.config().evaluation.baseline == "compile"
        except ConfigError:        # a run whose config.json is not written yet: the default
            by_compile = False
        accepted = [r for r in self.results().values() if r.accepted]
        if not accepted:
            return None
        best = max(accepted, key=lambda r: r.compile_speedup if by_compile else r.speedup)
        return self.candidates()[best.candidate_id], best

    def export_best(self, path: str | Path | None = None) -> Path | None:
        """Write the best accepted kernel as a standalone KernelBench-format candidate file
        (default: best.py in the run directory): a comment header (run, problem, candidate,
        speedup, times in ms, idea), then the candidate's source unchanged, so the file loads
        and passes ``evokernel check PROBLEM FILE`` on its own. Returns its path, or None when
        nothing was accepted."""
        best = self.best()
        if best is None:
            return None
        cand, res = best
        out = Path(path) if path else self.run_dir / "best.py"
        problem = self.meta().get("problem", {}).get("name", "?")
        idea = cand.idea.splitlines()[0] if cand.idea.strip() else "-"
        floor = f", {res.pct_of_floor:.0f}% of floor" if res.pct_of_floor else ""
        header = [f"evokernel: best kernel of run {self.run_dir.name} for problem {problem}",
                  f"candidate {cand.id}, generation {cand.generation}, operator {cand.operator}; "
                  f"speedup {res.speedup:.3f}x over eager ({res.reference_ms:.4f} ms -> "
                  f"{res.candidate_ms:.4f} ms{floor})",
                  f"idea: {idea}",
                  f"check it: evokernel check {problem} {out}"]
        lines = "".join(f"# {h}\n" for h in header)
        source = cand.source if cand.source.endswith("\n") else cand.source + "\n"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(lines + source, encoding="utf-8")
        return out
