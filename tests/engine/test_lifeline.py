"""evokernel.engine.lifeline: a worker busy in a candidate ends when its driver is gone, and
not before. A real pipe and a real process; the busy candidate is a sleeping main thread."""
from __future__ import annotations

import os
import subprocess
import sys
import time

BUSY_WORKER = ("import sys, time\n"
               "from evokernel.engine.lifeline import exit_when_orphaned\n"
               "exit_when_orphaned(int(sys.argv[1]))\n"
               "time.sleep(120)\n"
               "sys.exit(7)\n")


def _start_busy_worker() -> tuple[subprocess.Popen, int]:
    """The worker holds the read end of a pipe whose only writer is this process."""
    read_end, write_end = os.pipe()
    proc = subprocess.Popen([sys.executable, "-c", BUSY_WORKER, str(read_end)],
                            pass_fds=(read_end,), start_new_session=True)
    os.close(read_end)
    return proc, write_end


def test_a_busy_worker_ends_when_its_driver_is_gone():
    proc, write_end = _start_busy_worker()
    try:
        time.sleep(1.5)                              # the driver alive: the worker stays
        assert proc.poll() is None
        os.write(write_end, b"x")                    # a message waiting does not end it
        time.sleep(0.5)
        assert proc.poll() is None
        os.close(write_end)                          # what the kernel does when the driver dies
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_closed_descriptor_stops_the_watch_and_nothing_else():
    code = ("import os, sys, time\n"
            "from evokernel.engine.lifeline import exit_when_orphaned\n"
            "r, w = os.pipe()\n"
            "os.close(r)\n"
            "t = exit_when_orphaned(r)\n"
            "t.join(5)\n"
            "sys.exit(5 if t.is_alive() else 0)\n")
    assert subprocess.run([sys.executable, "-c", code], timeout=30).returncode == 0
