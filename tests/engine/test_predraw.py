"""A set-up's CPU work done ahead (evokernel.engine.predraw): a worker spawned before its
problem's turn runs the module, makes the model and draws the input sets while it waits; the
set-up then gets exactly what it would have made itself, for well-behaved problems and for the
awkward ones a review found (2026-12-04): a get_inputs refilling one buffer, module state
shared by get_init_inputs, Model and get_inputs, precision set at import."""
import pytest
import torch

from evokernel.config import EvalConfig, GateConfig, RunConfig
from evokernel.engine.predraw import PREDRAW_MAX_BYTES, Predrawn, draw_plan, host_budget, predraw
from evokernel.gate import maths as gm
from evokernel.gate.distributions import draw_inputs
from evokernel.gate.judge import strict_fp32
from evokernel.gate.reference import GateReference, make_model
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

# get_inputs refills one module-level buffer: each set must be a copy taken as it is drawn
BUFFER = SOURCE.replace('''def get_inputs():
    return [torch.randn(4, 8), [torch.rand(4, 8)]]''', '''_buf = torch.empty(4, 8)

def get_inputs():
    _buf.normal_()
    return [_buf, [torch.rand(4, 8)]]''')

# one numpy stream shared by get_init_inputs, Model and get_inputs, seeded at import: the order
# and the number of calls decide every value
STATEFUL = '''
import numpy as np
import torch
import torch.nn as nn

_rs = np.random.RandomState(7)

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(_rs.rand(n), dtype=torch.float32))

    def forward(self, x):
        return x * self.w

def get_init_inputs():
    return [int(_rs.randint(8, 9))]

def get_inputs():
    return [torch.tensor(_rs.rand(4, 8), dtype=torch.float32) + torch.randn(4, 8)]
'''

# precision lowered at import, a CPU matmul in get_inputs: gate sets are drawn in strict FP32
PRECISION = SOURCE.replace('''def get_inputs():
    return [torch.randn(4, 8), [torch.rand(4, 8)]]''', '''
torch.set_float32_matmul_precision("medium")

def get_inputs():
    a = (torch.randn(256, 256) @ torch.randn(256, 256))[:4, :8]   # bf16 on CPUs that have it
    return [a, [torch.rand(4, 8)]]''')


# the model registers the buffer get_inputs refills: the reference keeps the values it was made
# with (the set-up copies them to the GPU before the first draw)
SHARED_WITH_MODEL = '''
import torch
import torch.nn as nn

_buf = torch.zeros(8)

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.register_buffer("b", _buf)

    def forward(self, x, y):
        return x + self.b + y[0]

def get_init_inputs():
    return [8]

def get_inputs():
    _buf.normal_()
    return [torch.randn(4, 8), [torch.rand(4, 8)]]
'''

# Model.__init__ lowers the precision: inside the set-up's one strict block the gate's draws see it
PRECISION_IN_MODEL = PRECISION.replace('torch.set_float32_matmul_precision("medium")', "").replace(
    "        super().__init__()", '''        super().__init__()
        torch.set_float32_matmul_precision("medium")''')


def problem(name="tiny", source=SOURCE, distributions=None):
    return {"name": name, "path": f"{name}.py", "source": source,
            "distributions": list(distributions or ())}


def same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def copied(module, distribution, seed):
    """draw_inputs with the copy a set-up makes at once (its move to the GPU)."""
    return gm.map_tensors(draw_inputs(module, distribution, seed), lambda t: t.clone())


def made(module):
    """make_model with the copy a set-up makes at once (the model's move to the GPU)."""
    init_inputs, model = make_model(module)
    return init_inputs, model._apply(lambda t: t.clone())


def set_up_on_cpu(module, make, draw, config=EvalConfig()):
    """A Session's CPU sequence (evokernel.engine.session): the gate reference in strict FP32,
    then the timing and fresh sets; what it made, and torch's generator after it."""
    with strict_fp32():
        ref = GateReference.build(module, config.gate, "cpu", draw=draw, make=make)
    timing = ref.timing_input_sets(3, 1000)
    fresh = ref.timing_input_sets(3, 2000)
    return ref, timing, fresh, torch.get_rng_state()


def assert_same_set_up(source, config=EvalConfig(), **kw):
    """The set-up with what was made ahead equals the one that makes it all itself."""
    drawn = predraw(problem(source=source), config, **kw)
    assert drawn is not None
    ahead = set_up_on_cpu(drawn.module, drawn.make, drawn.draw, config)
    plain = set_up_on_cpu(exec_module(source, "evokernel_problem_plain", "plain.py"),
                          made, copied, config)
    assert same(ahead[0].init_inputs, plain[0].init_inputs)
    assert same(list(ahead[0].model.state_dict().values()),
                list(plain[0].model.state_dict().values()))
    for a, b in zip(ahead[0].sets, plain[0].sets, strict=True):
        assert (a.distribution, a.seed) == (b.distribution, b.seed)
        assert same(list(a.inputs), list(b.inputs)) and same(list(a.truths), list(b.truths))
    assert same(ahead[1], plain[1]) and same(ahead[2], plain[2])
    assert torch.equal(ahead[3], plain[3])
    return drawn


def test_the_plan_is_the_set_ups_order_gate_sets_first_problem_first():
    config = EvalConfig(gate=GateConfig(distributions=("offset", "problem"), seeds=(0, 1)))
    assert [(d, s) for d, s, _ in draw_plan(config, None)] == [
        ("problem", 0), ("problem", 1), ("offset", 0), ("offset", 1),
        ("problem", 1000), ("problem", 1001), ("problem", 1002),
        ("problem", 2000), ("problem", 2001), ("problem", 2002)]
    assert [g for _, _, g in draw_plan(config, None)] == [True] * 4 + [False] * 6
    assert [(d, s) for d, s, _ in draw_plan(config, ("offset",))][:2] == [("offset", 0),
                                                                          ("offset", 1)]


def test_the_set_up_gets_what_it_would_have_made_and_the_generators_end_alike():
    drawn = assert_same_set_up(SOURCE)
    assert drawn.used == 8 and not any(drawn.sets.values()) and drawn.model is None


def test_a_buffer_refilled_by_get_inputs_gives_distinct_sets_as_at_the_set_up():
    drawn = assert_same_set_up(BUFFER)
    assert drawn.used == 8


def test_module_state_shared_by_its_functions_sees_the_same_calls_in_the_same_order():
    assert_same_set_up(STATEFUL)
    one_set = 4 * 8 * 4           # drawn ahead only in part: the set-up draws the rest, in order
    drawn = assert_same_set_up(STATEFUL, max_bytes=8 * 4 + 3 * one_set)   # model: 8 floats
    assert drawn.used == 3


def test_the_gate_sets_are_drawn_in_strict_fp32_whatever_the_module_set_at_import():
    try:
        assert_same_set_up(PRECISION)
    finally:
        torch.set_float32_matmul_precision("highest")


def test_a_model_buffer_refilled_by_get_inputs_keeps_the_values_the_model_was_made_with():
    drawn = assert_same_set_up(SHARED_WITH_MODEL)
    assert drawn.used == 8


def test_precision_lowered_by_the_model_reaches_the_gate_draws_as_at_the_set_up():
    try:
        assert_same_set_up(PRECISION_IN_MODEL)
    finally:
        torch.set_float32_matmul_precision("highest")


def test_problem_code_that_reaches_for_cuda_ahead_is_stopped():
    no_word = SOURCE.replace("torch.randn(4, 8), [", "torch.randn(4, 8, device=0), [")
    with pytest.raises(RuntimeError, match="not used before the set-up"):
        predraw(problem(source=no_word), EvalConfig())
    assert not torch.cuda.is_initialized()


def test_drawing_stops_before_a_set_when_a_message_waits_or_the_budget_would_pass():
    calls = iter([False, False, True])
    drawn = predraw(problem(), EvalConfig(), waiting=lambda: next(calls))
    assert sum(len(q) for q in drawn.sets.values()) == 2 and drawn.model is not None
    one_set = 2 * 4 * 8 * 4
    capped = predraw(problem(), EvalConfig(), max_bytes=8 * 4 + 3 * one_set)
    assert [k for k, q in capped.sets.items() if q] == [("problem", 0), ("offset", 0),
                                                        ("problem", 1000)]
    assert 0 < host_budget() <= PREDRAW_MAX_BYTES


def test_a_source_that_mentions_cuda_is_not_run_ahead():
    assert predraw(problem(source=SOURCE + "\n# x.cuda()\n"), EvalConfig()) is None


def test_another_module_or_problem_gets_nothing_made_ahead():
    p = problem()
    drawn = predraw(p, EvalConfig())
    other = exec_module(SOURCE, "evokernel_problem_other", "other.py")
    assert same(drawn.draw(other, "problem", 1000), draw_inputs(other, "problem", 1000))
    assert drawn.make(other)[1] is not drawn.model[1] and drawn.used == 0
    assert drawn.matches(p) and not drawn.matches(problem(name="tiny2"))
    assert not drawn.matches(problem(source=SOURCE + "\n# changed\n"))
    assert isinstance(drawn, Predrawn)


WORKER = """
import sys
from evokernel.engine import worker

class FakeSession:
    def __init__(self, problem, config, arch, predrawn=None):
        self.info = {"setup_steps_s": {},
                     "predrawn": None if predrawn is None else [
                         predrawn.name, predrawn.model is not None,
                         sum(len(q) for q in predrawn.sets.values())]}

draw_ahead = worker.draw_ahead

def told(msg, conn_in):          # says when it is done, so the test can send the set-up after
    drawn = draw_ahead(msg, conn_in)
    print("drawn", flush=True)
    return drawn

worker.preload = lambda: None
worker.Session = FakeSession
worker.draw_ahead = told
sys.exit(worker.main(["worker"] + sys.argv[1:]))
"""


def ask(setup, mode):
    """The worker's "ready" answer: "queued" sends the set-up right behind "predraw" (it waits
    on the pipe while the worker draws), "after" once it has drawn, "none" without "predraw"."""
    import subprocess

    from evokernel.engine import protocol
    proc, send, recv = start_script(WORKER, stdout=subprocess.PIPE, text=True)
    try:
        if mode != "none":
            protocol.send(send, {**setup, "kind": "predraw"})
        if mode == "after":
            assert proc.stdout.readline().strip() == "drawn"
        protocol.send(send, setup)
        assert recv.poll(120)
        return protocol.recv(recv)
    finally:
        protocol.send(send, {"kind": "stop"})
        proc.wait(timeout=30)
        send.close()
        recv.close()


def test_the_worker_hands_its_set_up_what_it_made_ahead_and_stops_for_a_message():
    setup = {"kind": "setup", "arch": "9.0", "problem": problem(), "config": RunConfig().to_dict()}
    queued, after, cold = (ask(setup, m) for m in ("queued", "after", "none"))
    assert queued["kind"] == after["kind"] == cold["kind"] == "ready"
    # the set-up waiting on the pipe: the module and model made, then no set drawn
    assert queued["info"]["predrawn"] == ["tiny", True, 0]
    assert after["info"]["predrawn"] == ["tiny", True, 8]
    assert cold["info"]["predrawn"] is None
    assert list(after["info"]["setup_steps_s"]) == ["load_wait"]
