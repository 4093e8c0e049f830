"""Channels' layers, read but not patched: ``fanout.layers`` builds on
members channels_redis and Channels' in-memory layer do not promise to keep.
Checked wherever the layer could be used, under daphne or not."""

from __future__ import annotations

from sessions_app.server.patches.registry import report, source_of

# What ``fanout.layers.BatchReceiveRedisChannelLayer`` uses of its parent.
REDIS_LAYER_MEMBERS = (
    "_group_key",
    "consistent_hash",
    "connection",
    "non_local_name",
    "serialize",
    "deserialize",
    "get_capacity",
    "require_valid_group_name",
    "require_valid_channel_name",
)


def check_channels_redis() -> None:
    try:
        from channels_redis import core  # checked only where it is installed
    except ImportError:  # pragma: no cover - the layer is a dependency
        return
    missing = [m for m in REDIS_LAYER_MEMBERS if not hasattr(core.RedisChannelLayer, m)]
    if not hasattr(core, "BoundedQueue"):
        missing.append("BoundedQueue")
    if missing:
        report("channels_redis", "RedisChannelLayer lacks " + ", ".join(missing))


def check_in_memory_layer() -> None:
    """``layers.LocalChannelLayer`` sweeps through Channels' in-memory layer's
    ``_clean_expired`` and reads its ``channels`` and ``groups``."""
    from channels.layers import InMemoryChannelLayer  # read for the check only

    source = source_of(InMemoryChannelLayer, "self.channels = self.groups =")
    missing = [m for m in ("channels", "groups") if f"self.{m} =" not in source]
    if not hasattr(InMemoryChannelLayer, "_clean_expired"):
        missing.append("_clean_expired")
    if missing:
        report("in_memory_layer", "InMemoryChannelLayer lacks " + ", ".join(missing))
