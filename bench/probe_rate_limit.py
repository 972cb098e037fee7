"""Probe what one call of the challenge rate limit (`RateLimit.take`, streams/edge/limits.py) costs when many
client addresses were seen within its window.

Run by hand, no services needed::

    .venv/bin/python bench/probe_rate_limit.py                       # 10 000, 20 000 and 100 000 addresses
    .venv/bin/python bench/probe_rate_limit.py --before b733b3c      # and the limiter of that commit beside it

For each count it fills a limiter with that many addresses, each with a recent event (so none may be forgotten),
then times `--calls` calls for new addresses and prints the mean microseconds per call. `--before REV` loads
streams/edge/limits.py as it was at REV (through `git show`) and times it the same way.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def limits_at(revision: str) -> ModuleType:
    source = subprocess.run(
        ["git", "show", f"{revision}:streams/edge/limits.py"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    path = Path(tempfile.mkdtemp()) / "limits_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("limits_before", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def per_call_us(module: Any, addresses: int, calls: int) -> float:
    limit = module.RateLimit("SSE_MAX_CHALLENGE_RESPONSES_PER_MIN")
    for n in range(addresses):
        limit.seen[f"client:{n}"] = deque([n / 1_000_000])  # as `take` leaves them, in the order of their events
    started = time.perf_counter()
    for n in range(calls):
        limit.take(f"more:{n}", now=1.0 + n / 1_000_000)
    return (time.perf_counter() - started) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--addresses", type=int, nargs="+", default=[10_000, 20_000, 100_000])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--before", metavar="REV", help="also time streams/edge/limits.py as it was at REV")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.test")
    import django  # noqa: PLC0415  (after the path and the settings module are set)

    django.setup()
    from streams.edge import limits  # noqa: PLC0415

    modules = {"now": limits}
    if args.before:
        modules[args.before] = limits_at(args.before)
    print("addresses  " + "  ".join(f"{name:>14}" for name in modules))
    for addresses in args.addresses:
        costs = [per_call_us(module, addresses, args.calls) for module in modules.values()]
        print(f"{addresses:>9}  " + "  ".join(f"{cost:>8.1f} us/call" for cost in costs))


if __name__ == "__main__":
    main()
