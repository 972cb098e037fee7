"""Where each partition of a new stream starts (docs/contract.md §4, §5, §7): pure decisions, no broker calls.

Inputs are what the broker said (watermarks, timestamp lookups) and what the client asked (resume id, start
mode, `since`); the output is the offsets to assign, the progress map the ids start from, and the `reset`
notices for resumed offsets the topic no longer holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from bindings.selectors import START_LIVE
from streams.codecs.event_id import OFFSET_EARLIEST
from streams.kafka.client import Watermarks

MAX_TIMESTAMP_MS = 2**63 - 1  # a Kafka timestamp is a signed 64-bit number of milliseconds


@dataclass(frozen=True)
class Reset:
    partition: int
    requested: int
    earliest: int


@dataclass
class StartPlan:
    offsets: dict[int, int]  # where each partition is read from (OFFSET_EARLIEST = the earliest retained)
    progress: dict[int, int]  # the progress map ids start from
    resets: list[Reset] = field(default_factory=list)


def plan_start(
    watermarks: Mapping[int, Watermarks],
    *,
    resumed: Mapping[int, int] | None,
    start: str,
    since: Mapping[int, int] | None = None,
) -> StartPlan:
    """Start offsets for every partition in `watermarks`.

    A partition listed in the resume id restarts at exactly its offset; one the topic no longer holds (below
    the earliest retained, or past the end as after a topic was re-created) restarts at the earliest with a
    reset notice. A partition a resume id does not list was added to the topic after that id's event (an id
    lists every partition), so all of its records are new to the client: it starts at the earliest. Without a
    resume id, partitions start per `since` (first offset at or after the time), else per `start`:
    `historical` from the earliest, `live` from the end as of now.
    """
    plan = StartPlan(offsets={}, progress={})
    for partition, marks in sorted(watermarks.items()):
        requested = None if resumed is None else resumed.get(partition, OFFSET_EARLIEST)
        if requested is not None and requested != OFFSET_EARLIEST:
            if requested < marks.low or requested > marks.high:
                plan.resets.append(Reset(partition, requested, marks.low))
                requested = marks.low
            plan.offsets[partition] = plan.progress[partition] = requested
        elif requested is None and since is not None:
            plan.offsets[partition] = plan.progress[partition] = since.get(partition, marks.high)
        elif requested is None and start == START_LIVE:
            plan.offsets[partition] = plan.progress[partition] = marks.high
        else:
            plan.offsets[partition] = plan.progress[partition] = OFFSET_EARLIEST
    return plan


def since_offsets(found: Mapping[int, int], watermarks: Mapping[int, Watermarks]) -> dict[int, int]:
    """Offsets from a timestamp lookup; -1 (no record at or after the time) means the partition's end."""
    result = {}
    for partition, marks in watermarks.items():
        offset = found.get(partition, -1)
        result[partition] = marks.high if offset < 0 else max(marks.low, min(offset, marks.high))
    return result


def parse_since(text: str) -> int:
    """Epoch milliseconds from `?since=`: epoch ms, or ISO-8601 (a time without zone is UTC). A time before 1970
    is 0, from which every record qualifies: Kafka refuses a negative time (and reads -1 and -2 as the end and
    the start); one past Kafka's 64-bit timestamps is refused here, where it still gets a 400."""
    text = text.strip()
    if text.isascii() and text.isdigit():  # not str.isdigit() alone: it takes '²', which int() does not
        if len(text) > len(str(MAX_TIMESTAMP_MS)) or int(text) > MAX_TIMESTAMP_MS:
            raise ValueError(f"since={text[:40]!r} is past the latest time Kafka can hold")
        return int(text)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"since={text!r} is neither epoch milliseconds nor an ISO-8601 time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return max(0, int(moment.timestamp() * 1000))
