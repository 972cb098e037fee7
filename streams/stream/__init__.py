"""One stream: how it opens, its reading half and its writing half.

Holds `opening` (where each partition starts, the subscription, the delivery log's row), `reader` (where the
stream stands in each partition, and what it sends next), `intake` (what the next write carries, and whether the
stream stands at the live end), `pump` (writes it, with write flow control) and `slow_client` (what a full
connection's stream does).

May import the hub and every layer under it, and `streams.server` (its write flow control); never access
control or the web edge.
"""
