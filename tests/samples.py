"""Sample conversations shared by the compaction and job tests."""

from __future__ import annotations

from redis_history import Message, ToolCall

BIG_OUTPUT = "x" * 5000
"""A tool result large enough for the tool-output elider (and not a plug-in of any kind)."""


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
