"""The run pool: one per process, bounded, whatever asks for it."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from sessions_app.runtime.embedded import EmbeddedBackend
from sessions_app.runtime.pool import RunPool, run_pool


def test_one_pool_per_process_across_threads_and_backends():
    """Backends made in other threads (asgiref contexts) all use the one process pool."""
    with ThreadPoolExecutor(4) as ex:
        pools = set(ex.map(lambda _: id(run_pool()), range(16)))
    assert pools == {id(run_pool())}
    EmbeddedBackend("a", {})
    EmbeddedBackend("b", {})
    assert run_pool() is run_pool()


def test_pool_runs_at_most_size_at_once_and_queues_the_rest():
    """50 blocking callables on a pool of 8: never more than 8 threads, all 50 run."""
    pool = RunPool(8)
    release = threading.Event()
    lock = threading.Lock()
    running = 0
    peak = 0
    threads: set[int] = set()
    done = []

    def job(i):
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
            threads.add(threading.get_ident())
        release.wait(10)
        with lock:
            running -= 1
            done.append(i)

    for i in range(50):
        pool.submit(lambda i=i: job(i))
    assert pool.busy == 50
    release.set()
    assert pool.wait_idle(10)
    assert sorted(done) == list(range(50))
    assert peak == 8 and len(threads) == 8


def test_a_failing_callable_frees_its_slot():
    """An exception in a run task is logged; its slot and thread come back."""
    pool = RunPool(1)
    assert pool.slots.acquire(timeout=1)
    pool.submit(lambda: 1 / 0, slot_taken=True)
    assert pool.wait_idle(5)
    assert pool.slots.acquire(timeout=1)
