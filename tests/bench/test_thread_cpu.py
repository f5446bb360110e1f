"""`bench.thread_cpu` reads each thread's CPU and context switches from /proc."""

from __future__ import annotations

import os
import threading
import time

from bench.thread_cpu import thread_use


def _spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_a_busy_thread_shows_its_cpu_and_an_idle_one_its_switches() -> None:
    busy_done, idle_done, release = threading.Event(), threading.Event(), threading.Event()
    ids: dict[str, int] = {}

    def busy() -> None:
        ids["busy"] = threading.get_native_id()
        _spin(0.3)
        busy_done.set()
        release.wait(10)  # alive (listed in /proc) until read

    def idle() -> None:
        ids["idle"] = threading.get_native_id()
        never = threading.Event()
        for _ in range(20):  # sleeps and wakes: voluntary switches, next to no CPU
            never.wait(0.005)
        idle_done.set()
        release.wait(10)

    threads = [threading.Thread(target=busy), threading.Thread(target=idle)]
    for thread in threads:
        thread.start()
    assert busy_done.wait(10)
    assert idle_done.wait(10)
    used = thread_use(os.getpid())
    release.set()
    for thread in threads:
        thread.join()
    assert used[ids["busy"]].cpu_seconds >= 0.2
    assert used[ids["idle"]].cpu_seconds < 0.1
    assert used[ids["idle"]].switches >= 10
    assert thread_use(2**22 + 1) == {}  # no such process: nothing, not an error
