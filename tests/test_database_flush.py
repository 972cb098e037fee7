"""The flush that ends a transactional test, against a reader of the same database that deadlocks with it, as a
live server's reload can (tests/support/flush.py)."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.core.management.color import no_style
from django.core.management.sql import sql_flush
from django.db import connection
from django.db.backends.postgresql.operations import DatabaseOperations

from tests.support.flush import retrying_deadlocks

pytestmark = pytest.mark.django_db(transaction=True)


def truncated_tables() -> list[str]:
    """The tables the flush empties, in the order its `TRUNCATE` locks them."""
    (statement,) = sql_flush(no_style(), connection, allow_cascade=False)
    return re.findall(r'"([^"]+)"', statement.split(";")[0])


def flush_waits_for_a_lock(reader: psycopg.Connection[Any]) -> bool:
    """This test's flush waits: a flush of the other run beside it (platform/test.sh) is in another database."""
    found = reader.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'TRUNCATE%'"
        " AND datname = current_database()"
    ).fetchone()
    return bool(found and found[0])


def deadlocking_reader(first: str, last: str, errors: list[BaseException]) -> threading.Thread:
    """A reader that holds `last`, waits until the flush holds `first` and waits for `last`, then reads `first`."""
    params = connection.get_connection_params()

    def read() -> None:
        try:
            with psycopg.connect(**params) as reader, psycopg.connect(**params, autocommit=True) as watcher:
                reader.execute(f'SELECT 1 FROM "{last}" LIMIT 1')  # noqa: S608  (a table name of the schema)
                deadline = time.monotonic() + 10
                while not flush_waits_for_a_lock(watcher):
                    assert time.monotonic() < deadline, "the flush never waited for the reader's table"
                    time.sleep(0.01)
                reader.execute(f'SELECT 1 FROM "{first}" LIMIT 1')  # noqa: S608  (waits: a deadlock)
                reader.commit()
        except BaseException as exc:  # the test's to see
            errors.append(exc)

    return threading.Thread(target=read, name="deadlocking-reader")


def flush_against_a_deadlocking_reader(monkeypatch: pytest.MonkeyPatch, execute: Callable[..., None]) -> None:
    tables = truncated_tables()
    monkeypatch.setattr(DatabaseOperations, "execute_sql_flush", execute)
    errors: list[BaseException] = []
    reader = deadlocking_reader(tables[0], tables[-1], errors)
    reader.start()
    try:
        time.sleep(0.2)  # the reader holds its table
        call_command("flush", interactive=False, verbosity=0)
    finally:
        reader.join(30)
    assert not errors, errors


# Django's own, beneath what conftest.py installed.
DJANGO_FLUSH = getattr(DatabaseOperations.execute_sql_flush, "__wrapped__", DatabaseOperations.execute_sql_flush)


def plain_flush(operations: Any, sql_list: Sequence[str]) -> None:
    DJANGO_FLUSH(operations, sql_list)


def test_a_flush_ended_as_a_deadlocks_victim_is_what_the_test_run_saw(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(CommandError, match="couldn't be flushed") as caught:
        flush_against_a_deadlocking_reader(monkeypatch, plain_flush)
    database_error = caught.value.__cause__  # Django's, over psycopg's
    assert getattr(getattr(database_error, "__cause__", None), "sqlstate", None) == "40P01"  # deadlock detected


def test_the_flush_runs_again_after_a_deadlock_and_empties_the_tables(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from django.contrib.auth.models import User  # noqa: PLC0415  (Django is set up by now)

    User.objects.create_user("kept-until-the-flush")
    with caplog.at_level(logging.WARNING, logger="tests.support.flush"):
        flush_against_a_deadlocking_reader(monkeypatch, retrying_deadlocks(plain_flush))
    assert [r.getMessage() for r in caplog.records] == [
        "the test database's flush was a deadlock's victim; again (attempt 2)"
    ]
    assert not User.objects.exists()
