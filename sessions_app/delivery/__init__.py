"""Delivery: a session's log to one reader, on every transport.

What the session socket (``sockets``) and the SSE stream (``web.stream``)
share, so that a transport is only its framing: the pure order of delivery
(``core``: ``Phase``, ``Sequencer``, ``Batcher``, ``contiguous``), the log's
pages on the sockets' database pool (``reads``), a replay as a stream of
frames with its hole check (``replay``), flow control before every write
(``flow``) and the channel-layer groups a reader is in, renewed (``groups``).
"""
