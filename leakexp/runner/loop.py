"""One loop for independent work items (grid cells): a progress bar, and a failing item is reported and recorded
while the others go on. Grid, cell sweeps, memorization, robustness and the Hydra app all run cells through it."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from tqdm.auto import tqdm

log = logging.getLogger("leakexp")
Item = TypeVar("Item")


def each(items: Iterable[Item], work: Callable[[Item], Any], *, desc: str, unit: str = "cell",
         progress: bool = True, done: Callable[[Item, Any], None] | None = None,
         failed: Callable[[Item, Exception], None] | None = None) -> list[tuple[Item, Exception]]:
    """``work(item)`` for every item in order; ``done(item, result)`` after each that succeeds. A failing item
    (an Exception; an interrupt still stops the loop) is logged, or handed to ``failed``, and the loop goes on:
    the runner has recorded the failure beside the artifact, so status shows it and a rerun retries it.
    Returns (item, exception) of every failure."""
    failures = []
    for item in tqdm(list(items), desc=desc, unit=unit, disable=not progress):
        try:
            result = work(item)
        except Exception as exc:  # one failed item must not stop the others
            failures.append((item, exc))
            if failed is not None:
                failed(item, exc)
            else:
                log.error("%s %s failed: %s: %s", desc, item, type(exc).__name__, exc)
            continue
        if done is not None:
            done(item, result)
    return failures
