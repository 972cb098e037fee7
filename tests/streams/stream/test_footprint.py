"""What every open stream holds, for as long as its client stays, is made of objects without a dict of their own
(`__slots__`): a dict per object was a few hundred bytes per class per stream (bench/stream_census.py,
docs/benchmarks.md "Memory per idle stream"). An attribute added to one of these classes must be declared in its
slots, or setting it fails at once."""

from __future__ import annotations

from typing import cast

import pytest

from streams.edge.asks import Asks
from streams.edge.endpoint import Admitted, Registration, Stream
from streams.hub.watchdog import Quiet
from streams.routes.matching import Match
from streams.server.daphne import Flow
from streams.server.inbox import Inbox
from streams.stream.intake import Intake
from streams.stream.pump import KeepAlive, Output, Pump
from streams.stream.reader import Replay, StreamReader
from streams.stream.slow_client import SlowClientPolicy
from streams.stream.wakeup import Wakeup

PER_STREAM = (
    Stream, Admitted, Registration, Flow, Inbox, Pump, Output, KeepAlive, Intake, StreamReader, Replay,
    SlowClientPolicy, Wakeup, Quiet,
)  # fmt: skip


@pytest.mark.parametrize("kind", PER_STREAM, ids=lambda kind: kind.__name__)
def test_an_object_every_open_stream_holds_has_no_dict_of_its_own(kind: type) -> None:
    assert not any("__dict__" in vars(base) for base in kind.__mro__), f"{kind.__name__} instances carry a dict"


def test_what_a_streams_checks_hand_over_is_taken_once_and_not_kept() -> None:
    admitted = Admitted(cast(Match, object()), b"resume", cast(Asks, object()))
    taken = admitted.take()
    assert taken[1] == b"resume"
    # The frame holding `admitted` lives as long as the stream: it holds none of it now.
    assert [admitted.matched, admitted.resume, admitted.asks] == [None, None, None]
    with pytest.raises(RuntimeError):
        admitted.take()
