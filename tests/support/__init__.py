"""What the tests share: real servers, SSE and HTTP/2 clients, the in-process data plane, keys."""
