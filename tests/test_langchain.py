"""RedisHistoryChatMessageHistory meets LangChain's chat history, its messages and its chains."""

from __future__ import annotations

import asyncio
import base64
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
    InvalidMessageError,
    Message,
    RedisHistory,
    RoleOrderError,
    ToolCall,
    ToolPairingError,
    UnsupportedPartError,
)
from redis_history.context import render
from redis_history.integrations.langchain import (
    LANGCHAIN,
    RedisHistoryChatMessageHistory,
    from_langchain,
    to_langchain,
)
from redis_history.parts import AudioPart, FilePart, ImagePart, TextPart

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


def chat(
    clients: tuple[Any, Any], conversation: str = "lc-1", **options: Any
) -> RedisHistoryChatMessageHistory:
    sync, aio = clients
    return RedisHistoryChatMessageHistory(
        RedisHistory(sync, conversation),
        async_history=AsyncRedisHistory(aio, conversation),
        **options,
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
    """The store's rules hold: a ToolMessage without its call, or a late SystemMessage,
    refuses the whole batch."""
    history = chat(clients)
    history.add_messages([HumanMessage("hi")])
    with pytest.raises(ToolPairingError):
        history.add_messages([AIMessage("ok"), ToolMessage("x", tool_call_id="nope")])
    with pytest.raises(RoleOrderError):
        history.add_messages([AIMessage("ok"), HumanMessage("a"), SystemMessage("late")])
    assert history.messages == [HumanMessage("hi")]


def test_a_user_may_send_two_messages_before_the_answer(clients: tuple[Any, Any]) -> None:
    """By default the lenient role rules: two human messages in a row, and two AI messages in
    a row, are stored, sync and async; an orphan tool result and an AI message before any
    human one are still refused."""
    history = chat(clients)
    assert history.history is not None
    assert history.async_history is not None
    assert history.history.options.roles == history.async_history.options.roles == "lenient"
    with pytest.raises(RoleOrderError, match="may not follow nothing"):
        history.add_ai_message("How can I help?")
    history.add_user_message("a")
    history.add_user_message("b")
    expected: list[BaseMessage] = [HumanMessage("a"), HumanMessage("b"), HumanMessage("c")]
    expected += [AIMessage("one"), AIMessage("two")]

    async def scenario() -> None:
        await history.aadd_messages([HumanMessage("c")])
        history.add_messages([AIMessage("one"), AIMessage("two")])
        with pytest.raises(ToolPairingError, match="answers no open tool call"):
            await history.aadd_messages([ToolMessage("orphan", tool_call_id="nobody-asked")])
        assert await history.aget_messages() == expected
        await clients[1].aclose()

    asyncio.run(scenario())
    assert history.messages == expected
    request = render(history.history.snapshot(), "anthropic")
    assert [turn["role"] for turn in request["messages"]] == ["user", "assistant"]
    assert [block["text"] for block in request["messages"][0]["content"]] == ["a", "b", "c"]


def test_strict_role_rules_are_one_argument_away(clients: tuple[Any, Any]) -> None:
    """``roles="strict"`` refuses a second human message in a row; a strict history given to a
    lenient chat history writes leniently, and from_url takes ``roles`` too."""
    strict = chat(clients, "lc-strict", roles="strict")
    strict.add_user_message("a")
    with pytest.raises(RoleOrderError, match="may not follow user"):
        strict.add_user_message("b")
    assert strict.messages == [HumanMessage("a")]
    given = RedisHistory(clients[0], "lc-strict", roles="strict")
    lenient = RedisHistoryChatMessageHistory(given)
    lenient.add_user_message("b")
    assert given.snapshot()[-1].content == "b"
    with pytest.raises(ValueError, match="'strict' or 'lenient'"):
        RedisHistoryChatMessageHistory(given, roles="loose")  # type: ignore[arg-type]


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


# --- images, files and audio --------------------------------------------------------------

PNG = (
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + (64).to_bytes(4, "big") * 2 + bytes(range(256)) * 8
)  # a 64 x 64 PNG's header, then bytes
PDF = b"%PDF-1.7\n" + b"stream" * 50
WAV = b"RIFF....WAVEfmt " * 8
B64_PNG = base64.b64encode(PNG).decode()
B64_PDF = base64.b64encode(PDF).decode()
B64_WAV = base64.b64encode(WAV).decode()
MP3 = b"ID3\x04\x00\x00\x00\x00\x00\x00" * 8
B64_MP3 = base64.b64encode(MP3).decode()

MEDIA_TURN: list[BaseMessage] = [
    HumanMessage(
        [
            {"type": "text", "text": "Compare the chart with the report."},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{B64_PNG}"}},
            {"type": "image", "source_type": "url", "url": "https://example.com/map.png"},
            {
                "type": "file",
                "base64": B64_PDF,
                "mime_type": "application/pdf",
                "id": "lc_f1",
                "extras": {"filename": "report.pdf"},
            },
            {"type": "audio", "base64": B64_WAV, "mime_type": "audio/wav"},
            {"type": "text-plain", "text": "notes: 東京", "mime_type": "text/plain"},
        ],
        id="h1",
    ),
    AIMessage(
        "", tool_calls=[{"name": "screenshot", "args": {}, "id": "call_s", "type": "tool_call"}]
    ),
    ToolMessage(
        [
            "The page:",
            {"type": "image", "source_type": "base64", "data": B64_PNG, "mime_type": "image/png"},
            {"type": "file", "file_id": "file-abc", "mime_type": "application/pdf"},
        ],
        tool_call_id="call_s",
    ),
    AIMessage("The chart matches page 2."),
]


def test_images_files_and_audio_are_stored_as_parts_and_read_back_equal(
    clients: tuple[Any, Any],
) -> None:
    """OpenAI-style, v0 and v1 blocks in a human and a tool message become the stored
    messages' parts, read back equal, and their bytes are stored once."""
    history = chat(clients)
    history.add_messages(MEDIA_TURN)
    assert history.messages == MEDIA_TURN
    assert history.history is not None
    stored = history.history.snapshot()
    assert stored[0].parts == (
        TextPart(text="Compare the chart with the report."),
        ImagePart(data=PNG, media_type="image/png"),
        ImagePart(url="https://example.com/map.png"),
        FilePart(data=PDF, media_type="application/pdf", filename="report.pdf"),
        AudioPart(data=WAV, format="wav"),
        FilePart(data="notes: 東京".encode(), media_type="text/plain"),
    )
    assert stored[2].parts == (
        TextPart(text="The page:"),
        ImagePart(data=PNG, media_type="image/png"),
        FilePart(file_id="file-abc", media_type="application/pdf"),
    )
    assert stored[0].text == "Compare the chart with the report."
    raw = b"".join(clients[0].lrange(history.history.keys.msgs, 0, -1))
    assert raw.count(B64_PDF[8:200].encode()) == 1  # in the part, not again in the kept copy
    assert raw.count(b"Compare the chart") == 1


def test_a_history_written_through_langchain_reaches_every_model_api(
    clients: tuple[Any, Any],
) -> None:
    """The image a HumanMessage carried is an Anthropic image block, a chat image_url and a
    Responses input_image; the tool's screenshot an image in Anthropic's tool_result. Audio,
    which Anthropic takes none of, is refused by name."""
    history = chat(clients)
    human = HumanMessage(
        [block for block in MEDIA_TURN[0].content if "audio" not in str(block)], id="h1"
    )
    history.add_messages([human, *MEDIA_TURN[1:]])
    assert history.history is not None
    stored = history.history.snapshot()
    anthropic = render(stored, "anthropic")["messages"]
    assert anthropic[0]["content"][1] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": B64_PNG},
    }
    assert anthropic[0]["content"][3]["source"]["media_type"] == "application/pdf"
    assert anthropic[2]["content"][0]["content"][1]["type"] == "image"
    chat_request = render(stored[:1], "openai_chat")["messages"][0]
    assert chat_request["content"][1]["image_url"]["url"] == f"data:image/png;base64,{B64_PNG}"
    responses = render(stored, "openai_responses")["input"]
    assert responses[0]["content"][2] == {
        "type": "input_image",
        "image_url": "https://example.com/map.png",
        "detail": "auto",
    }
    assert responses[2]["output"][1]["type"] == "input_image"
    with pytest.raises(UnsupportedPartError, match="audio"):
        render([from_langchain(MEDIA_TURN[0])], "anthropic")


def test_parts_written_by_others_read_as_standard_blocks() -> None:
    """A message with parts stored without LangChain (parsed from a request, another pod) reads
    as LangChain's v1 standard blocks, which map back to the same parts."""
    parts = (
        TextPart(text="What is this?"),
        ImagePart(data=PNG, media_type="image/png", detail="low"),
        FilePart(url="https://example.com/r.pdf", filename="r.pdf"),
        AudioPart(data=MP3, format="mp3"),
    )
    message = to_langchain(Message(role="user", parts=parts))
    assert message == HumanMessage(
        [
            {"type": "text", "text": "What is this?"},
            {
                "type": "image",
                "base64": B64_PNG,
                "mime_type": "image/png",
                "extras": {"detail": "low"},
            },
            {"type": "file", "url": "https://example.com/r.pdf", "extras": {"filename": "r.pdf"}},
            {"type": "audio", "base64": B64_MP3, "mime_type": "audio/mpeg"},
        ]
    )
    assert from_langchain(message).parts == parts
    screenshot = Message.tool(["page", ImagePart(url="https://x/s.png")], tool_call_id="c1")
    assert to_langchain(screenshot) == ToolMessage(
        [{"type": "text", "text": "page"}, {"type": "image", "url": "https://x/s.png"}],
        tool_call_id="c1",
    )


def test_messages_stored_before_parts_read_as_they_did(clients: tuple[Any, Any]) -> None:
    """A message stored when the image was kept in the metadata alone (text content, no
    parts) reads back as the same LangChain message."""
    content: list[Any] = [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
    ]
    old = Message.user("What is this?", metadata={LANGCHAIN: {"content": content, "id": "h0"}})
    history = chat(clients)
    assert history.history is not None
    history.history.append(old)
    assert history.messages == [HumanMessage(content, id="h0")]


def test_blocks_no_part_holds_stay_in_the_kept_copy() -> None:
    """A video block, or an AI message's image, is kept for LangChain only; a block a part
    cannot hold as it is raises, naming the block."""
    video = {"type": "video", "url": "https://example.com/v.mp4"}
    human = HumanMessage(["Look", video, {"type": "image", "url": "https://x/y.png"}])
    stored = from_langchain(human)
    assert stored.parts == (TextPart(text="Look"), ImagePart(url="https://x/y.png"))
    assert to_langchain(stored) == human
    drawn = AIMessage([{"type": "image", "base64": B64_PNG, "mime_type": "image/png"}])
    assert from_langchain(drawn).parts == ()
    assert to_langchain(from_langchain(drawn)) == drawn
    with pytest.raises(InvalidMessageError, match="content block 1 of a LangChain human message"):
        from_langchain(HumanMessage(["x", {"type": "image", "base64": B64_PNG}]))
