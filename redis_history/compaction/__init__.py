"""Compaction: when a conversation is compacted, by what, and the RQ workers that do it.

``state`` and ``policy`` are the state machine and the thresholds the store keeps and
checks; ``run`` is one compaction under the conversation's lock; ``compactors`` and
``summarizers`` decide what replaces the oldest turns; ``jobs`` is the only module that
imports RQ (the queue, the job function and the workers). This file imports nothing, so
the store can use the state machine without loading the rest.
"""
