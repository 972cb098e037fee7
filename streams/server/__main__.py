"""`python -m streams.server`: daphne with write flow control (streams/server/daphne.py)."""

from streams.server.daphne import main

main()
