"""kill -9 in the middle of a generation, then resume: a real subprocess killed with SIGKILL.

Each killed search runs in its own subprocess (tests/support/killable_search.py) against its own fake
OpenAI server (evokernel/demo/fake_server.py, scripted replies, a little latency), and is killed at a
chosen point: while LLM calls are in flight, and while candidates are being evaluated, with one
population and with islands. One more subprocess resumes every killed run with
``Evolution(...).run(resume=True)``. Then, for each run:
- no candidate with a stored verdict is evaluated again (the fake evaluator logs every id);
- the run ends exactly like an uninterrupted run with the same seed: same candidates, same
  populations and RNG state in every generation;
- cached LLM replies are replayed: the resumed run sends exactly the requests whose replies were
  not yet in the replay cache when the run was killed, and none of the others.
"""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evokernel.runs.store import RunStore
from evokernel.demo.fake_server import FakeOpenAI
from tests.support.killable_search import search

from evokernel.demo.scripted_llm import scripted_reply

ROOT = Path(__file__).resolve().parents[2]
LATENCY_S = 0.03


def server() -> FakeOpenAI:
    return FakeOpenAI(reply=lambda req: scripted_reply(req["messages"]), latency_s=LATENCY_S)


def lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def cache_entries(run_dir: Path) -> int:
    with sqlite3.connect(run_dir / "llm_cache.sqlite") as conn:
        return conn.execute("SELECT COUNT(*) FROM replies").fetchone()[0]


def snapshot(run_dir: Path) -> tuple[dict, list]:
    store = RunStore(run_dir)
    try:
        return store.candidates(), [(g["population"], g["rng_state"])
                                    for g in store.generations()]
    finally:
        store.close()


@pytest.fixture
def env(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake")
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    return dict(os.environ)


def subprocess_for(jobs: list[dict], env: dict, out: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tests.support.killable_search", json.dumps(jobs)], env=env,
                            stdout=out.open("w"), stderr=subprocess.STDOUT)


def test_kill_9_mid_generation_then_resume(tmp_path, env):
    # Uninterrupted references (in this process), one population and three islands.
    reference = {}
    for islands in (1, 2):
        with server() as srv:
            job = {"run_dir": str(tmp_path / f"full{islands}"), "api_base": srv.api_base,
                   "log": str(tmp_path / f"full{islands}.log"), "islands": islands}
            search(job)
            requests = srv.count
        cands, gens = snapshot(Path(job["run_dir"]))
        log = lines(Path(job["log"]))
        assert len(log) == len(set(log)) == len(cands)
        assert cache_entries(Path(job["run_dir"])) == requests
        reference[islands] = {"log": log, "cands": cands, "gens": gens, "requests": requests}

    def nth_of_generation(islands: int, gen: int, n: int) -> int:
        """How many evaluations precede the n-th candidate of generation ``gen``, plus one."""
        ref = reference[islands]
        gens_in_order = [ref["cands"][i].generation for i in ref["log"]]
        return [i for i, g in enumerate(gens_in_order) if g == gen][n] + 1

    # Kill points (name, islands, generation being made, trigger): generation 1's implementation
    # calls in flight (its ideas calls are all answered before any implementation is sent);
    # evaluation in the middle of generation 2 (after its second of three candidates); with
    # islands, evaluation in the middle of generation 3, after two migrations.
    scenarios = [("llm-gen1", 1, 1, lambda s, log: s.count >= 6),
                 ("eval-gen2", 1, 2, lambda s, log, k=nth_of_generation(1, 2, 1):
                  len(lines(log)) >= k),
                 ("islands-eval-gen3", 2, 3, lambda s, log, k=nth_of_generation(2, 3, 3):
                  len(lines(log)) >= k)]
    runs = []
    for name, islands, gen, trigger in scenarios:
        srv = server().start()
        job = {"run_dir": str(tmp_path / name), "api_base": srv.api_base,
               "log": str(tmp_path / f"{name}.killed.log"), "islands": islands}
        proc = subprocess_for([job], env, tmp_path / f"{name}.killed.out")
        runs.append({"name": name, "islands": islands, "gen": gen, "trigger": trigger,
                     "server": srv, "job": job, "proc": proc})
    try:
        # Generous: each subprocess first imports litellm (about 20 s on a loaded 2-core host).
        deadline = time.monotonic() + 150
        pending = list(runs)
        while pending and time.monotonic() < deadline:
            for run in list(pending):
                if run["trigger"](run["server"], Path(run["job"]["log"])):
                    run["proc"].send_signal(signal.SIGKILL)
                    run["proc"].wait()
                    pending.remove(run)
                elif run["proc"].poll() is not None:
                    pending.remove(run)          # finished before its kill point: fails below
            time.sleep(0.003)
        for run in runs:
            out = (tmp_path / f"{run['name']}.killed.out").read_text()
            assert run["proc"].poll() == -signal.SIGKILL, f"{run['name']} not killed:\n{out}"
            run_dir = Path(run["job"]["run_dir"])
            store = RunStore(run_dir)
            run["stored"] = set(store.results())    # verdicts that survived the kill
            done = [g["generation"] for g in store.generations()]
            made = {c.generation for c in store.candidates().values()}
            store.close()
            run["cached"] = cache_entries(run_dir)
            run["sent"] = run["server"].count
            # killed in the middle of the generation it was meant to be killed in
            assert done[-1] == run["gen"] - 1, (run["name"], done)
            assert 0 < run["cached"] <= reference[run["islands"]]["requests"], run["name"]
            if run["name"].startswith("llm"):
                assert run["cached"] < run["sent"], "no LLM call in flight at the kill"
            else:
                assert run["gen"] in made and len(run["stored"]) < len(reference[run["islands"]]["log"])

        # Resume every killed run, one after another, in one fresh subprocess.
        jobs = [dict(run["job"], log=str(tmp_path / f"{run['name']}.resumed.log"), resume=True)
                for run in runs]
        proc = subprocess_for(jobs, env, tmp_path / "resumed.out")
        assert proc.wait(timeout=180) == 0, (tmp_path / "resumed.out").read_text()

        for run in runs:
            ref = reference[run["islands"]]
            killed = lines(Path(run["job"]["log"]))
            resumed = lines(tmp_path / f"{run['name']}.resumed.log")
            assert len(killed) == len(set(killed)) and len(resumed) == len(set(resumed))
            # Nothing with a stored verdict is evaluated again; only the one candidate whose
            # verdict was being stored at the kill may be.
            assert not set(resumed) & run["stored"], run["name"]
            assert len(set(resumed) & set(killed)) <= 1
            assert set(killed) | set(resumed) == set(ref["log"])
            cands, gens = snapshot(Path(run["job"]["run_dir"]))
            assert cands == ref["cands"], run["name"]
            assert gens == ref["gens"], run["name"]
            # Replay: zero requests for prompts already answered; each other one sent once.
            new_requests = run["server"].count - run["sent"]
            assert new_requests == ref["requests"] - run["cached"], run["name"]
            assert cache_entries(Path(run["job"]["run_dir"])) == ref["requests"]
    finally:
        for run in runs:
            if run["proc"].poll() is None:
                run["proc"].kill()
            run["server"].stop()
