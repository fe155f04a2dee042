"""A small labelled set for long-term memory: one user's memories, stored in this order, and
questions with the memories that answer them (by position). The answers were stored first,
and later memories share the questions' words, so newest-first ranking alone does poorly."""

from __future__ import annotations

from redis_history.memory import MemoryFilters
from redis_history.memory.redis_memory import MAX_QUERY_TERMS, RedisLongTermMemory, terms

MEMORIES: tuple[str, ...] = (
    "Prefers an aisle seat on long-haul flights.",  # 0
    "Is allergic to peanuts and shellfish.",
    "Works as a backend engineer at a logistics startup in Rotterdam.",
    "Has a daughter named Mia who started primary school this year.",
    "Runs a half marathon every spring; the training plan is three runs a week.",
    "Uses Neovim as code editor with a Lua configuration; dislikes VS Code.",  # 5
    "Monthly rent is 1,450 euros, paid on the first day of the month.",
    "Vegetarian since 2019, but eats fish occasionally.",
    "Learning Japanese; passed the JLPT N4 exam in December.",
    "Their dog, a border collie called Pixel, needs a walk at 7 am.",
    "Prefers meetings before noon and blocks Friday afternoons for deep work.",  # 10
    "Favourite cuisine is Georgian food, especially khachapuri.",
    "Passport expires in March 2027; needs a new one before the Schengen trip.",
    "Deploys services with Kubernetes on Google Cloud; on call every fourth week.",
    "Mother lives in Porto and visits every August.",
    "Takes 10 mg of cetirizine daily for hay fever in spring.",  # 15
    "Budget for the Japan trip is 4,000 euros including flights.",
    "Plays bass guitar in a jazz band on Thursday evenings.",
    "Asked for flight prices from Amsterdam to Lisbon.",
    "Asked to book seats for a concert in the front row.",
    "Asked which food delivery apps work in Rotterdam.",  # 20
    "Requested a summary of the meeting notes from Tuesday.",
    "Asked how long a flight from Rotterdam to Tokyo takes.",
    "Wants reminders to water the plants every spring morning.",
    "Asked about dog-friendly cafes near the office.",
    "Asked for a recipe with fish and lemon.",  # 25
    "Asked to convert 200 euros to Japanese yen.",
    "Wanted tips for running a retrospective at work.",
    "Asked about the weather in Porto next week.",
    "Asked for the best way to learn guitar chords.",
    "Asked about school holidays in the Netherlands.",  # 30
    "Requested a packing list for a trip.",
    "Asked to explain Kubernetes pod eviction.",
    "Asked what time the office opens on Monday.",
    "Asked about the exam schedule for driving lessons.",
    "Asked for vegetarian restaurants in Lisbon.",  # 35
    "Wanted a cheap hotel in Tokyo for the Japan trip.",
    "Asked for medicine that helps with a cold.",
    "Asked which passport photos are accepted.",
    "Asked about rent prices in Utrecht.",
    "Asked to schedule a call with the jazz club.",  # 40
    "Asked for allergy-friendly snacks for a party.",
    "Asked about the marathon route in Rotterdam.",
    "Asked for a Lua tutorial.",
    "Asked for the opening hours of the Georgian restaurant downtown.",
    "Wanted a birthday gift idea for a school friend.",  # 45
    "Asked how to train a puppy to walk on a leash.",
    "Asked about aisle or window seats on trains.",
    "Asked whether the code review can wait until Monday.",
    "Asked for a half-price deal on a weekend trip.",
)

QUERIES: tuple[tuple[str, frozenset[int]], ...] = (
    ("Which seat should I book on the flight?", frozenset({0})),
    ("What is the user allergic to?", frozenset({1})),
    ("Which company does the user work for as an engineer?", frozenset({2})),
    ("What is the daughter's name?", frozenset({3})),
    ("How often does the user train for the half marathon?", frozenset({4})),
    ("Which code editor does the user like?", frozenset({5})),
    ("How much is the monthly rent?", frozenset({6})),
    ("Is the user vegetarian?", frozenset({7})),
    ("Which Japanese exam did the user pass?", frozenset({8})),
    ("When does the dog need a walk?", frozenset({9})),
    ("When does the user prefer to have meetings?", frozenset({10})),
    ("What is the user's favourite food?", frozenset({11})),
    ("When does the passport expire?", frozenset({12})),
    ("Is the user on call this week?", frozenset({13})),
    ("Where does the user's mother live?", frozenset({14})),
    ("What does the user take for hay fever?", frozenset({15})),
    ("What is the budget for the Japan trip?", frozenset({16})),
    ("Which band does the user play in?", frozenset({17})),
)
"""Each question and the positions in :data:`MEMORIES` of the memories that answer it."""


def recall_at_k(ranked: list[list[int]], k: int) -> float:
    """The share of each question's answers found in its first ``k`` results, averaged."""
    total = 0.0
    for (_, relevant), got in zip(QUERIES, ranked, strict=True):
        total += len(relevant & set(got[:k])) / len(relevant)
    return total / len(QUERIES)


def rankings(memory: RedisLongTermMemory, top_k: int) -> tuple[list[list[int]], list[list[int]]]:
    """The labelled set stored in order for one user, then each question's ranking by
    position: BM25's top ``top_k`` from ``recall``, and every memory sharing a query word,
    newest first (the tie-breaker alone)."""
    owner = {"agent_id": "assistant", "user_id": "u-1"}
    ids = memory.store_many([(text, owner) for text in MEMORIES])
    position = {memory_id: i for i, memory_id in enumerate(ids)}
    filters = MemoryFilters("assistant", "u-1")
    bm25 = [
        [position[r.memory_id or ""] for r in memory.recall(q, filters, top_k)] for q, _ in QUERIES
    ]
    newest_first = [
        [
            i
            for i in reversed(range(len(MEMORIES)))
            if set(terms(q)[:MAX_QUERY_TERMS]) & set(terms(MEMORIES[i]))
        ]
        for q, _ in QUERIES
    ]
    return bm25, newest_first
