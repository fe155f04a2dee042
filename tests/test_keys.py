"""Key names: one module, one hash tag per conversation, validated names."""

from __future__ import annotations

import pytest

from redis_history.keys import ConversationKeys


def test_keys_share_the_conversation_hash_tag() -> None:
    """Every key is rh:<namespace>:{<conversation>}:<kind>."""
    keys = ConversationKeys.build("conv-1", "tenant-a")
    assert keys.all == (
        "rh:tenant-a:{conv-1}:msgs",
        "rh:tenant-a:{conv-1}:meta",
        "rh:tenant-a:{conv-1}:archive",
        "rh:tenant-a:{conv-1}:lock",
    )
    assert keys.lock not in keys.data


def test_conversation_ids_may_contain_colons() -> None:
    """A colon is fine inside the hash tag; the namespace may not have one."""
    assert ConversationKeys.build("user:42").msgs == "rh:default:{user:42}:msgs"
    with pytest.raises(ValueError, match="namespace"):
        ConversationKeys.build("c", "a:b")


@pytest.mark.parametrize("namespace", ["", "x{y", "new\nline", "n" * 201])
def test_bad_namespaces_are_refused(namespace: str) -> None:
    """Empty, braced, control-character or overlong namespaces raise ValueError."""
    with pytest.raises(ValueError, match="namespace"):
        ConversationKeys.build("c", namespace)
