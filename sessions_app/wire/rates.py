"""A socket's rate limit, as pure code: ``TokenBucket`` (the frames of a
socket, and the branch commands), with the protocol's rates as defaults
(``wire.protocol``: ``RATE_PER_SECOND``, ``RATE_BURST``)."""

from __future__ import annotations

from sessions_app.wire.protocol import RATE_BURST, RATE_PER_SECOND


class TokenBucket:
    """Rate limit: ``rate`` frames per second sustained, ``burst`` at once."""

    def __init__(self, rate: float = RATE_PER_SECOND, burst: float = RATE_BURST):
        self.rate = rate
        self.burst = burst
        self.tokens = burst
        self.stamp: float | None = None

    def take(self, now: float) -> bool:
        """Spend one token at time ``now``; False when the bucket is empty."""
        if self.stamp is not None:
            self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens < 1 - 1e-9:  # float steps of 1/rate must not starve a steady client
            return False
        self.tokens -= 1
        return True
