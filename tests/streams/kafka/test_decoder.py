"""A consumer process's decoder process (streams/kafka/decoder.py, decoder_process.py): whatever a record does while
it is decoded, that record is skipped and counted, the owner goes on, and the rest of the job is decoded."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from streams.codecs.schemas import CatalogSpec, InlineSchema, ModelSpec, TopicModels
from streams.kafka import decoding
from streams.kafka.decoder import ROOT, Decoder
from streams.kafka.decoder_process import Slot
from streams.kafka.decoding import Budgets, Decoding, Models
from streams.kafka.records import RecordTuple
from tests.conftest import wait_until

ITEMS = {
    "type": "array",
    "items": {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0}, "b": {"pattern": "^x+$"}}},
}
SMALL = b'[{"a":1,"b":"x"}]'
SLOW = json.dumps([{"a": number, "b": "xxxx"} for number in range(30_000)]).encode()  # about a second to check


def models(budget_ms: int = 60_000, memory_mb: int = 1024) -> Models:
    catalog = CatalogSpec("c", "inline", schemas=(InlineSchema("items", 1, "json", json.dumps(ITEMS)),))
    rule = TopicModels("t", value=ModelSpec(model="json", catalog="c", subject="items"))
    return Models((catalog,), (rule,), budgets=Budgets(budget_ms, memory_mb))


def record(offset: int, value: bytes) -> RecordTuple:
    return (0, offset, None, value, (), 0, False)


@pytest.fixture
def decoder() -> Iterator[Decoder]:
    found = Decoder()
    try:
        yield found
    finally:
        found.close()


def kinds(results: list[Any]) -> list[str]:
    return ["decoded" if isinstance(result, tuple) else repr(result) for result in results]


def crash_when_it_decodes(decoder: Decoder, index: int) -> threading.Thread:
    """SIGSEGV the decoder process once it is on the job's record `index`, as a C extension's crash would."""

    def crash() -> None:
        child = decoder.child
        wait_until(lambda: child.pid is not None and child.slot.read()[2:] == (index, Slot.RECORD), timeout=30)
        os.kill(child.pid or 0, signal.SIGSEGV)

    thread = threading.Thread(target=crash, daemon=True)
    thread.start()
    return thread


def test_it_decodes_a_job_in_its_own_process(decoder: Decoder) -> None:
    decoder.use(models())
    results = decoder.decode([("t", record(0, SMALL)), ("t", record(1, b"not json")), ("other", record(2, b"raw"))])
    assert results == [record(0, SMALL), None, record(2, b"raw")]
    assert decoder.child.pid != os.getpid()
    assert decoder.tally.take() == ({("t", "not-json"): 1}, {"t": 1})


def test_a_record_whose_decoder_process_dies_is_skipped_once_and_the_rest_decoded(decoder: Decoder) -> None:
    decoder.use(models())
    job = [("t", record(0, SMALL)), ("t", record(1, SLOW)), ("t", record(2, SMALL))]
    crash_when_it_decodes(decoder, 1).join(0)
    assert kinds(decoder.decode(job)) == ["decoded", "None", "decoded"]
    assert decoder.tally.take() == ({("t", "crashed"): 1}, {"t": 2})
    assert decoder.child.started == 2
    # Fetched again (a paused partition, a restarted reader): skipped without being tried.
    assert kinds(decoder.decode(job)) == ["decoded", "None", "decoded"]
    assert decoder.tally.take() == ({("t", "crashed"): 1}, {"t": 2})
    assert decoder.child.started == 2


def test_a_record_past_its_budget_ends_the_decoder_process_and_is_skipped_as_too_slow(decoder: Decoder) -> None:
    decoder.use(models(budget_ms=20))
    first = decoder.decode([("t", record(0, SMALL))])
    assert kinds(first) == ["decoded"]
    pid = decoder.child.pid
    results = decoder.decode([("t", record(1, SLOW)), ("t", record(2, SMALL))])
    assert kinds(results) == ["None", "decoded"]
    assert decoder.tally.take()[0] == {("t", "too-slow"): 1}
    assert decoder.child.pid != pid


def test_schema_work_is_not_held_to_a_records_budget(decoder: Decoder) -> None:
    # Compiling the schema takes longer than 1 ms; the record's own work does not.
    decoder.use(models(budget_ms=10))
    assert kinds(decoder.decode([("t", record(0, SMALL))])) == ["decoded"]
    assert decoder.child.started == 1


def test_a_decoder_process_that_cannot_start_makes_the_records_wait(decoder: Decoder) -> None:
    decoder.use(models(memory_mb=8))  # too little address space for Python to start
    results = decoder.decode([("t", record(0, SMALL)), ("t", record(1, SMALL))])
    assert all(isinstance(result, str) and "does not start" in result for result in results)
    decoder.use(models())
    assert kinds(decoder.decode([("t", record(0, SMALL))])) == ["decoded"]


def test_records_of_a_partition_after_one_that_waits_are_not_tried(decoder: Decoder) -> None:
    catalog = CatalogSpec("r", "schema-registry", url="http://127.0.0.1:9")  # nothing listens there
    rule = TopicModels("t", value=ModelSpec(model="avro", catalog="r", strategy="topic"))
    decoder.use(Models((catalog,), (rule,)))
    framed = b"\x00\x00\x00\x00\x01\x02"
    other = (1, 5, None, framed, (), 0, False)
    results = decoder.decode([("t", record(0, framed)), ("t", record(1, framed)), ("t", other)])
    assert isinstance(results[0], str)
    assert results[1] is False
    assert isinstance(results[2], str)  # another partition waits at its own first record


def test_any_exception_while_decoding_skips_the_record_as_crashed(monkeypatch: pytest.MonkeyPatch) -> None:
    class Broken:
        def decode(self, raw: bytes | None) -> bytes | None:
            raise RuntimeError("a bug nobody foresaw")

    monkeypatch.setattr(decoding, "decoder_for", lambda *args: Broken())
    found = Decoding()
    found.use(models())
    assert found.record("t", record(0, SMALL)) is None
    assert found.tally.take() == ({("t", "crashed"): 1}, {})


def test_the_consumer_and_decoder_processes_import_no_django() -> None:
    # They run as `python -m` children of the worker and read no settings: what they need comes over their socket.
    code = (
        "import sys, streams.kafka.fetch_process, streams.kafka.decoder_process; "
        "print(sorted(name for name in sys.modules if name.split('.')[0] in ('django', 'rest_framework')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT, env={
        key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"
    })  # fmt: skip
    assert done.stdout.strip() == "[]"
