"""Sample conversations shared by the compaction, job, budget and manager tests."""

from __future__ import annotations

import random

from hypothesis import strategies as st

from redis_history import Message, ToolCall
from redis_history.store.core import STAGE_BYTES

BIG_OUTPUT = "x" * 5000
"""A tool result large enough for the tool-output elider (and not a plug-in of any kind)."""


def incompressible(n: int, seed: int = 7) -> str:
    """``n`` random hex digits: compressed, they keep about half their bytes (a text of
    one letter repeated shrinks to a few dozen), so a store's large texts stay large."""
    return random.Random(seed).randbytes(n // 2 + 1).hex()[:n]


STAGED_TEXT = incompressible(3 * STAGE_BYTES)
"""A text whose envelope is staged (over ``_core.STAGE_BYTES``), compressed or not."""


def turns(n: int) -> list[Message]:
    """A system prompt, then ``n`` turns: a question, a tool call, its result, the answer."""
    out: list[Message] = [Message.system("be helpful")]
    for i in range(n):
        out += [
            Message.user(f"q{i}"),
            Message.assistant("", tool_calls=[ToolCall(id=f"c{i}", name="f")]),
            Message.tool(f"r{i}", tool_call_id=f"c{i}"),
            Message.assistant(f"a{i}"),
        ]
    return out


@st.composite
def conversations(draw: st.DrawFn, *, max_turns: int = 6) -> list[Message]:
    """A history the store accepts, with texts of very different sizes: an optional system
    prompt, then turns of a user message, tool steps (parallel calls answered in any order)
    and a reply; the last turn may stop after its user message or a tool step."""
    serial = iter(range(10_000))
    texts = st.text(max_size=40) | st.text(alphabet="abc 字😀{}", min_size=100, max_size=600)
    out: list[Message] = []
    if draw(st.booleans()):
        out.append(Message.system(draw(texts)))
    n_turns = draw(st.integers(0, max_turns))
    for t in range(n_turns):
        out.append(Message.user(draw(texts)))
        for _ in range(draw(st.integers(0, 2))):
            ids = [f"c{next(serial)}" for _ in range(draw(st.integers(1, 3)))]
            calls = [ToolCall(id=i, name="lookup", arguments={"q": draw(texts)}) for i in ids]
            out.append(Message.assistant(draw(texts), tool_calls=calls))
            out += [Message.tool(draw(texts), tool_call_id=i) for i in draw(st.permutations(ids))]
        if t < n_turns - 1 or draw(st.booleans()):
            out.append(Message.assistant(draw(texts)))
    return out
