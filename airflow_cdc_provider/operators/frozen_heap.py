"""The task process's heap, kept out of Python's garbage collections while one of our operators runs.

A task process holds Airflow, the parsed DAG and the providers (hundreds of thousands of tracked objects), and
every full collection walks them all. What a task allocates sets off such collections at points of its own
choosing: reading back the chunk reports of a task of a thousand chunks, building its job spec, or the Spark
Connect client's import (pandas included) and job set-up. ``gc.freeze`` moves what the process holds out of
the collector's sight; the objects a task makes itself are still collected as usual (docs/performance.md).
"""

from __future__ import annotations

import contextlib
import functools
import gc
from typing import Any, Callable, Iterator, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

_depth = 0  # frozen_heap blocks open in this process (an operator's execute, and a Connect job's inside it)


@contextlib.contextmanager
def frozen_heap() -> Iterator[Callable[[], None]]:
    """Leave what the process holds now out of collections (``gc.freeze``); the yielded function freezes what
    exists by then too. What was frozen is unfrozen at the end, unless the process had frozen objects before
    (a LocalExecutor worker forks with a frozen heap; or an enclosing ``frozen_heap``): those stay as they
    were, with ours added.

    Inside another ``frozen_heap`` the process's heap is frozen by definition, so it is not counted again:
    ``gc.get_freeze_count`` walks every frozen object."""
    global _depth
    frozen_before = _depth > 0 or gc.get_freeze_count() > 0
    gc.freeze()
    _depth += 1
    try:
        yield gc.freeze
    finally:
        _depth -= 1
        if not frozen_before:
            gc.unfreeze()


def with_frozen_heap(execute: F) -> F:
    """An operator's ``execute`` run inside ``frozen_heap``."""

    @functools.wraps(execute)
    def run(self, context: Any, *args: Any, **kwargs: Any) -> Any:
        with frozen_heap():
            return execute(self, context, *args, **kwargs)

    return run  # type: ignore[return-value]
