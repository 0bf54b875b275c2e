"""A worker that ends with its driver: ``exit_when_orphaned(fd)`` in a worker process.

The GPU worker runs in a session of its own (evokernel.engine.handle), so a driver killed by
SIGKILL, a job limit or the OOM killer takes no worker with it. A worker waiting for its next
message reads end-of-file and returns; one busy in a candidate (a kernel that never ends, a long
measurement) would go on holding the GPU, and the next run on that GPU would find it contended
(gpu_share) or time out. The driver is the only writer of the worker's input pipe, so that pipe
reports POLLHUP (poll(2)) exactly when the driver is gone; a daemon thread waits for it and ends
the process, whatever its main thread is doing.
"""
from __future__ import annotations

import os
import select
import threading


def exit_when_orphaned(fd: int, code: int = 0) -> threading.Thread:
    """Start a daemon thread that calls ``os._exit(code)`` once every writer of the pipe ``fd``
    (its read end, left open) has closed it. Nothing is read from ``fd``.

    Returns: the thread (started). It ends without exiting the process if ``fd`` is closed or
    invalid in this process (POLLNVAL).
    """
    def watch() -> None:
        poller = select.poll()
        poller.register(fd, select.POLLHUP)        # reported whether asked for or not
        while True:
            for _, events in poller.poll():
                if events & select.POLLNVAL:
                    return
                if events & (select.POLLHUP | select.POLLERR):
                    os._exit(code)

    thread = threading.Thread(target=watch, name="lifeline", daemon=True)
    thread.start()
    return thread
