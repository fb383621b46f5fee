"""How the block tables a KV manager hands out changed since the scheduler last asked.

The runner's persistent batch (``labkit/model/input_batch.py``) keeps a copy of every running request's
table and writes only what changed. It is told what changed, in the step's decision, by whoever changed
it: the scheduler names the tables it admits (new in full), and the KV manager logs what it does to a
table that already exists::

    appended    allocate_slots gave the table blocks at its end:  table[j:] are new    (rid -> j)
    replaced    copy-on-write put a private copy at index j:      table[j] is new      (rid -> j)
    truncated   rejected drafts rolled back (trim):               the table keeps n    (rid -> n)

A table made from nothing (a new request, one readmitted after preemption, a forked child) is not logged:
it is new in full. Freeing a table forgets its entries. The scheduler takes the log with each decision
(``take``), after that step's allocations; the last update's rollbacks come before them, so a truncation
never cuts into what an append or a copy of the same window wrote.
"""

from __future__ import annotations

from typing import NamedTuple


class TableChanges(NamedTuple):
    """One decision's share of the log (``SchedulerOutput.appended``, ``replaced``, ``truncated``)."""

    appended: dict[str, int]
    replaced: dict[str, int]
    truncated: dict[str, int]


class TableLog:
    def __init__(self) -> None:
        self.appended: dict[str, int] = {}
        self.replaced: dict[str, int] = {}
        self.truncated: dict[str, int] = {}

    def append(self, request_id: str, index: int) -> None:
        """Entries from ``index`` on are new (the earliest index, if appended to twice)."""
        self.appended.setdefault(request_id, index)

    def replace(self, request_id: str, index: int) -> None:
        self.replaced[request_id] = index

    def truncate(self, request_id: str, length: int) -> None:
        self.truncated[request_id] = length

    def forget(self, request_id: str) -> None:
        """The table is gone (freed): whoever gets it back gets a new one, in full."""
        self.appended.pop(request_id, None)
        self.replaced.pop(request_id, None)
        self.truncated.pop(request_id, None)

    def take(self) -> TableChanges:
        """What changed since the last ``take``; the log starts empty again."""
        changes = TableChanges(self.appended, self.replaced, self.truncated)
        self.appended, self.replaced, self.truncated = {}, {}, {}
        return changes
