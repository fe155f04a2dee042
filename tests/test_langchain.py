"""RedisHistoryChatMessageHistory meets LangChain's chat history, its messages and its chains."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import fakeredis
import pytest
import redis
import redis.asyncio

pytest.importorskip("langchain_core", reason="the LangChain adapter needs langchain-core")

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables.history import RunnableWithMessageHistory

from redis_history import (
    AsyncRedisHistory,
    Message,
    RedisHistory,
    RoleOrderError,
    ToolCall,
    ToolPairingError,
)
from redis_history.integrations.langchain import (
    LANGCHAIN,
    RedisHistoryChatMessageHistory,
    from_langchain,
    to_langchain,
)

CONVERSATION: list[BaseMessage] = [
    SystemMessage("You are a travel agent."),
    HumanMessage("Weather in Lisbon and Porto?", id="h1"),
    AIMessage(
        content=[{"type": "text", "text": "Let me check."}],
        tool_calls=[
            {"name": "weather", "args": {"city": "Lisbon"}, "id": "call_l", "type": "tool_call"},
            {"name": "weather", "args": {"city": "Porto"}, "id": "call_p", "type": "tool_call"},
        ],
        id="run-1",
        response_metadata={"model_name": "fake", "finish_reason": "tool_calls"},
        usage_metadata={"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
    ),
    ToolMessage('{"temp_c": 19}', tool_call_id="call_p", name="weather", artifact={"raw": 19}),
    ToolMessage("timeout", tool_call_id="call_l", status="error"),
    AIMessage("Porto: 19 °C; Lisbon did not answer.", additional_kwargs={"refusal": None}),
    HumanMessage("Thanks!", name="ana"),
    AIMessageChunk(content="You're welcome.", id="run-2"),
]


@pytest.fixture(params=["fakeredis", pytest.param("redis", marks=pytest.mark.real_redis)])
def clients(request: pytest.FixtureRequest) -> Iterator[tuple[Any, Any]]:
    """A sync and an asyncio client on one server: fakeredis, or the flushed redis-server."""
    if request.param == "fakeredis":
        server = fakeredis.FakeServer()
        yield fakeredis.FakeRedis(server=server), fakeredis.FakeAsyncRedis(server=server)
        return
    url = request.getfixturevalue("redis_url")
    yield request.getfixturevalue("real_redis"), redis.asyncio.Redis.from_url(url)


def chat(clients: tuple[Any, Any], conversation: str = "lc-1") -> RedisHistoryChatMessageHistory:
    sync, aio = clients
    return RedisHistoryChatMessageHistory(
        RedisHistory(sync, conversation), async_history=AsyncRedisHistory(aio, conversation)
    )


def test_it_is_a_langchain_chat_message_history() -> None:
    """It is LangChain's base class, with the sync and async methods it defines."""
    history = chat((fakeredis.FakeRedis(), fakeredis.FakeAsyncRedis()))
    assert isinstance(history, BaseChatMessageHistory)
    history.add_user_message("hi")
    history.add_ai_message("hello")
    assert history.messages == [HumanMessage("hi"), AIMessage("hello")]


def test_every_message_type_reads_back_equal(clients: tuple[Any, Any]) -> None:
    """System, human, AI with tool calls, list content and metadata, tool results with an
    artifact and an error status, a named human and a chunk: equal after a round trip."""
    history = chat(clients)
    history.add_messages(CONVERSATION)
    assert history.messages == CONVERSATION
    assert [type(m) for m in history.messages] == [type(m) for m in CONVERSATION]
    stored = history.history.snapshot() if history.history else []
    assert [m.role for m in stored] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]
    assert stored[2].content == "Let me check."
    assert stored[2].tool_calls == (
        ToolCall(id="call_l", name="weather", arguments={"city": "Lisbon"}),
        ToolCall(id="call_p", name="weather", arguments={"city": "Porto"}),
    )
    assert stored[3].tool_call_id == "call_p"
    assert LANGCHAIN not in stored[0].metadata  # nothing beyond the store's own fields


def test_the_async_methods_use_the_asyncio_history(clients: tuple[Any, Any]) -> None:
    """aadd_messages, aget_messages and aclear run on the AsyncRedisHistory and see what the
    sync methods wrote (one conversation)."""
    history = chat(clients)
    history.add_messages(CONVERSATION[:2])

    async def scenario() -> None:
        await history.aadd_messages(CONVERSATION[2:])
        assert await history.aget_messages() == CONVERSATION
        await history.aclear()
        assert await history.aget_messages() == []
        await clients[1].aclose()

    asyncio.run(scenario())
    assert history.messages == []


def test_one_history_alone_serves_both_kinds_of_call() -> None:
    """With only a RedisHistory the async methods run in an executor; with only an
    AsyncRedisHistory the sync ones say to use the async ones."""
    sync_only = RedisHistoryChatMessageHistory(RedisHistory(fakeredis.FakeRedis(), "c"))

    async def scenario() -> list[BaseMessage]:
        await sync_only.aadd_messages([HumanMessage("hi")])
        return await sync_only.aget_messages()

    assert asyncio.run(scenario()) == [HumanMessage("hi")]
    async_only = RedisHistoryChatMessageHistory(
        async_history=AsyncRedisHistory(fakeredis.FakeAsyncRedis(), "c")
    )
    with pytest.raises(TypeError, match="use the a\\* methods"):
        async_only.add_messages([HumanMessage("hi")])
    with pytest.raises(ValueError, match="different conversations"):
        RedisHistoryChatMessageHistory(
            RedisHistory(fakeredis.FakeRedis(), "a"),
            async_history=AsyncRedisHistory(fakeredis.FakeAsyncRedis(), "b"),
        )


def test_add_messages_is_atomic_and_checked(clients: tuple[Any, Any]) -> None:
    """The store's rules hold: a ToolMessage without its call, or two human messages in a
    row, refuse the whole batch."""
    history = chat(clients)
    history.add_messages([HumanMessage("hi")])
    with pytest.raises(ToolPairingError):
        history.add_messages([AIMessage("ok"), ToolMessage("x", tool_call_id="nope")])
    with pytest.raises(RoleOrderError):
        history.add_messages([AIMessage("ok"), HumanMessage("a"), HumanMessage("b")])
    assert history.messages == [HumanMessage("hi")]


def test_mapping_refuses_what_the_store_cannot_pair() -> None:
    """A tool call without an id, or a chat role the store has not, is a ValueError."""
    with pytest.raises(ValueError, match="no id"):
        from_langchain(
            AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": None, "type": "tool_call"}])
        )
    with pytest.raises(ValueError, match="no role"):
        from_langchain(ChatMessage(content="x", role="narrator"))
    assert from_langchain(ChatMessage(content="x", role="user")).role == "user"
    assert to_langchain(from_langchain(ChatMessage(content="x", role="user"))) == ChatMessage(
        content="x", role="user"
    )


def test_messages_written_by_others_read_as_their_role() -> None:
    """A compaction summary or a message another pod wrote reads as the LangChain message of
    its role."""
    summary = to_langchain(Message.system("Summary: ..."))
    assert summary == SystemMessage("Summary: ...")
    call = Message.assistant("", tool_calls=[ToolCall(id="c", name="f", arguments={"a": 1})])
    assert to_langchain(call) == AIMessage(
        "", tool_calls=[{"name": "f", "args": {"a": 1}, "id": "c", "type": "tool_call"}]
    )


# langchain-core 1.x deprecates RunnableWithMessageHistory for LangGraph's persistence; it is
# still what LangChain chains use a BaseChatMessageHistory through.
@pytest.mark.filterwarnings("ignore:RunnableWithMessageHistory is deprecated")
def test_runnable_with_message_history_keeps_the_conversation(clients: tuple[Any, Any]) -> None:
    """A RunnableWithMessageHistory chain against a fake chat model: each turn reads the
    stored history into the prompt and appends the question and the answer, sync and async."""
    model = GenericFakeChatModel(
        messages=iter([AIMessage("Lisbon.", id="r1"), AIMessage("Porto, then.", id="r2")])
    )
    prompt = ChatPromptTemplate.from_messages(
        [("system", "You are a travel agent."), MessagesPlaceholder("history"), ("human", "{q}")]
    )
    seen: list[list[BaseMessage]] = []

    def record(value: Any) -> Any:
        seen.append(value.to_messages())
        return value

    sessions: dict[str, RedisHistoryChatMessageHistory] = {}

    def session(session_id: str) -> RedisHistoryChatMessageHistory:
        return sessions.setdefault(session_id, chat(clients, session_id))

    chain = RunnableWithMessageHistory(
        prompt | record | model,
        session,
        input_messages_key="q",
        history_messages_key="history",
    )
    config: Any = {"configurable": {"session_id": "trip"}}
    assert chain.invoke({"q": "Where to?"}, config=config).content == "Lisbon."

    async def second() -> Any:
        answer = await chain.ainvoke({"q": "And else?"}, config=config)
        await clients[1].aclose()
        return answer

    assert asyncio.run(second()).content == "Porto, then."
    stored = sessions["trip"].messages
    assert [(type(m), m.content) for m in stored] == [
        (HumanMessage, "Where to?"),
        (AIMessage, "Lisbon."),
        (HumanMessage, "And else?"),
        (AIMessage, "Porto, then."),
    ]
    assert seen[1][1:3] == stored[:2]  # the second turn's prompt held the first turn
