"""frozen_heap: while an operator runs (a chunk task, a stream launch, a Connect job in the task's process), the
process's heap is out of garbage collections; after it, the process has its collector back as it was."""

import gc

from airflow_cdc_provider.operators.frozen_heap import frozen_heap, with_frozen_heap


class Cycle:
    def __init__(self) -> None:
        self.me = self


def test_the_heap_is_frozen_while_the_job_runs_and_given_back_after():
    assert gc.get_freeze_count() == 0
    before = Cycle()
    with frozen_heap() as freeze:
        frozen = gc.get_freeze_count()
        assert frozen > 0  # what the process held is out of the collections
        during = [Cycle() for _ in range(1000)]
        freeze()  # what exists by now, the objects the session's import made, too
        # (a frozen object that dies meanwhile leaves the count, hence a margin well under the 1000 new ones)
        assert gc.get_freeze_count() > frozen + 500
        del during
    assert gc.get_freeze_count() == 0
    del before
    assert gc.collect() >= 2  # both cycles are garbage the collector sees again


def test_a_heap_frozen_before_stays_frozen():
    kept = [Cycle() for _ in range(1000)]
    gc.freeze()  # as a LocalExecutor worker's heap is when it forks
    try:
        held = gc.get_freeze_count()
        with frozen_heap():
            pass
        # the process's own freeze is not undone (gc.unfreeze would empty it); the count itself may drop a little
        # as frozen objects the process no longer references die (seen: one fewer)
        assert gc.get_freeze_count() > held - 500
        del kept
    finally:
        gc.unfreeze()


def test_an_operator_execute_runs_with_the_heap_frozen():
    class Operator:
        @with_frozen_heap
        def execute(self, context):
            return gc.get_freeze_count(), context

    frozen, context = Operator().execute({"ti": None})
    assert frozen > 0 and context == {"ti": None}  # ran frozen, with its context
    assert gc.get_freeze_count() == 0  # and gave the collector back


def test_a_nested_frozen_heap_leaves_the_unfreezing_to_the_outer_one():
    with frozen_heap():
        with frozen_heap() as freeze:
            inner = [Cycle() for _ in range(1000)]
            freeze()
        assert gc.get_freeze_count() > 0  # the inner block's end kept the heap frozen: the outer one is still running
        del inner
    assert gc.get_freeze_count() == 0  # the outer block's end gave the collector everything back
