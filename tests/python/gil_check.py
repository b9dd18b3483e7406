"""The GIL check the test files share: does a second Python thread run while grux computes?"""
import math
import threading
import time


def ticks_during(work, at_least=0.05):
    """(ticks, alone): how many times a second thread ticked (every 1 ms) while work() ran,
    and how long work() takes alone (a held GIL would freeze the ticker). On a machine fast
    enough that one call takes less than `at_least` seconds, work() is repeated until it does
    (between calls the GIL is held only for the loop)."""
    t0 = time.perf_counter()
    work()
    once = time.perf_counter() - t0
    reps = max(1, math.ceil(at_least / max(once, 1e-6)))
    once_work = work

    def work():
        for _ in range(reps):
            once_work()

    t0 = time.perf_counter()
    work()
    alone = time.perf_counter() - t0
    ticks, done = [], threading.Event()

    def ticker():
        while not done.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    th = threading.Thread(target=ticker)
    th.start()
    time.sleep(0.01)
    start = time.perf_counter()
    work()
    end = time.perf_counter()
    done.set()
    th.join()
    return len([t for t in ticks if start < t < end]), alone
