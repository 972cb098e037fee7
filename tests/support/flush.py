"""The test database's flush, retried when Postgres ends it as a deadlock's victim.

A transactional test ends by emptying every table in one `TRUNCATE`, which takes each table's exclusive lock in
turn. The live servers of the run (the session's daphne, each test's own) read the same database meanwhile: a
change a test commits is announced, and they reload the routes, models and revocations at once. A read that
holds one table and asks for the next, while the `TRUNCATE` holds that next one and waits for the first, is a
deadlock; Postgres ends the waiter that checks first, most often the `TRUNCATE` (it waited first), and the test
errs in its teardown with "couldn't be flushed". Postgres' remedy for a deadlock's victim is to run its
transaction again; the reader has finished by then.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from django.db import OperationalError

log = logging.getLogger(__name__)

DEADLOCK_DETECTED = "40P01"  # Postgres' SQLSTATE for a transaction ended as a deadlock's victim
ATTEMPTS = 3


def deadlocked(exc: BaseException) -> bool:
    return getattr(exc.__cause__, "sqlstate", None) == DEADLOCK_DETECTED


def retrying_deadlocks(execute_sql_flush: Callable[[Any, Sequence[str]], None]) -> Callable[[Any, Sequence[str]], None]:
    """`DatabaseOperations.execute_sql_flush`, run again (up to ATTEMPTS in all) when Postgres ended it as the
    victim of a deadlock; any other error is raised as it is."""

    @functools.wraps(execute_sql_flush)
    def execute(operations: Any, sql_list: Sequence[str]) -> None:
        for attempt in range(1, ATTEMPTS + 1):
            try:
                execute_sql_flush(operations, sql_list)
            except OperationalError as exc:
                if not deadlocked(exc) or attempt == ATTEMPTS:
                    raise
                log.warning("the test database's flush was a deadlock's victim; again (attempt %d)", attempt + 1)
                time.sleep(0.05 * attempt)
            else:
                return

    return execute
