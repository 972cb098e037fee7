"""The HTTP server: daphne with write flow control, and HTTPS with HTTP/2.

Holds `daphne` (the server: the app learns when a client's transport is full) and `tls` (HTTPS on a listening
socket handed to a worker). `python -m streams.server` runs it (`__main__`).

Imports nothing of `streams` but itself (one stream imports its flow control), and `config.logs`.
"""
