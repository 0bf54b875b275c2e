"""The process in which ``evokernel problems --run`` runs problem files (evokernel.problem_run).

    python -m evokernel.problem_probe     (started by evokernel.problem_run.run_setups)

It imports torch, makes torch's one-time set-ups (the meta device's), writes ``{"ready": true}``
and then reads one JSON request per line from stdin: ``{"i": N, "path": P}`` forks a process
that runs file P's set-up (``probe``), ``{"kill": N}`` kills that process. For each process it
writes one line ``{"i": N, "result": {...}}`` (SetupRun's fields), or ``{"i": N, "died": ...}``
when the process ended without an answer (killed, crashed). At the end of stdin it waits for its
processes and exits. A file's own prints go to /dev/null.

What ``probe`` does: the module is imported, then ``get_init_inputs()``, ``Model(*init)`` and
``get_inputs()`` run on the meta device (shapes and dtypes, no memory; ``torch.device`` as a
context manager), which gives the inputs' and the parameters' sizes; when they fit in
``CPU_BUDGET_BYTES`` they run again on the CPU with real tensors. A file whose set-up fails on
the meta device (a ``.item()``, say) runs on the CPU under an address-space limit of that
budget. ``forward`` is not run.

What fails is named: the import (a missing package by its module name), the function that
raised, with the file's line, or a result of the wrong kind (``get_inputs()`` must return a list
or tuple, ``Model`` must be an ``nn.Module``). A set-up that asks for a CUDA device itself is
reported as needing a GPU, not as broken.
"""
from __future__ import annotations

import json
import os
import re
import select
import signal
import sys
import traceback
from pathlib import Path
from typing import Any, Sequence

#: Inputs plus parameters up to this size (bytes) are made for real on the CPU.
CPU_BUDGET_BYTES = 512 * 2**20
_GPU_WORDS = re.compile(r"CUDA|NVIDIA driver|no GPU", re.IGNORECASE)
_MESSAGE_CHARS = 600


def serve() -> None:
    """The server loop (see the module's docstring)."""
    import torch
    with torch.device("meta"):           # the meta device's first use costs ~1 s: pay it once
        torch.nn.Linear(2, 2)(torch.randn(1, 2))
    children: dict[int, tuple[int, int, list[bytes]]] = {}   # read fd -> (i, pid, chunks)
    pids: dict[int, int] = {}
    pending, stdin_open = b"", True
    _write({"ready": True})
    while stdin_open or children:
        ready, _, _ = select.select(([0] if stdin_open else []) + list(children), [], [])
        for fd in ready:
            data = os.read(fd, 1 << 16)
            if fd == 0:
                stdin_open = bool(data)
                *lines, pending = (pending + data).split(b"\n")
                for line in lines:
                    _request(json.loads(line), children, pids)
            elif data:
                children[fd][2].append(data)
            else:
                i, pid, chunks = children.pop(fd)
                os.close(fd)
                _, status = os.waitpid(pid, 0)
                pids.pop(i, None)
                text = b"".join(chunks)
                _write({"i": i, "result": json.loads(text)} if text else
                       {"i": i, "died": _status_text(status)})


def _request(msg: dict[str, Any], children: dict[int, Any], pids: dict[int, int]) -> None:
    if "kill" in msg:
        pid = pids.get(msg["kill"])
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
        return
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                         # the file's process
        os.close(r)
        for fd in children:
            os.close(fd)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        try:
            got = probe(Path(msg["path"]))
        except BaseException as e:  # noqa: BLE001 -- report whatever the file did
            got = _failure(Path(msg["path"]), "run", e)
        data = json.dumps(got).encode()
        while data:
            data = data[os.write(w, data):]
        os._exit(0)
    os.close(w)
    children[r] = (msg["i"], pid, [])
    pids[msg["i"]] = pid


def _write(msg: dict[str, Any]) -> None:
    data = json.dumps(msg).encode() + b"\n"
    while data:
        data = data[os.write(1, data):]


def _status_text(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit status {os.WEXITSTATUS(status)}"


def probe(path: Path) -> dict[str, Any]:
    """Run ``path``'s set-up in this process (see the module's docstring). Returns the fields
    of a SetupRun other than path and elapsed_s. Runs the file's code: call it only in a
    process of its own (``run_setups``)."""
    import torch

    from evokernel.problem import exec_module
    try:
        module = exec_module(path.read_text(encoding="utf-8"), "evokernel_problem_setup",
                             str(path))
    except ModuleNotFoundError as e:
        return {"status": "failed", "stage": "import",
                "message": f"{_where(path, e)}imports {e.name!r}, which is not installed here"
                           + (f" (pip install {e.name})" if e.name and "." not in e.name
                              else "")}
    except BaseException as e:  # noqa: BLE001
        return _failure(path, "import", e)
    torch.manual_seed(0)
    try:
        got = _set_up(module, path, "meta")
    except _StageError as meta_error:
        _limit_memory(CPU_BUDGET_BYTES)
        try:
            return _set_up(module, path, "cpu")
        except _StageError as cpu_error:
            out_of_memory = "memory" in cpu_error.fields["message"].lower()
            return meta_error.fields if out_of_memory else cpu_error.fields
    if (got["input_bytes"] or 0) + (got["parameter_bytes"] or 0) <= CPU_BUDGET_BYTES:
        try:
            return _set_up(module, path, "cpu")
        except _StageError as e:
            return e.fields
    return got


class _StageError(Exception):
    def __init__(self, fields: dict[str, Any]):
        super().__init__(fields["message"])
        self.fields = fields


def _set_up(module: Any, path: Path, device: str) -> dict[str, Any]:
    """get_init_inputs, Model and get_inputs on ``device``; raises _StageError naming the
    stage that failed."""
    import torch
    stage = "get_init_inputs"
    try:
        with torch.device(device), torch.no_grad():
            init = module.get_init_inputs()
            _expect_sequence(stage, init)
            stage = "Model"
            model = module.Model(*init)
            if not isinstance(model, torch.nn.Module):
                raise TypeError(f"Model(*get_init_inputs()) made a {type(model).__name__}, "
                                "not a torch.nn.Module")
            stage = "get_inputs"
            inputs = module.get_inputs()
            _expect_sequence(stage, inputs)
    except BaseException as e:  # noqa: BLE001
        raise _StageError(dict(_failure(path, stage, e), device=device)) from None
    tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
    params = list(model.parameters()) + list(model.buffers())
    return {"status": "ok", "stage": "", "device": device,
            "message": _describe(inputs),
            "input_bytes": sum(t.numel() * t.element_size() for t in tensors),
            "parameter_bytes": sum(t.numel() * t.element_size() for t in params)}


def _expect_sequence(stage: str, value: Any) -> None:
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{stage}() returned a {type(value).__name__}, not a list or tuple")


def _describe(inputs: Sequence[Any]) -> str:
    import torch
    parts = [("x".join(map(str, x.shape)) or "scalar") + f" {str(x.dtype).replace('torch.', '')}"
             if isinstance(x, torch.Tensor) else type(x).__name__ for x in inputs]
    shown = ", ".join(parts[:4]) + (f", ... ({len(parts) - 4} more)" if len(parts) > 4 else "")
    return f"{len(parts)} input{'s' if len(parts) != 1 else ''}: {shown or 'none'}"


def _failure(path: Path, stage: str, e: BaseException) -> dict[str, Any]:
    text = f"{type(e).__name__}: {e}".strip().replace("\n", " ")[:_MESSAGE_CHARS]
    status = "needs_gpu" if (isinstance(e, (RuntimeError, AssertionError))
                             and _GPU_WORDS.search(str(e))) else "failed"
    where = f"{stage}()" if stage.startswith("get_") else stage
    return {"status": status, "stage": stage,
            "message": f"{_where(path, e)}{where} raised {text}"}


def _where(path: Path, e: BaseException) -> str:
    """"LINE: " of the innermost frame of ``e``'s traceback in ``path``, or ""."""
    lines = [f.lineno for f in traceback.extract_tb(e.__traceback__)
             if Path(f.filename).resolve() == path.resolve()]
    return f"line {lines[-1]}: " if lines else ""


def _limit_memory(budget: int) -> None:
    """Cap this process's address space at its current size plus ``budget`` bytes (Linux; a
    no-op elsewhere), so a CPU set-up of unknown size fails instead of exhausting memory."""
    try:
        import resource
        with open("/proc/self/status") as f:
            vm_kb = next(int(line.split()[1]) for line in f if line.startswith("VmSize:"))
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        soft = vm_kb * 1024 + budget
        resource.setrlimit(resource.RLIMIT_AS, (soft if hard < 0 else min(soft, hard), hard))
    except (ImportError, OSError, StopIteration, ValueError):
        pass


if __name__ == "__main__":
    serve()
    sys.exit(0)
