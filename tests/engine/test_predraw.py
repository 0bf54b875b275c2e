"""Input sets drawn ahead (evokernel.engine.predraw): a worker spawned before its problem's turn
draws the set-up's input sets on the CPU while it waits; the set-up gets the very same tensors
and torch's generators end as if it had drawn them itself."""
import threading

import pytest
import torch

from evokernel.config import EvalConfig, GateConfig, RunConfig
from evokernel.engine.predraw import (PredrawThread, Predrawn, draw_plan, host_budget, predraw,
                                      PREDRAW_MAX_BYTES)
from evokernel.gate.distributions import draw_inputs
from evokernel.gate.reference import GateReference
from evokernel.problem import exec_module
from tests.support.worker_script import start_script

SOURCE = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = nn.Parameter(torch.randn(n))

    def forward(self, x, y):
        return torch.softmax(x * self.w, dim=-1) + y[0]

def get_init_inputs():
    return [8]

def get_inputs():
    return [torch.randn(4, 8), [torch.rand(4, 8)]]
'''


def problem(name="tiny", source=SOURCE, distributions=None):
    return {"name": name, "path": f"{name}.py", "source": source,
            "distributions": list(distributions or ())}


def same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))


def test_the_plan_is_the_set_ups_order_gate_sets_first_problem_first():
    config = EvalConfig(gate=GateConfig(distributions=("offset", "problem"), seeds=(0, 1)))
    assert draw_plan(config, None) == [
        ("problem", 0), ("problem", 1), ("offset", 0), ("offset", 1),
        ("problem", 1000), ("problem", 1001), ("problem", 1002),
        ("problem", 2000), ("problem", 2001), ("problem", 2002)]
    # a problem that declares its distributions narrows the gate's
    assert draw_plan(config, ("offset",))[:2] == [("offset", 0), ("offset", 1)]


def test_a_set_drawn_ahead_is_the_one_drawn_at_the_set_up_and_leaves_the_generators_alike():
    p = problem()
    drawn = predraw(p, EvalConfig())
    assert len(drawn.sets) == 8 and drawn.nbytes == 8 * 2 * 4 * 8 * 4
    module = drawn.module
    for dist, seed in draw_plan(EvalConfig(), None):
        got = drawn.draw(module, dist, seed)
        after_ahead = (torch.get_rng_state(), torch.randn(5))
        fresh = draw_inputs(module, dist, seed)
        after_now = (torch.get_rng_state(), torch.randn(5))
        assert same(got, fresh), (dist, seed)
        assert torch.equal(after_ahead[0], after_now[0]) and torch.equal(after_ahead[1],
                                                                          after_now[1])
    assert drawn.used == 8 and not drawn.sets          # each handed out once, then forgotten
    again = drawn.draw(module, "problem", 1000)         # asked again: drawn now, the same values
    assert same(again, draw_inputs(module, "problem", 1000)) and drawn.used == 8


def test_another_module_or_problem_gets_nothing_drawn_ahead():
    p = problem()
    drawn = predraw(p, EvalConfig())
    other = exec_module(SOURCE, "evokernel_problem_other", "other.py")
    assert same(drawn.draw(other, "problem", 1000), draw_inputs(other, "problem", 1000))
    assert drawn.used == 0 and ("problem", 1000) in drawn.sets
    assert drawn.matches(p) and not drawn.matches(problem(name="tiny2"))
    assert not drawn.matches(problem(source=SOURCE + "\n# changed\n"))


def test_the_host_budget_and_a_tensor_off_the_cpu_stop_the_drawing():
    one_set = 2 * 4 * 8 * 4
    capped = predraw(problem(), EvalConfig(), max_bytes=3 * one_set)
    assert list(capped.sets) == [("problem", 0), ("offset", 0), ("problem", 1000)]
    meta = SOURCE.replace("return [torch.randn(4, 8), [torch.rand(4, 8)]]",
                          "return [torch.empty(4, 8, device='meta'), [torch.rand(4, 8)]]")
    assert predraw(problem(source=meta), EvalConfig()).sets == {}
    assert 0 < host_budget() <= PREDRAW_MAX_BYTES


def test_a_stop_ends_the_drawing_and_finish_returns_only_the_problems_own():
    stop = threading.Event()
    stop.set()
    assert predraw(problem(), EvalConfig(), stop).sets == {}
    t = PredrawThread(problem(), EvalConfig())
    t.start()
    drawn, waited = t.finish(problem())
    assert isinstance(drawn, Predrawn) and waited >= 0.0 and not t.is_alive()
    t2 = PredrawThread(problem(), EvalConfig())
    t2.start()
    assert t2.finish(problem(name="someone-else"))[0] is None
    broken = PredrawThread(problem(source="this is not python"), EvalConfig())
    broken.start()
    assert broken.finish(problem(source="this is not python"))[0] is None   # set-up reports it


def test_the_gate_reference_built_from_sets_drawn_ahead_equals_one_drawn_at_once():
    p = problem()
    drawn = predraw(p, EvalConfig())
    config = EvalConfig().gate
    ahead = GateReference.build(drawn.module, config, "cpu", draw=drawn.draw)
    now = GateReference.build(exec_module(SOURCE, "evokernel_problem_now", "now.py"), config,
                              "cpu")
    assert drawn.used == 2                          # the gate's two sets came from the draw ahead
    for a, b in zip(ahead.sets, now.sets):
        assert (a.distribution, a.seed) == (b.distribution, b.seed)
        assert same(list(a.inputs), list(b.inputs)) and same(list(a.truths), list(b.truths))
    assert same(ahead.timing_input_sets(3), now.timing_input_sets(3)) and drawn.used == 5


WORKER = """
import sys
from evokernel.engine import worker

class FakeSession:
    def __init__(self, problem, config, arch, predrawn=None):
        self.info = {"setup_steps_s": {},
                     "predrawn": None if predrawn is None else sorted(
                         f"{d} {s}" for d, s in predrawn.sets)}

worker.Session = FakeSession
finish = worker.PredrawThread.finish
# let the drawing end before the set-up takes it (the set-up message is already waiting in the
# pipe, so the real finish would stop it after its first set; that is tested in-process above)
worker.PredrawThread.finish = lambda self, problem: (self.join(), finish(self, problem))[1]
sys.exit(worker.main(["worker"] + sys.argv[1:]))
"""


@pytest.mark.parametrize("send_predraw", [True, False])
def test_the_worker_hands_its_set_up_what_it_drew_ahead(send_predraw):
    from evokernel.engine import protocol
    proc, send, recv = start_script(WORKER)
    try:
        setup = {"kind": "setup", "arch": "9.0", "problem": problem(),
                 "config": RunConfig().to_dict()}
        if send_predraw:
            protocol.send(send, {**setup, "kind": "predraw"})
        protocol.send(send, setup)
        assert recv.poll(120)
        msg = protocol.recv(recv)
    finally:
        protocol.send(send, {"kind": "stop"})
        proc.wait(timeout=30)
    assert msg["kind"] == "ready"
    steps = msg["info"]["setup_steps_s"]
    assert list(steps)[:2] == ["load_wait", "predraw_wait"]
    if send_predraw:       # the whole plan, drawn before the set-up took it
        assert len(msg["info"]["predrawn"]) == 8 and "offset 0" in msg["info"]["predrawn"]
    else:
        assert msg["info"]["predrawn"] is None and steps["predraw_wait"] == 0.0
