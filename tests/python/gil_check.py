"""The GIL check the test files share: does a second Python thread run while grux computes?"""
import threading
import time


def ticks_during(work):
    """(ticks, alone): how many times a second thread ticked (every 1 ms) while work() ran,
    and how long work() takes alone (a held GIL would freeze the ticker)."""
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
