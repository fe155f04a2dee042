"""A small labelled set for long-term memory: one user's memories, stored in this order, and
questions with the memories that answer them (by position). The answers were stored first,
and later memories share the questions' words, so newest-first ranking alone does poorly."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

import snowballstemmer

from redis_history.memory import MemoryFilters, merging
from redis_history.memory.redis_memory import (
    MAX_QUERY_TERMS,
    STOPWORDS,
    RedisLongTermMemory,
    terms,
)

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
    "Cooks dinner for the family on Sundays, usually a slow-roasted chicken.",  # 50
    "Saving for a house deposit; puts 600 euros into a savings account every month.",
    "Swims twice a week at the municipal pool to help with back pain.",
    "Has been renovating the kitchen since October; the new cabinets arrive in January.",
    "Wrote the billing service in Rust and maintains its integration tests.",
    "Photographs birds on weekends with a 400 mm lens.",  # 55
    "Asked for a photography course on weekends.",
    "Asked whether the swimming pool near the office is open on Sundays.",
    "Asked for a cooking class for beginners.",
    "Asked how much a monthly savings plan costs at the bank.",
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
    ("Who does the cooking for the family on Sunday?", frozenset({50})),
    ("How much does the user save each month?", frozenset({51})),
    ("Where does the user go swimming?", frozenset({52})),
    ("When will the kitchen renovation be finished?", frozenset({53})),
    ("Which language is the billing service written in?", frozenset({54})),
    ("What does the user like photographing?", frozenset({55})),
    ("What allergies does the user have?", frozenset({1})),
    ("How are the services deployed?", frozenset({13})),
    ("Which exams has the user passed?", frozenset({8})),
    ("What time does the dog go out in the morning?", frozenset({9})),
)
"""Each question and the positions in :data:`MEMORIES` of the memories that answer it."""


def recall_at_k(ranked: list[list[int]], k: int) -> float:
    """The share of each question's answers found in its first ``k`` results, averaged."""
    total = 0.0
    for (_, relevant), got in zip(QUERIES, ranked, strict=True):
        total += len(relevant & set(got[:k])) / len(relevant)
    return total / len(QUERIES)


def top_three(
    client: Any,
    embedder: Any,
    memories: Sequence[str],
    questions: Sequence[tuple[str, frozenset[int]]],
) -> list[list[int]]:
    """Each question's top 3 as positions in ``memories``, which one user holds alone on
    ``client`` (flushed first), recalled with ``embedder`` (``None``: by keywords alone)."""
    client.flushall()
    memory = RedisLongTermMemory(client, embedder=embedder)
    owner = {"agent_id": "a", "user_id": "u"}
    ids = memory.store_many([(text, owner) for text in memories])
    position = {memory_id: i for i, memory_id in enumerate(ids)}
    who = MemoryFilters("a", "u")
    return [[position[r.memory_id or ""] for r in memory.recall(q, who, 3)] for q, _ in questions]


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


PARAPHRASE_MEMORIES: tuple[str, ...] = (
    "Has not eaten meat or fish since 2018.",  # 0
    "Prefers an aisle seat on long-haul flights.",
    "Plays bass guitar in a jazz band on Thursday evenings.",
    "Their dog, a border collie called Pixel, needs a walk at 7 am.",
    "Mother lives in Porto and visits every August.",
    "Is allergic to peanuts.",  # 5
    "Works night shifts as a nurse at the city hospital.",
    "Drives an electric hatchback and charges it at the office.",
    "Speaks Spanish fluently and is learning Mandarin.",
    "Rents a two-bedroom flat with a balcony downtown.",
    "Has two teenage sons who play football.",  # 10
    "Runs five kilometres before breakfast most mornings.",
    "Saves twenty percent of each salary for retirement.",
    "Hates cold weather and winters in the north.",
    "Reads detective novels before sleeping.",
    "Takes the tram to work every day.",  # 15
    "Celebrates a birthday on the ninth of March.",
    "Grows tomatoes and basil on the terrace.",
    "Wears glasses for reading small print.",
    "Married to Ana, an architect.",
    "Drinks three espressos a day.",  # 20
    "Volunteers at an animal shelter on Sundays.",
    "Uses a Linux laptop for programming.",
    "Had knee surgery last year and avoids stairs.",
)
"""One user's memories for questions that share no content word with the one they need."""

PARAPHRASE_QUERIES: tuple[tuple[str, frozenset[int]], ...] = (
    ("Should I order them a steak?", frozenset({0})),
    ("Window or corridor on the plane?", frozenset({1})),
    ("What instrument do they perform with?", frozenset({2})),
    ("When must the puppy go outside?", frozenset({3})),
    ("Where is the family home in Portugal?", frozenset({4})),
    ("Can they eat a satay sauce?", frozenset({5})),
    ("What is their job?", frozenset({6})),
    ("What kind of vehicle do they own?", frozenset({7})),
    ("Which languages can they talk?", frozenset({8})),
    ("Where do they live?", frozenset({9})),
    ("Do they have kids?", frozenset({10})),
    ("Are they into jogging?", frozenset({11})),
    ("How do they plan for their pension?", frozenset({12})),
    ("Would they enjoy a ski holiday?", frozenset({13})),
    ("What books do they like?", frozenset({14})),
    ("How do they commute?", frozenset({15})),
    ("When should I send a card with wishes?", frozenset({16})),
    ("Do they do any gardening?", frozenset({17})),
    ("Is their eyesight good?", frozenset({18})),
    ("Who is their spouse?", frozenset({19})),
    ("How much caffeine do they have?", frozenset({20})),
    ("Do they help any charity?", frozenset({21})),
    ("Which operating system is on their computer?", frozenset({22})),
    ("Can they climb steps easily?", frozenset({23})),
)
"""Each question and the position in :data:`PARAPHRASE_MEMORIES` of its memory."""


def textbook_top(
    memories: Sequence[str], questions: Sequence[tuple[str, frozenset[int]]], k: int
) -> list[list[int]]:
    """Each question's top ``k`` by a textbook Okapi BM25 (k1 1.2, b 0.75, Lucene's idf) over
    lower-cased words less the stop list and single letters, stemmed by Snowball's English
    stemmer, computed here on the texts alone: the ranking the memory's keyword recall is
    held to. Equal scores go to the later memory, as the memory's newest-first order does."""
    stem = snowballstemmer.stemmer("english")

    def words(text: str) -> list[str]:
        found = [w for w in re.findall(r"\w+", text.lower()) if w not in STOPWORDS]
        kept = [w for w in found if w.strip("_") and not (len(w) == 1 and w.isalpha())]
        return [stem.stemWord(w) if w.isascii() else w for w in kept]

    docs = [Counter(words(text)) for text in memories]
    lengths = [sum(doc.values()) for doc in docs]
    mean = sum(lengths) / len(docs)
    df = Counter(term for doc in docs for term in doc)
    out = []
    for question, _ in questions:
        wanted = set(words(question))
        scores = []
        for i, doc in enumerate(docs):
            score = 0.0
            for term in wanted & doc.keys():
                idf = math.log(1 + (len(docs) - df[term] + 0.5) / (df[term] + 0.5))
                tf = doc[term]
                score += idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * lengths[i] / mean))
            if score > 0:
                scores.append((score, i))
        scores.sort(key=lambda pair: (-round(pair[0], 9), -pair[1]))
        out.append([i for _, i in scores[:k]])
    return out


SAME_FACT_PAIRS: tuple[tuple[str, str], ...] = (
    ("Prefers an aisle seat on long flights.", "Likes sitting on the aisle when flying long-haul."),
    ("Is allergic to peanuts.", "Has a peanut allergy."),
    ("Lives in Porto.", "Their home is in Porto."),
    ("Works as a backend engineer.", "Is a backend software engineer by profession."),
    ("Has a daughter named Mia.", "Mia is their daughter."),
    ("Runs a half marathon every spring.", "Every spring they run a half marathon."),
    ("Uses Neovim as their code editor.", "Their editor of choice is Neovim."),
    ("Is vegetarian.", "Does not eat meat; vegetarian diet."),
    ("Is learning Japanese.", "Currently studying the Japanese language."),
    ("Has a border collie called Pixel.", "Their dog Pixel is a border collie."),
    ("Prefers meetings in the morning.", "Likes to schedule meetings before noon."),
    ("Favourite food is Georgian cuisine.", "Loves Georgian food more than any other."),
    ("Passport expires in March 2027.", "Their passport is valid until March 2027."),
    ("Deploys services on Kubernetes.", "Runs their services on Kubernetes clusters."),
    ("Mother lives in Lisbon.", "Their mum lives in Lisbon."),
    ("Takes cetirizine for hay fever.", "Uses cetirizine against hay fever."),
    (
        "Budget for the Japan trip is 4,000 euros.",
        "Plans to spend 4,000 euros on the trip to Japan.",
    ),
    ("Plays bass guitar in a jazz band.", "Is the bass player of a jazz band."),
    ("Drinks coffee without sugar.", "Takes their coffee with no sugar."),
    ("Wakes up at 6 am every day.", "Gets up at six in the morning daily."),
    ("Is afraid of flying.", "Has a fear of flying."),
    ("Owns an electric car.", "Drives an electric car they own."),
    ("Speaks fluent German.", "Is fluent in German."),
    ("Prefers tea over coffee.", "Would rather drink tea than coffee."),
    ("Has two cats.", "Owns two cats."),
    ("Works from home on Fridays.", "On Fridays they work remotely from home."),
    ("Is saving for a house.", "Puts money aside to buy a house."),
    ("Dislikes spicy food.", "Does not like spicy dishes."),
    ("Goes to the gym three times a week.", "Works out at the gym three times weekly."),
    ("Their birthday is on 12 May.", "Was born on the 12th of May."),
)
"""Two wordings of one fact each: a memory with ``merge_similar`` should merge the second
into the first."""

OTHER_FACT_PAIRS: tuple[tuple[str, str], ...] = (
    ("Prefers an aisle seat on long flights.", "Prefers a window seat on trains."),
    ("Is allergic to peanuts.", "Is allergic to cats."),
    ("Lives in Porto.", "Lives in Lisbon."),
    ("Works as a backend engineer.", "Works as a frontend designer."),
    ("Has a daughter named Mia.", "Has a son named Leo."),
    ("Runs a half marathon every spring.", "Swims in the sea every summer."),
    ("Uses Neovim as their code editor.", "Uses VS Code as their code editor."),
    ("Is vegetarian.", "Eats fish twice a week."),
    ("Is learning Japanese.", "Is learning the piano."),
    ("Has a border collie called Pixel.", "Has a cat called Miso."),
    ("Prefers meetings in the morning.", "Blocks Friday afternoons for deep work."),
    ("Favourite food is Georgian cuisine.", "Favourite drink is Georgian wine."),
    ("Passport expires in March 2027.", "Driving licence expires in June 2030."),
    ("Deploys services on Kubernetes.", "Monitors services with Prometheus."),
    ("Mother lives in Lisbon.", "Brother lives in Berlin."),
    ("Takes cetirizine for hay fever.", "Takes vitamin D in winter."),
    ("Budget for the Japan trip is 4,000 euros.", "Budget for the new laptop is 1,500 euros."),
    ("Plays bass guitar in a jazz band.", "Sings in a choir on Sundays."),
    ("Drinks coffee without sugar.", "Drinks green tea in the afternoon."),
    ("Wakes up at 6 am every day.", "Goes to bed at 11 pm."),
    ("Is afraid of flying.", "Is afraid of spiders."),
    ("Owns an electric car.", "Rides a bike to work."),
    ("Speaks fluent German.", "Speaks a little Spanish."),
    ("Prefers tea over coffee.", "Prefers beer over wine."),
    ("Has two cats.", "Has two children."),
    ("Works from home on Fridays.", "Works in the office on Mondays."),
    ("Is saving for a house.", "Is paying off a car loan."),
    ("Dislikes spicy food.", "Dislikes loud music."),
    ("Goes to the gym three times a week.", "Goes hiking once a month."),
    ("Their birthday is on 12 May.", "Their wedding anniversary is on 3 June."),
)
"""Two facts of one topic each, often in the same words: both should be kept."""


UPDATE_PAIRS: tuple[tuple[str, str], ...] = (
    ("Lives in Lisbon.", "Lives in Porto."),
    ("Works at Initech.", "Works at Globex."),
    ("Has 2 children.", "Has 3 children."),
    ("Drives a Toyota.", "Drives a Tesla."),
    ("Their manager is Alice.", "Their manager is Bob."),
    ("Is 34 years old.", "Is 35 years old."),
    ("Their phone number ends in 4411.", "Their phone number ends in 9020."),
    ("Is learning Japanese.", "Is learning Korean."),
    ("Their favourite team is Benfica.", "Their favourite team is Sporting."),
    ("Their flight to Tokyo leaves on 3 May.", "Their flight to Tokyo leaves on 7 May."),
    ("Uses Vim as their editor.", "Now uses Emacs as their editor."),
    ("Their dentist is Dr Silva.", "Their dentist is Dr Costa."),
    ("Their partner is called Ana.", "Their partner is called Rita."),
    ("Runs 10 km every week.", "Runs 25 km every week."),
    ("Their gym membership ends in June.", "Their gym membership ends in September."),
)
"""Pairs of a fact and the fact that updates it (the second is stored after the first)."""


def _cosine(embedder: Any, first: str, second: str) -> float:
    a, b = embedder.embed([first, second])
    cosine = sum(x * y for x, y in zip(a, b, strict=True))
    return float(cosine / (sum(x * x for x in a) * sum(y * y for y in b)) ** 0.5)


def decisions(embedder: Any, pairs: Sequence[tuple[str, str]]) -> Counter[str | None]:
    """How often :func:`merging.decide` merges, updates or keeps apart the second text of
    each pair, stored after the first."""
    return Counter(
        merging.decide(second, first, _cosine(embedder, first, second)) for first, second in pairs
    )


def merge_decisions(embedder: Any) -> tuple[float, float]:
    """Precision and recall of merging (:func:`merging.decide`) on the labelled pairs: a
    merge is right for a pair of one fact's wordings, wrong for any other pair."""
    right = decisions(embedder, SAME_FACT_PAIRS)["merge"]
    wrong = decisions(embedder, OTHER_FACT_PAIRS + UPDATE_PAIRS)["merge"]
    return right / max(right + wrong, 1), right / len(SAME_FACT_PAIRS)


def update_decisions(embedder: Any) -> tuple[float, float]:
    """Precision and recall of superseding (:func:`merging.decide`): an update is right for
    a pair of :data:`UPDATE_PAIRS`, wrong for a pair of one fact's wordings; a pair of
    :data:`OTHER_FACT_PAIRS` counts neither way (some are updates, "Lives in Porto." after
    "Lives in Lisbon.", some not)."""
    right = decisions(embedder, UPDATE_PAIRS)["update"]
    wrong = decisions(embedder, SAME_FACT_PAIRS)["update"]
    return right / max(right + wrong, 1), right / len(UPDATE_PAIRS)
