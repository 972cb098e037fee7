"""Decoding in place, for the decoded topics' fetch process: the process that fetches the topics with models decodes
their records itself, and the worker that owns it watches (decision 0012).

A job is decoded as the decoder process decodes one (`decode`, streams/kafka/decoder_process.py), but here, at
once, with no exchange: a record costs the fetch process what decoding it costs. Before each record it writes
which record it is on to the shared slot the worker gave it (`Slot`); the worker reads that slot every
`WATCH_S`, kills the process when one record's own work runs past its budget, and after any death of the process
tells the next one the record it died on (`poison`): that record is skipped without being tried again. Only the
decoded topics of the worker wait meanwhile: the topics without models are fetched by another process.
"""

from __future__ import annotations

import os

from streams.codecs.schemas import timing
from streams.kafka.decoder_process import Result, Slot, decode
from streams.kafka.decoding import Decoding, Models, Tally
from streams.kafka.records import RecordTuple

Entry = tuple[str, RecordTuple]  # (topic, record)


class InlineDecoder:
    def __init__(self, slot_fd: int) -> None:
        self.slot = Slot(slot_fd)
        os.close(slot_fd)
        self.decoding = Decoding()
        self.poison: set[tuple[str, int, int]] = set()  # (topic, partition, offset): records a process died on
        self._job = 0
        self._decodes: dict[str, bool] = {}
        timing.listen(lambda busy: self.slot.state(Slot.SCHEMA if busy else Slot.RECORD))

    @property
    def tally(self) -> Tally:
        return self.decoding.tally

    def use(self, models: Models) -> bool:
        """Decode with `models` from now on; whether they changed."""
        if not self.decoding.use(models):
            return False
        self._decodes = {}
        return True

    def decodes(self, topic: str) -> bool:
        """Whether `topic`'s records are decoded here (the worker's other fetch process is given no models)."""
        found = self._decodes.get(topic)
        if found is None:
            found = self._decodes[topic] = self.decoding.models.decodes(topic)
        return found

    def skip(self, records: list[tuple[str, int, int]]) -> None:
        """Never decode these: the worker saw a process die on each (it counted them)."""
        self.poison.update(records)

    def decode(self, entries: list[Entry]) -> list[Result]:
        """One result per entry, as the decoder process gives them; a poisoned record is skipped untried."""
        self._job += 1
        if not self.poison:  # the usual case
            return decode(self.decoding, self.slot, self._job, entries)
        tried = [(topic, record) for topic, record in entries if (topic, record[0], record[1]) not in self.poison]
        decoded = iter(decode(self.decoding, self.slot, self._job, tried))
        return [None if (topic, record[0], record[1]) in self.poison else next(decoded) for topic, record in entries]

    def close(self) -> None:
        self.slot.memory.close()
