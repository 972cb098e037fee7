"""What a consumer's child process sends the worker (decision 0008), read straight off the socket.

The child sends with `Connection.send`: a 4-byte length, then the pickle. `Connection.recv` would first read the
whole pickle into one buffer (a batch is megabytes): each read of the socket allocates the rest of the message,
the pieces are concatenated, and the buffer lives until the records are unpickled from it. Those big short-lived
allocations leave the worker's malloc arenas fragmented, resident though free. Unpickling from a buffered reader
on the socket allocates each record's bytes once, as a consumer in the worker itself did, and at most one pickle
frame (64 KiB) besides.
"""

from __future__ import annotations

import pickle
import struct
from multiprocessing.connection import Connection
from typing import Any

READ_BUFFER = 64 * 1024  # a pickle frame: records larger than this are read straight into their own bytes
HEADER = struct.Struct("!i")  # `Connection`'s length prefix (-1: the length follows on 8 bytes)


class Receiver:
    """Reads the messages `Connection.send` wrote on the other end of `conn`, from one thread. Sending on `conn`
    (from any thread) and closing it are still the connection's."""

    def __init__(self, conn: Connection) -> None:
        self._stream = open(conn.fileno(), "rb", buffering=READ_BUFFER, closefd=False)  # noqa: SIM115

    def recv(self) -> Any:
        """The next message; EOFError once the other end closed, OSError once `conn` did."""
        header = self._stream.read(HEADER.size)
        if len(header) < HEADER.size:
            raise EOFError
        (size,) = HEADER.unpack(header)
        if size == -1:  # a message of 2 GiB or more
            self._stream.read(8)
        try:
            return pickle.load(self._stream)  # noqa: S301 (our own child process, as Connection.recv would)
        except pickle.UnpicklingError as exc:  # the other end died in the middle of a message
            raise EOFError(str(exc)) from exc
