"""One loop for independent work items (grid cells): a progress bar, and a failing item is reported and recorded
while the others go on. Grid, cell sweeps, memorization, robustness and the Hydra app all run cells through it.

With ``workers`` > 1 the items run in that many processes at once (each with its share of the cores' threads);
artifacts that several items need are computed once, by whichever process asks first: the store locks them.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from multiprocessing import get_context
from typing import Any, TypeVar

from tqdm.auto import tqdm

from leakexp.runner.jobs import allocated_cpus

log = logging.getLogger("leakexp")
Item = TypeVar("Item")


def each(items: Iterable[Item], work: Callable[[Item], Any], *, desc: str, unit: str = "cell",
         progress: bool = True, done: Callable[[Item, Any], None] | None = None,
         failed: Callable[[Item, Exception], None] | None = None, workers: int = 1) -> list[tuple[Item, Exception]]:
    """``work(item)`` for every item in order; ``done(item, result)`` after each that succeeds. A failing item
    (an Exception; an interrupt still stops the loop) is logged, or handed to ``failed``, and the loop goes on:
    the runner has recorded the failure beside the artifact, so status shows it and a rerun retries it.
    ``workers`` > 1: that many processes (``work`` and the items must pickle); ``done`` and ``failed`` are
    called in this process as items finish. Returns (item, exception) of every failure."""
    items = list(items)
    failures = []

    def fail(item, exc: Exception) -> None:
        failures.append((item, exc))
        if failed is not None:
            failed(item, exc)
        else:
            log.error("%s %s failed: %s: %s", desc, item, type(exc).__name__, exc)

    if workers > 1 and len(items) > 1:
        for item, result, exc in _in_processes(items, work, min(workers, len(items)), desc, unit, progress):
            if exc is not None:
                fail(item, exc)
            elif done is not None:
                done(item, result)
        return failures
    for item in tqdm(items, desc=desc, unit=unit, disable=not progress):
        try:
            result = work(item)
        except Exception as exc:  # one failed item must not stop the others
            fail(item, exc)
            continue
        if done is not None:
            done(item, result)
    return failures


def _in_processes(items: list, work: Callable, workers: int, desc: str, unit: str, progress: bool):
    """Yields (item, result, exception) as items finish, submitted in order, at most ``workers`` at a time (so the
    first cells, which share most upstream work, start first). Ctrl-C reaches every worker once: a worker stops
    its item as the runner stops any interrupted work, and the interrupt is raised here after they have."""
    threads = max(1, allocated_cpus() // workers)
    # spawn: a forked child of a process whose thread pools have started can hang in them
    pool = ProcessPoolExecutor(workers, mp_context=get_context("spawn"), initializer=_worker_start,
                               initargs=(threads,))
    pending, queue = {}, list(enumerate(items))
    bar = tqdm(total=len(items), desc=desc, unit=unit, disable=not progress)
    try:
        while queue or pending:
            while queue and len(pending) < workers:
                i, item = queue.pop(0)
                pending[pool.submit(_call, work, item)] = item
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                item = pending.pop(future)
                bar.update()
                exc = future.exception()
                if isinstance(exc, KeyboardInterrupt):
                    raise exc
                if exc is not None and not isinstance(exc, Exception):
                    raise exc
                yield item, (None if exc else future.result()), exc
    except BaseException:
        for process in list(getattr(pool, "_processes", {}).values()):  # running workers stop their item cleanly
            if process.is_alive():
                os.kill(process.pid, signal.SIGINT)
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    finally:
        bar.close()
    pool.shutdown(wait=True)


_busy = False
_interrupted = False


def _worker_start(threads: int) -> None:
    """A worker: its share of the cores for the math libraries (before torch is imported), and Ctrl-C handled
    once: during an item it interrupts the item; between items the worker just ends."""
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = str(threads)
    signal.signal(signal.SIGINT, _on_interrupt)


def _on_interrupt(signum, frame) -> None:
    global _interrupted
    if _interrupted:  # the terminal's Ctrl-C and the parent's forward of it arrive both: act once
        return
    _interrupted = True
    if _busy:
        raise KeyboardInterrupt
    os._exit(130)


def _call(work: Callable, item):
    global _busy
    _busy = True
    try:
        return work(item)
    finally:
        _busy = False
