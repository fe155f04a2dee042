"""When a new memory says the same as one its owner keeps: the offline decision by meaning.

A memory made with ``merge_similar=True`` asks, before it stores a text, for the owner's
nearest memory by meaning; :func:`same_fact` decides whether the new text restates it (then
it is merged into that memory: provenance, tags and conversations united, no copy kept) or
is a fact of its own. The rule: cosine similarity of at least :data:`MERGE_SIMILARITY`,
unless both name people, places or numbers and share none of them ("Lives in Porto" is not
"Lives in Lisbon", however close in meaning). :func:`updates` decides whether it updates
one instead ("Lives in Porto." after "Lives in Lisbon."): then the new memory supersedes it.
On the labelled pairs of
``tests/memory_samples.py`` (30 paraphrases of one fact, 30 pairs of different facts on one
topic) with the offline embedder this merges with precision 0.96 and recall 0.87
(``benchmarks/bench_recall.py``).
"""

from __future__ import annotations

import re

__all__ = ["MERGE_SIMILARITY", "UPDATE_SIMILARITY", "decide", "names", "same_fact", "updates"]

MERGE_SIMILARITY = 0.6
"""The least cosine similarity at which two texts may be one fact (the offline embedder's
scale; chosen on the labelled pairs, where it is the highest with recall at least 0.85)."""

UPDATE_SIMILARITY = 0.3
"""The least cosine similarity at which a text may update another (:func:`updates`): lower
than :data:`MERGE_SIMILARITY`, since the names an update changes weigh much in a short
text's vector ("Lives in Porto." and "Lives in Lisbon." are 0.44 apart by the offline
embedder), and every other word must be the same."""

_WORD = re.compile(r"\w+")
_WHEN = frozenset({"now", "currently", "recently", "today", "still", "again", "anymore"})
"""Words that say when rather than what: an update often adds one ("Now lives in Porto.")."""


def names(text: str) -> frozenset[str]:
    """The names and numbers of ``text``, lower-cased: its words with a digit, and its
    capitalized words but the first (which a sentence capitalizes anyway)."""
    words = _WORD.findall(text)
    return frozenset(
        word.casefold()
        for i, word in enumerate(words)
        if any(c.isdigit() for c in word) or (i > 0 and word[:1].isupper())
    )


def same_fact(text: str, other: str, cosine: float) -> bool:
    """Whether ``text`` restates ``other``, given their vectors' ``cosine`` similarity."""
    if cosine < MERGE_SIMILARITY:
        return False
    mine, theirs = names(text), names(other)
    return not (mine and theirs and not mine & theirs)


def _frame(text: str, named: frozenset[str]) -> list[str]:
    """``text``'s words but the names and numbers ``named`` and the words of :data:`_WHEN`,
    lower-cased, in order: what a statement says of whatever it names."""
    return [w for w in (w.casefold() for w in _WORD.findall(text)) if w not in named | _WHEN]


def updates(text: str, other: str, cosine: float) -> bool:
    """Whether ``text`` updates ``other``: the same statement of another name or number
    ("Lives in Porto." after "Lives in Lisbon.", "Has 3 children." after "Has 2 children."),
    given their vectors' ``cosine`` similarity: at least :data:`UPDATE_SIMILARITY`, each
    names a name or number the other does not, and every other word is the same, in order.
    Two facts of one kind that can both hold differ in more than a name ("Has a dog named
    Rex." and "Has a cat named Tom."), but not always: the rule takes "Speaks Spanish." to
    update "Speaks German."; an extractor that decides updates itself
    (:class:`~redis_history.memory.extraction.Fact`) knows better."""
    if cosine < UPDATE_SIMILARITY:
        return False
    mine, theirs = names(text), names(other)
    if not (mine - theirs and theirs - mine):
        return False
    return _frame(text, mine | theirs) == _frame(other, mine | theirs)


def decide(text: str, other: str, cosine: float) -> str | None:
    """What a new memory ``text`` is to its owner's memory ``other``: ``"update"``
    (:func:`updates`), ``"merge"`` (:func:`same_fact`) or ``None`` (a fact of its own)."""
    if updates(text, other, cosine):
        return "update"
    if same_fact(text, other, cosine):
        return "merge"
    return None
