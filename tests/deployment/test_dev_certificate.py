"""platform/tlscert.py's development certificate: made once, whole, however many supervisors start at once."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

import tlscert  # platform/tlscert.py, on the path tests.support.servers gives platform/  # isort: skip


def test_supervisors_starting_at_once_make_one_pair(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Four supervisors of two test runs side by side find no certificate at the same moment. Each file is replaced
    whole, but a pair is two files: one supervisor's key beside another's certificate cannot serve. Writes are
    slowed here so that all four are past their first look before the first pair is written."""
    write = tlscert._write
    writes: list[str] = []

    def slow_write(path: Path, data: bytes) -> None:
        write(path, data)
        writes.append(path.name)
        time.sleep(0.2)

    monkeypatch.setattr(tlscert, "_write", slow_write)
    found: list[tuple[Path, Path]] = []
    supervisors = [
        threading.Thread(target=lambda: found.append(tlscert.development_pair(tmp_path, "127.0.0.1"))) for _ in range(4)
    ]
    for supervisor in supervisors:
        supervisor.start()
    for supervisor in supervisors:
        supervisor.join(30)

    assert len(found) == 4
    assert writes == [tlscert.DEV_KEY, tlscert.DEV_CERT]  # one pair made; the others took it
    tlscert.check_pair(tmp_path / tlscert.DEV_CERT, tmp_path / tlscert.DEV_KEY)


def test_a_pair_for_another_host_is_made_again(tmp_path: Path) -> None:
    cert, key = tlscert.development_pair(tmp_path, "127.0.0.1")
    first = cert.read_bytes()
    assert tlscert.development_pair(tmp_path, "127.0.0.1") == (cert, key)
    assert cert.read_bytes() == first
    tlscert.development_pair(tmp_path, "sse.example")
    assert cert.read_bytes() != first
    tlscert.check_pair(cert, key)
