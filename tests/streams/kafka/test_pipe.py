"""The worker's end of a consumer process's socket (streams/kafka/pipe.py): it reads what `Connection.send` wrote,
message by message, without holding a whole batch's pickle besides the records unpickled from it."""

from __future__ import annotations

import pickle
import socket
import threading
import tracemalloc
from collections.abc import Iterator
from multiprocessing.connection import Connection

import pytest

from streams.kafka.pipe import Receiver

MiB = 1024 * 1024


@pytest.fixture
def pair() -> Iterator[tuple[Connection, Connection]]:
    ours, theirs = socket.socketpair()
    sender, receiving = Connection(theirs.detach()), Connection(ours.detach())
    yield sender, receiving
    for conn in (sender, receiving):
        if not conn.closed:
            conn.close()


def batch(count: int, size: int) -> tuple[object, ...]:
    records = [(0, offset, None, bytes([offset % 256]) * size, (("h", b"v"),), offset) for offset in range(count)]
    return ("batch", {("topic", 0): records}, [("topic", 1)], {("topic", 0): 3})


def test_messages_arrive_whole_and_in_order(pair: tuple[Connection, Connection]) -> None:
    sender, receiving = pair
    messages = [("taken",), batch(160, 32 * 1024), ("highs", {("t", 0): 5}), batch(3, 200 * 1024), batch(1, 0)]

    def send() -> None:
        for message in messages:
            sender.send(message)

    thread = threading.Thread(target=send)
    thread.start()
    receiver = Receiver(receiving)
    assert [receiver.recv() for _ in messages] == messages
    thread.join()


def test_a_batch_is_not_held_twice_while_it_is_read(pair: tuple[Connection, Connection]) -> None:
    sender, receiving = pair
    sent = batch(160, 32 * 1024)
    blob = pickle.dumps(sent, protocol=4)  # as Connection.send pickles: 5 MiB
    thread = threading.Thread(target=sender.send_bytes, args=(blob,))  # copies nothing of `blob`
    receiver = Receiver(receiving)
    tracemalloc.start()
    try:
        thread.start()
        message = receiver.recv()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    thread.join()
    assert message == sent
    # The records themselves are the 5 MiB; Connection.recv would hold the pickle too (twice the size).
    assert peak < len(blob) * 1.2, f"peak {peak / MiB:.1f} MiB for a {len(blob) / MiB:.1f} MiB message"


def test_a_sender_gone_mid_message_or_between_messages_is_end_of_file(pair: tuple[Connection, Connection]) -> None:
    sender, receiving = pair
    blob = pickle.dumps(batch(4, 1024), protocol=4)
    sender.send(("taken",))
    with socket.socket(fileno=sender.fileno()) as raw:
        raw.sendall(len(blob).to_bytes(4, "big") + blob[: len(blob) // 2])  # the child died while it sent
        raw.detach()
    sender.close()
    receiver = Receiver(receiving)
    assert receiver.recv() == ("taken",)
    with pytest.raises(EOFError):
        receiver.recv()
    with pytest.raises(EOFError):
        receiver.recv()


def test_its_own_end_closed_is_an_os_error(pair: tuple[Connection, Connection]) -> None:
    _, receiving = pair
    receiver = Receiver(receiving)
    receiving.close()
    with pytest.raises(OSError, match="Bad file descriptor"):
        receiver.recv()
