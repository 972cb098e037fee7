"""Which part of decoding runs now: a record's own work, held to the decoder process's per-record budget, or schema
work (asking a registry, compiling a schema), which has timeouts of its own and is no record's fault.

The codecs mark schema work with `schema_work()`; the decoder process (streams/kafka/decoder_process.py) listens
(`listen`) so that the process watching it knows which budget applies. In any other process nothing listens, and
marking costs a function call. Single-threaded: the decoder process decodes on one thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

_listener: Callable[[bool], None] | None = None
_depth = 0


def listen(listener: Callable[[bool], None] | None) -> None:
    """Call `listener(True)` when schema work starts, `listener(False)` when it ends (nested work counts once)."""
    global _listener  # noqa: PLW0603 (one listener per process: the decoder process's watch slot)
    _listener = listener


@contextmanager
def schema_work() -> Iterator[None]:
    global _depth  # noqa: PLW0603
    _depth += 1
    if _depth == 1 and _listener is not None:
        _listener(True)
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0 and _listener is not None:
            _listener(False)
