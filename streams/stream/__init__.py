"""One stream: how it opens, its reading half and its writing half.

Holds `opening` (where each partition starts, the subscription, the delivery log's row), `reader` (where the
stream stands in each partition, and what it sends next) and `pump` (writes what the reader has ready, with
write flow control).

May import the hub and every layer under it, and `streams.server` (its write flow control); never access
control or the web edge.
"""
