"""The worker's anti-cheat hooks: timer monkey-patching and threads/processes started by
candidate code are caught; PyTorch's own helper threads are not blamed on the candidate."""
import sys
import threading

import pytest

from evokernel.records import Reason
from evokernel.engine.tamper import Tamper as _Tamper  # noqa: N814
from evokernel.engine.faults import classify_exception


def run_as_candidate(code: str) -> None:
    exec(compile(code, "<candidate evokernel_cand_test>", "exec"), {})


def test_threads_started_by_candidate_code_only():
    t = _Tamper()
    th = threading.Thread(target=lambda: None)   # the framework's (e.g. torch.compile's)
    th.start()
    th.join()
    assert t.check() is None
    run_as_candidate("import threading\nth = threading.Thread(target=lambda: None)\n"
                     "th.start()\nth.join()\n")
    assert t.check() == (Reason.THREADS, "the candidate started a thread")
    run_as_candidate("import subprocess\nsubprocess.run(['true'])\n")
    assert t.check() == (Reason.THREADS, "the candidate started a subprocess")
    assert t.check() is None


def test_timer_monkey_patching_is_caught_and_undone():
    import time
    real = time.perf_counter
    t = _Tamper()
    run_as_candidate("import time\ntime.perf_counter = lambda: 0.0\n")
    reason, detail = t.check()
    assert reason is Reason.TIMER_TAMPERING and "time.perf_counter" in detail
    assert time.perf_counter is real


def test_patching_the_spins_launch_path_is_caught_and_undone():
    import pytest
    import torch
    kernel = getattr(getattr(torch.cuda, "_utils", None), "_CudaKernel", None)
    if kernel is None:
        pytest.skip("this torch has no NVRTC kernel wrapper")
    real_call, real_wait = kernel.__call__, torch.cuda.Stream.wait_event
    assert "torch.cuda.Stream.wait_event" not in _Tamper()._objs     # only with the spin on
    t = _Tamper(watch_spin=True)
    run_as_candidate("import torch\n"
                     "torch.cuda._utils._CudaKernel.__call__ = lambda self, **kw: None\n"
                     "torch.cuda.Stream.wait_event = lambda self, event: None\n")
    reason, detail = t.check()
    assert reason is Reason.TIMER_TAMPERING
    assert "_CudaKernel.__call__" in detail and "Stream.wait_event" in detail
    assert kernel.__call__ is real_call and torch.cuda.Stream.wait_event is real_wait


SPIN_ATTACKS = {  # each would let side-stream work pass the check (a review's findings)
    "a spin's calibrated gap": ("for s in DeviceSpin._made.values():\n    s.done_gap_ms = 5.0\n",
                                "done_gap_ms"),
    "a copied spin in the cache": (
        "import copy\nfor k, s in list(DeviceSpin._made.items()):\n"
        "    f = copy.copy(s); f.done_gap_ms = 5.0; DeviceSpin._made[k] = f\n", "_made"),
    "the cache emptied": ("DeviceSpin._made.clear()\n", "_made"),
    "DeviceSpin.get": ("DeviceSpin.get = classmethod(lambda cls, d, ms: None)\n",
                       "DeviceSpin.get"),
    "a class property over the gap": ("DeviceSpin.done_gap_ms = property(lambda self: 5.0)\n",
                                      "DeviceSpin (names)"),
    "the side-stream rule's defaults": (
        "t.side_stream_suspect.__kwdefaults__ = {'factor': 1e9, 'slack_ms': 1e9}\n",
        "side_stream_suspect.__kwdefaults__"),
    "the defaults changed in place": ("t.side_stream_suspect.__kwdefaults__['factor'] = 1e9\n",
                                      "side_stream_suspect.__kwdefaults__"),
    "the timing loop's synchronize": ("c._cuda_synchronize = lambda d=None: None\n",
                                      "evokernel.timing.clocks._cuda_synchronize"),
    "a builtin shadowed": ("import evokernel.timing.spin as ds\nds.abs = lambda x: 0.0\n",
                           "evokernel.timing.spin (names)"),
    "a method's code": ("DeviceSpin.whole_device_ms.__code__ = (lambda self, a, b: 0.0).__code__\n",
                        "whole_device_ms.__code__"),
}


@pytest.mark.parametrize("attack", sorted(SPIN_ATTACKS))
def test_changes_to_the_spin_and_the_timing_code_are_caught_and_undone(monkeypatch, attack):
    import torch

    import evokernel.timing.clocks as clocks
    import evokernel.timing.interleaved as timing
    from evokernel.timing.spin import DeviceSpin
    spin = DeviceSpin.__new__(DeviceSpin)           # no GPU: only what the snapshot reads
    spin.blocks, spin.threads, spin.spin_us = 264, 1024, 1000
    spin.baseline_ms, spin.done_gap_ms = 0.003, 0.06
    monkeypatch.setitem(DeviceSpin._made, (torch.device("cuda", 0), 1000), spin)
    before = (DeviceSpin.get, clocks._cuda_synchronize,
              dict(timing.side_stream_suspect.__kwdefaults__))
    t = _Tamper(watch_spin=True)
    assert t.check() is None
    code, named = SPIN_ATTACKS[attack]
    run_as_candidate("import evokernel.timing.interleaved as t\nimport evokernel.timing.clocks as c\n"
                     "from evokernel.timing.spin import DeviceSpin\n" + code)
    reason, detail = t.check()
    assert reason is Reason.TIMER_TAMPERING and named in detail, detail
    assert t.check() is None                          # put back, so the next one is clean
    assert DeviceSpin._made[(torch.device("cuda", 0), 1000)] is spin
    assert spin.whole_device_ms(1.0, 0.003) == pytest.approx(0.94)
    assert (DeviceSpin.get, clocks._cuda_synchronize,
            dict(timing.side_stream_suspect.__kwdefaults__)) == before
    assert "abs" not in vars(sys.modules["evokernel.timing.spin"])


def test_exception_classes():
    import torch
    assert classify_exception(RuntimeError("CUDA error: an illegal memory access was "
                                           "encountered")) == (Reason.CUDA_FAULT, True)
    assert classify_exception(torch.cuda.OutOfMemoryError("CUDA out of memory")) == \
        (Reason.OUT_OF_MEMORY, False)
    assert classify_exception(ValueError("bad shape")) == (Reason.RUNTIME_ERROR, False)


def test_the_worker_must_make_its_spin_before_the_snapshot(monkeypatch):
    """DeviceSpin.get for the set-up's key is a cache hit and changes nothing; a spin made
    later (another hide_host_ms) is a change. The worker makes its spin at set-up, before
    Tamper, and times everything with the same setting."""
    import torch

    from evokernel.timing.spin import DeviceSpin
    spin = DeviceSpin.__new__(DeviceSpin)
    spin.baseline_ms, spin.done_gap_ms = 0.003, 0.06
    monkeypatch.setitem(DeviceSpin._made, (torch.device("cuda", 0), 1000), spin)
    t = _Tamper(watch_spin=True)
    assert DeviceSpin.get(torch.device("cuda", 0), 1.0) is spin
    assert t.check() is None
    monkeypatch.setitem(DeviceSpin._made, (torch.device("cuda", 0), 500), spin)
    reason, detail = t.check()
    assert reason is Reason.TIMER_TAMPERING and "_made" in detail


MORE_ATTACKS = {  # a second review's findings
    "an always-equal default": (
        "class E(float):\n    def __eq__(self, other):\n        return True\n"
        "    __hash__ = float.__hash__\n"
        "t.side_stream_suspect.__kwdefaults__['factor'] = E(1e9)\n",
        "side_stream_suspect.__kwdefaults__"),
    "a property's getter": (
        "t.TimingStats.host_median_ms.fget.__code__ = (lambda self: 0.0).__code__\n",
        "host_median_ms.fget.__code__"),
    "the function a decorator wraps": (
        "import evokernel.gate.judge as g\n"
        "g.strict_fp32.__wrapped__.__code__ = (lambda: (yield)).__code__\n",
        "evokernel.gate.judge.strict_fp32."),    # reached through its closure and __wrapped__
    "a default no comparison survives": (
        "import torch\nt.side_stream_suspect.__kwdefaults__['factor'] = torch.ones(2)\n",
        "side_stream_suspect.__kwdefaults__"),
}


@pytest.mark.parametrize("attack", sorted(MORE_ATTACKS))
def test_subtler_changes_are_caught_and_undone(attack):
    import evokernel.gate.judge as gate
    import evokernel.timing.interleaved as timing
    before = (dict(timing.side_stream_suspect.__kwdefaults__),
              timing.TimingStats.host_median_ms.fget.__code__,
              gate.strict_fp32.__wrapped__.__code__)
    t = _Tamper()
    code, named = MORE_ATTACKS[attack]
    run_as_candidate("import evokernel.timing.interleaved as t\n" + code)
    reason, detail = t.check()
    assert reason is Reason.TIMER_TAMPERING and named in detail, detail
    assert t.check() is None
    assert timing.TimingStats.host_median_ms.fget.__code__ is before[1]
    assert gate.strict_fp32.__wrapped__.__code__ is before[2]
    assert all(timing.side_stream_suspect.__kwdefaults__[k] is v for k, v in before[0].items())


def test_the_worker_run_as_main_is_watched(monkeypatch):
    """The GPU worker runs as ``python -m evokernel.engine.worker``: its module is ``__main__``."""
    import sys
    import types
    main = types.ModuleType("__main__")
    main.__spec__ = types.SimpleNamespace(name="evokernel.engine.worker")
    main._stale = lambda *a, **k: "stale"
    monkeypatch.setitem(sys.modules, "__main__", main)
    t = _Tamper()
    run_as_candidate("import sys\nsys.modules['__main__']._stale = lambda *a, **k: ''\n")
    reason, detail = t.check()
    assert reason is Reason.TIMER_TAMPERING and "__main__._stale" in detail
    assert main._stale() == "stale"


def test_renaming_the_build_steps_file_does_not_hide_a_thread():
    t = _Tamper()
    import evokernel.build.cache as extension_cache
    real = extension_cache.__file__
    try:
        run_as_candidate("import evokernel.build.cache as e, threading\n"
                         "e.__file__ = '<candidate x>'\n"
                         "th = threading.Thread(target=lambda: None)\nth.start()\nth.join()\n")
        assert t.check() == (Reason.THREADS, "the candidate started a thread")
    finally:
        extension_cache.__file__ = real


def test_an_nvrtc_compile_the_candidates_module_runs_is_not_blamed():
    # The build step defers a compile whose kernel names it cannot read without running the
    # module (here: a list comprehension), and the GPU worker then compiles it at import. On the
    # H200 (2026-12-03) that compile's c++filt call had all 6 such candidates of the ablation
    # rejected as `threads`: LLM-written kernels that started nothing themselves.
    from evokernel.nvrtc import configure
    previous = configure(arch="9.0")
    t = _Tamper()
    try:
        run_as_candidate(
            'from evokernel.nvrtc import compile_kernels\n'
            'SRC = r"""\n'
            'template <int V> __global__ void scale_v(float* y, float a) { y[V] *= a; }\n'
            'template __global__ void scale_v<1>(float*, float);\n'
            'template __global__ void scale_v<2>(float*, float);\n'
            '// tamper test: a compile of its own, not one from the cache\n"""\n'
            'kernels = compile_kernels(SRC, ["scale_v<%d>" % v for v in (1, 2)])\n')
        assert t.check() is None
        # and the candidate's own subprocess is still its own
        run_as_candidate("import subprocess\nsubprocess.run(['true'])\n")
        assert t.check() == (Reason.THREADS, "the candidate started a subprocess")
    finally:
        configure(cache_dir=previous.cache_dir, arch=previous.arch)


FRAMELESS_STARTS = {  # a session-16 review's attacks: a callable without a Python frame of the
    # candidate (a bound builtin, a functools.partial), started from inside evokernel's code
    "compile_kernels options, a thread": (
        "import threading\nfrom evokernel.nvrtc import compile_kernels\n"
        "th = threading.Thread(target=lambda: None)\n"
        "class O:\n    __str__ = staticmethod(th.start)\n"
        "try:\n    compile_kernels('__global__ void k() {}', ['k'], options=[O()])\n"
        "except Exception:\n    pass\nth.join()\n", "a thread"),
    "compile_kernels options, a subprocess": (
        "import functools, subprocess\nfrom evokernel.nvrtc import compile_kernels\n"
        "class O:\n    __str__ = staticmethod(functools.partial(subprocess.Popen, ['true']))\n"
        "try:\n    compile_kernels('__global__ void k() {}', ['k'], options=[O()])\n"
        "except Exception:\n    pass\n", "a subprocess"),
    "the build step's arch flags, a thread": (
        "import threading\nfrom evokernel.build import cache\n"
        "th = threading.Thread(target=lambda: None)\n"
        "class O:\n    __str__ = staticmethod(th.start)\n"
        "try:\n    cache.rewrite_arch_flags([O()], '9.0')\n"
        "except Exception:\n    pass\nth.join()\n", "a thread"),
    "os.system": ("import os\nos.system('true')\n", "a subprocess"),
    "os.posix_spawn": ("import os\npid = os.posix_spawn('/bin/true', ['true'], {})\n"
                       "os.waitpid(pid, 0)\n", "a subprocess"),
}


@pytest.mark.parametrize("attack", sorted(FRAMELESS_STARTS))
def test_a_start_through_evokernels_own_code_is_still_the_candidates(attack):
    from evokernel.nvrtc import configure
    code, what = FRAMELESS_STARTS[attack]
    previous = configure(arch="9.0")
    t = _Tamper()
    try:
        run_as_candidate(code)
        assert t.check() == (Reason.THREADS, f"the candidate started {what}")
    finally:
        configure(cache_dir=previous.cache_dir, arch=previous.arch)


def test_demangling_starts_no_subprocess(monkeypatch):
    import subprocess
    from evokernel.build.demangle import demangle

    def refuse(*args, **kwargs):
        raise AssertionError(f"a subprocess was started: {args}")
    monkeypatch.setattr(subprocess, "Popen", refuse)
    assert demangle(["_Z5heavyPKfPfi", "not_mangled"]) == ["heavy(float const*, float*, int)",
                                                           "not_mangled"]
