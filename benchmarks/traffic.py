"""Seeded agent traffic for the benchmarks: realistic, chat and tool-heavy mixes of turns, and a
short-message run.

The realistic mix is built turn by turn, the way an agent loop writes it: a user
message (50-500 characters); in about half the turns one or two rounds of an
assistant message calling one to three tools, each call answered by a tool result
of 1-20 KB of JSON; then the assistant's answer (200-2,000 characters). Sizes are
drawn log-uniformly inside those ranges (real traffic has more short messages
than long ones). About 15% of the user and assistant texts carry a fenced code
block and about 15% are CJK (Chinese and Japanese), as are some tool results.

The chat mix is the realistic mix's turns without their tool rounds: a user message and the
assistant's answer (about 600 bytes a message). The tool-heavy mix is whole turns of an agent
that calls a tool every time: a short user message, an assistant tool call, a tool result of
2-40 KB (log-uniform) of API JSON, HTML, log lines or source code, and a medium reply (about
3.6 KB a message on average).

The short run alternates user and assistant messages of about 48 characters (the
message bench_core.py appends), so that the cost of a round trip shows unmixed.

Messages are plain, library-neutral records; each benchmark turns them into its
own store's types. ``wire_json`` is the chat-completions form, compact UTF-8:
what the raw-Redis floor stores.
"""

from __future__ import annotations

import json
import math
import random
import statistics
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "Call",
    "Msg",
    "Turn",
    "chat_turns",
    "flatten",
    "mix_stats",
    "realistic_turns",
    "short_turns",
    "stats_table",
    "tool_heavy_turns",
    "varied_turns",
]

Role = Literal["user", "assistant", "tool"]

_WORDS = (  # noqa: SIM905  (a word list reads better as text)
    "the a to of and in is for on that with as it this by be are from at or an can will "
    "not your you we they have has was were which when if then than more most some any "
    "each other into over after before between under about through while where how what "
    "flight fare route airport departure arrival layover seat window aisle baggage refund "
    "invoice customer account order shipment warehouse delivery status tracking address "
    "query result table column index latency request response server client cache queue "
    "worker deploy build test release version branch commit review merge config setting "
    "error timeout retry limit budget token context summary history message turn prompt "
    "model reply answer question check compare cheapest fastest earliest latest cheaper "
    "morning evening tomorrow yesterday week month price total average median percent "
    "Lisbon Osaka Berlin Toronto Nairobi Santiago Seoul Madrid Oslo Denver"
).split()

_CJK = (
    "我们你他她它的了是在有不这个人上中大来到说时要就出会可也对生能而子那得于着下自之年"
    "过发后作里用道行所然家种事成方多经么去法学如都同现当没动面起看定天分还进好小部其些"
    "主样理心本前开但因只从想实日军者意无力它与长把机十民第公此已工使情明性知全三又关点"
    "正业外将两高间由问很最重并物手应战向头文体政美相见被利什二等产或新己制身果加西斯月"
    "話題会議資料確認予定変更連絡担当記録検索結果時間場所料金空港出発到着座席荷物返金"
    "ありがとうございますよろしくお願いしますこちらの内容を確認してくださいませ"
)

_CJK_PUNCT = "。、，！？"  # noqa: RUF001  (fullwidth punctuation is the point)

_EMOJI = tuple(
    "😀 😂 🙂 😉 😍 🤔 🙏 👍 👎 👀 🎉 🔥 ✅ ❌ ⚠️ 🚀 ✈️ 🏨 🌧️ ☀️ 🧳 💶 📦 🐍 🇵🇹 🇯🇵 👩‍💻 🧑🏽‍🍳".split()  # noqa: SIM905  (reads better as text)
)
"""Emoji, some of several code points (flags, variation selectors, ZWJ sequences)."""

_TOOLS = ("search_flights", "get_weather", "run_sql", "read_file", "http_get", "lookup_order")

_CODE_LINES = (
    "def {w}_{v}(client, {w}_id: str) -> dict:",
    '    """Fetch the {w} and its {v}."""',
    '    row = client.get(f"/api/{w}/{{{w}_id}}", timeout=5)',
    "    if row.status_code != 200:",
    '        raise RuntimeError(f"{w} {{{w}_id}}: {{row.status_code}}")',
    "    data = row.json()",
    '    return {{"{w}": data["{w}"], "{v}": data.get("{v}", [])}}',
    "for item in sorted(results, key=lambda r: r['{v}']):",
    "    print(item['{w}'], item['{v}'])",
    "SELECT {w}, count(*) AS n FROM {v}s GROUP BY {w} ORDER BY n DESC LIMIT 20;",
    "const {w} = await fetch(`/api/{v}/${{id}}`).then((r) => r.json());",
    "{w}_total = sum(x.{v} for x in {w}s if x.{v} is not None)",
)


@dataclass(frozen=True, slots=True)
class Call:
    """A tool call requested by an assistant message."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Msg:
    """One library-neutral chat message."""

    role: Role
    content: str
    tool_calls: tuple[Call, ...] = ()
    tool_call_id: str | None = None
    kind: str = "text"
    """What the content is: ``text``, ``code``, ``cjk``, ``json`` or ``calls`` (tool calls only);
    a tool-heavy result's is one of :data:`TOOL_RESULT_KINDS`."""
    wire: dict[str, Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["content"] = self.content or None
            out["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {
                        "name": c.name,
                        "arguments": json.dumps(c.arguments, ensure_ascii=False),
                    },
                }
                for c in self.tool_calls
            ]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        object.__setattr__(self, "wire", out)

    def wire_json(self) -> str:
        """The chat-completions message as compact UTF-8 JSON."""
        return json.dumps(self.wire, ensure_ascii=False, separators=(",", ":"))


Turn = list[Msg]


def _json_len(line: str) -> int:
    """What ``line`` and the newline after it add to a message's compact UTF-8 JSON."""
    return len(json.dumps(line, ensure_ascii=False).encode())


def flatten(turns: Iterable[Sequence[Msg]]) -> list[Msg]:
    """The turns' messages, in order."""
    return [m for turn in turns for m in turn]


class _Writer:
    """Text of a given length, deterministic for a seed."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def length(self, low: int, high: int) -> int:
        """Log-uniform in [low, high]."""
        return round(math.exp(self.rng.uniform(math.log(low), math.log(high))))

    def prose(self, n: int) -> str:
        words: list[str] = []
        size = 0
        while size < n:
            sentence = self.rng.choices(_WORDS, k=self.rng.randint(6, 18))
            text = " ".join(sentence)
            text = text[0].upper() + text[1:] + self.rng.choice((".", ".", ".", "?", ":"))
            words.append(text)
            size += len(text) + 1
        return " ".join(words)[:n]

    def cjk(self, n: int) -> str:
        out: list[str] = []
        while len(out) < n:
            out += self.rng.choices(_CJK, k=self.rng.randint(8, 30))
            out.append(self.rng.choice(_CJK_PUNCT))
        return "".join(out[:n])

    def code(self, n: int) -> str:
        intro = self.prose(max(20, n // 4))
        lines: list[str] = []
        size = len(intro) + 12
        while size < n:
            line = self.rng.choice(_CODE_LINES).format(
                w=self.rng.choice(_WORDS[60:]).lower(), v=self.rng.choice(_WORDS[60:]).lower()
            )
            lines.append(line)
            size += len(line) + 1
        return f"{intro}\n```python\n" + "\n".join(lines) + "\n```"

    def text(self, n: int) -> tuple[str, str]:
        """``n`` characters of prose, code or CJK, and which it is."""
        draw = self.rng.random()
        if draw < 0.15:
            return self.code(n)[: max(n, 40)], "code"
        if draw < 0.30:
            return self.cjk(n), "cjk"
        return self.prose(n), "text"

    def json_result(self, n_bytes: int, cjk: bool) -> str:
        """A tool result: a JSON object of about ``n_bytes`` UTF-8 bytes."""
        records: list[dict[str, Any]] = []
        doc: dict[str, Any] = {"ok": True, "query": self.prose(40), "results": records}
        size = len(json.dumps(doc, ensure_ascii=False).encode())
        i = 0
        while size < n_bytes:
            snippet = (
                self.cjk(self.rng.randint(40, 160))
                if cjk
                else self.prose(self.rng.randint(60, 300))
            )
            record = {
                "id": f"r{self.rng.randrange(10**9):09d}",
                "rank": i,
                "title": self.prose(self.rng.randint(20, 70)),
                "url": f"https://example.com/{self.rng.choice(_WORDS[60:]).lower()}/{i}",
                "score": round(self.rng.random(), 4),
                "price": {"amount": self.rng.randint(40, 2400), "currency": "EUR"},
                "tags": self.rng.sample(_WORDS[60:120], k=self.rng.randint(1, 4)),
                "snippet": snippet,
                "available": self.rng.random() < 0.8,
            }
            records.append(record)
            size += len(json.dumps(record, ensure_ascii=False).encode()) + 1
            i += 1
        doc["total"] = len(records)
        return json.dumps(doc, ensure_ascii=False)

    def html_result(self, n_bytes: int) -> str:
        """A fetched web page of ``n_bytes`` or a little more (in the message's JSON): head,
        navigation, then tables and sections until the size is reached."""
        rng = self.rng
        words = _WORDS[60:]
        title = self.prose(rng.randint(20, 60))
        out = [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>{title}</title>",
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f'<link rel="stylesheet" href="/static/css/site.{rng.randrange(16**8):08x}.css">',
            '</head><body class="page">',
            '<nav class="top"><ul>',
        ]
        out += [
            f'<li class="nav-item"><a href="/{w.lower()}/">{w.title()}</a></li>'
            for w in rng.sample(words, k=rng.randint(4, 8))
        ]
        out.append(f'</ul></nav><main id="content"><h1>{title}</h1>')
        footer = "</main><footer>&copy; 2026</footer></body></html>"
        size = sum(map(_json_len, out)) + _json_len(footer)
        while size < n_bytes:
            if rng.random() < 0.3:
                rows = [
                    f'<tr><td class="{rng.choice(words).lower()}">{self.prose(rng.randint(8, 30))}'
                    f'</td><td class="num">{rng.randint(1, 99999):,}</td><td>'
                    f'<a href="/item/{rng.randrange(10**7)}">{rng.choice(words)}</a></td></tr>'
                    for _ in range(rng.randint(3, 12))
                ]
                block = '<table class="data"><tbody>' + "".join(rows) + "</tbody></table>"
            else:
                link = f'<a href="https://example.com/{rng.choice(words).lower()}">'
                block = (
                    f'<div class="section"><h2>{self.prose(rng.randint(15, 50))}</h2>'
                    f"<p>{self.prose(rng.randint(120, 600))} {link}{rng.choice(words)}</a>.</p>"
                    "</div>"
                )
            out.append(block)
            size += _json_len(block)
        out.append(footer)
        return "\n".join(out)

    def log_result(self, n_bytes: int) -> str:
        """Log lines, ``n_bytes`` or a little more in the message's JSON: timestamps, levels,
        modules, request ids, numbers, addresses."""
        rng = self.rng
        modules = ("api.handler", "db.pool", "worker.jobs", "cache.redis", "auth", "http.client")
        levels = ("INFO",) * 6 + ("DEBUG",) * 3 + ("WARNING", "ERROR")
        at = 1_795_000_000.0 + rng.randrange(10**6)
        lines: list[str] = []
        size = 0
        while size < n_bytes:
            at += rng.expovariate(20)
            ms = int(at * 1000) % 1000
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at))
            words = self.prose(rng.randint(20, 90)).rstrip(".?:")
            line = (
                f"{stamp}.{ms:03d}Z {rng.choice(levels):<7} {rng.choice(modules)} "
                f"[req={rng.randrange(16**12):012x}] {words} "
                f"status={rng.choice((200, 200, 200, 201, 204, 404, 500))} "
                f"duration_ms={rng.uniform(0.2, 900):.1f} "
                f"peer=10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(256)}"
            )
            lines.append(line)
            size += _json_len(line)
        return "\n".join(lines)

    def source_result(self, n_bytes: int) -> str:
        """A source file read by a tool, ``n_bytes`` or a little more in the message's JSON:
        a docstring, imports, then classes and their methods."""
        rng = self.rng
        words = [w.lower() for w in _WORDS[60:]]
        out = [
            f'"""{self.prose(rng.randint(40, 160))}"""',
            "",
            "from __future__ import annotations",
            "",
        ]
        out += [f"import {w}" for w in sorted(rng.sample(words, k=rng.randint(2, 6)))]
        size = sum(map(_json_len, out))
        while size < n_bytes:
            name, other = rng.choice(words), rng.choice(words)
            lines = [
                "",
                "",
                f"class {name.title()}{other.title()}:",
                f'    """{self.prose(rng.randint(30, 120))}"""',
                "",
                f"    def __init__(self, {name}: str, {other}: int = {rng.randrange(99)}) -> None:",
                f"        self.{name} = {name}",
                f"        self.{other} = {other}",
            ]
            for _ in range(rng.randint(1, 3)):
                method = f"{rng.choice(words)}_{rng.choice(words)}"
                lines += [
                    "",
                    f"    def {method}(self, items: list[dict[str, object]]) -> int:",
                    f"        # {self.prose(rng.randint(20, 80))}",
                    "        total = 0",
                    "        for item in items:",
                    f"            if item.get({rng.choice(words)!r}) is None:",
                    "                continue",
                    f"            total += int(item[{rng.choice(words)!r}]) * {rng.randint(2, 64)}",
                    "        return total",
                ]
            for line in lines:
                out.append(line)
                size += _json_len(line)
                if size >= n_bytes:
                    break
        return "\n".join(out)

    def api_result(self, n_bytes: int) -> str:
        """An API's JSON response (pretty-printed or compact), ``n_bytes`` or a little more in
        the message's JSON: a page of records with ids, numbers, timestamps, nested objects
        and some text."""
        rng = self.rng
        words = _WORDS[60:]
        items: list[dict[str, Any]] = []
        indent = rng.choice((2, None))
        doc: dict[str, Any] = {"object": "list", "has_more": True, "data": items}
        doc["url"] = f"/v1/{rng.choice(words).lower()}s"
        while True:
            text = json.dumps(doc, indent=indent, ensure_ascii=False)
            if _json_len(text) >= n_bytes:
                return text
            created = 1_790_000_000 + rng.randrange(10**7)
            items.append(
                {
                    "id": f"{rng.choice(('ord', 'inv', 'evt'))}_{rng.randrange(16**16):016x}",
                    "object": rng.choice(("order", "invoice", "event")),
                    "created": created,
                    "updated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(created + 3600)),
                    "status": rng.choice(("paid", "open", "void", "pending", "shipped")),
                    "amount": rng.randint(100, 500_000),
                    "currency": rng.choice(("eur", "usd", "jpy")),
                    "customer": {
                        "id": f"cus_{rng.randrange(16**14):014x}",
                        "email": f"{rng.choice(words).lower()}.{rng.randrange(999)}@example.com",
                        "country": rng.choice(("PT", "JP", "DE", "CA", "KE", "CL")),
                    },
                    "lines": [
                        {
                            "sku": f"SKU-{rng.randrange(10**6):06d}",
                            "quantity": rng.randint(1, 9),
                            "unit_amount": rng.randint(100, 90_000),
                        }
                        for _ in range(rng.randint(1, 4))
                    ],
                    "description": self.prose(rng.randint(20, 140)),
                    "metadata": {
                        w.lower(): str(rng.randrange(10**5)) for w in rng.sample(words, 2)
                    },
                }
            )

    def arguments(self) -> dict[str, Any]:
        return {
            "query": self.prose(self.rng.randint(15, 60)),
            "limit": self.rng.choice((5, 10, 20, 50)),
            "filters": {"from": "LIS", "to": "KIX", "max_stops": self.rng.randint(0, 2)},
        }


def realistic_turns(
    n_messages: int, seed: int = 11, *, tool_bytes: tuple[int, int] = (1024, 20 * 1024)
) -> list[Turn]:
    """Whole turns of the realistic mix, at least ``n_messages`` messages in all, each tool
    result of ``tool_bytes`` (low, high) bytes of JSON."""
    rng = random.Random(seed)
    w = _Writer(rng)
    turns: list[Turn] = []
    total = 0
    calls = 0
    while total < n_messages:
        text, kind = w.text(w.length(50, 500))
        turn: Turn = [Msg("user", text, kind=kind)]
        if rng.random() < 0.5:
            for _ in range(rng.choice((1, 1, 2))):
                batch = []
                for _ in range(rng.choice((1, 1, 2, 3))):
                    batch.append(
                        Call(f"call_{seed}_{calls:06d}", rng.choice(_TOOLS), w.arguments())
                    )
                    calls += 1
                preamble = w.prose(w.length(20, 120)) if rng.random() < 0.3 else ""
                turn.append(Msg("assistant", preamble, tool_calls=tuple(batch), kind="calls"))
                for call in batch:
                    result = w.json_result(w.length(*tool_bytes), cjk=rng.random() < 0.1)
                    turn.append(Msg("tool", result, tool_call_id=call.id, kind="json"))
        text, kind = w.text(w.length(200, 2000))
        turn.append(Msg("assistant", text, kind=kind))
        turns.append(turn)
        total += len(turn)
    return turns


def chat_turns(n_messages: int, seed: int = 11) -> list[Turn]:
    """The realistic mix's turns without their tool rounds: a user message (50-500
    characters) and the assistant's answer (200-2,000), about 600 bytes a message."""
    turns = realistic_turns(n_messages * 2, seed)
    out: list[Turn] = []
    total = 0
    for turn in turns:
        if total >= n_messages:
            break
        out.append([turn[0], turn[-1]])
        total += 2
    return out


TOOL_RESULT_KINDS = ("api-json", "html", "logs", "source")
"""What the tool-heavy mix's tool results hold, drawn in equal shares."""


def tool_heavy_turns(
    n_messages: int, seed: int = 11, *, tool_bytes: tuple[int, int] = (2 * 1024, 40 * 1024)
) -> list[Turn]:
    """Whole turns of an agent that calls one tool every turn, at least ``n_messages``
    messages: a short user message (30-300 characters), an assistant tool call, its
    result of ``tool_bytes`` (log-uniform) of API JSON, HTML, log lines or source code,
    and a medium reply (200-2,000 characters)."""
    rng = random.Random(seed * 31 + 7)
    w = _Writer(rng)
    makers = {
        "api-json": w.api_result,
        "html": w.html_result,
        "logs": w.log_result,
        "source": w.source_result,
    }
    turns: list[Turn] = []
    total = 0
    while total < n_messages:
        text, kind = w.text(w.length(30, 300))
        call = Call(f"call_{seed}_{len(turns):06d}", rng.choice(_TOOLS), w.arguments())
        preamble = w.prose(w.length(20, 120)) if rng.random() < 0.3 else ""
        result_kind = rng.choice(TOOL_RESULT_KINDS)
        result = makers[result_kind](w.length(*tool_bytes))
        reply, reply_kind = w.text(w.length(200, 2000))
        turns.append(
            [
                Msg("user", text, kind=kind),
                Msg("assistant", preamble, tool_calls=(call,), kind="calls"),
                Msg("tool", result, tool_call_id=call.id, kind=result_kind),
                Msg("assistant", reply, kind=reply_kind),
            ]
        )
        total += 4
    return turns


def varied_turns(n_messages: int, seed: int = 11) -> list[Turn]:
    """The realistic mix with emoji: about a quarter of the user and assistant texts carry
    a few, between words (the texts of :func:`realistic_turns` are otherwise the same)."""
    rng = random.Random(seed * 7919 + 1)
    out: list[Turn] = []
    for turn in realistic_turns(n_messages, seed):
        varied: Turn = []
        for m in turn:
            if m.role != "tool" and m.content and rng.random() < 0.25:
                words = m.content.split(" ")
                for _ in range(rng.randint(1, 6)):
                    at = rng.randrange(len(words) + 1)
                    words.insert(at, "".join(rng.choices(_EMOJI, k=rng.randint(1, 3))))
                m = Msg(m.role, " ".join(words), m.tool_calls, m.tool_call_id, "emoji")  # noqa: PLW2901
            varied.append(m)
        out.append(varied)
    return out


_SHORT_USER = (
    "What is the weather in Lisbon tomorrow morning?",
    "Which flight to Osaka leaves earliest on Friday?",
    "Can you move my seat to the aisle on the return?",
    "How much is the refund if I cancel the hotel now?",
)
_SHORT_ASSISTANT = (
    "Sunny, 21 °C, with a light wind from the north.",
    "TAP 1711 at 06:40, one stop in Frankfurt, 790 EUR.",
    "Done: seat 23C on the return flight, no extra fee.",
    "Full refund: 412 EUR, back on your card in 5 days.",
)


def short_turns(n_messages: int, seed: int = 11) -> list[Turn]:
    """User and assistant messages of about 48 characters, in pairs."""
    rng = random.Random(seed)
    return [
        [
            Msg("user", rng.choice(_SHORT_USER)),
            Msg("assistant", rng.choice(_SHORT_ASSISTANT)),
        ]
        for _ in range((n_messages + 1) // 2)
    ]


@dataclass(frozen=True)
class RoleStats:
    """Sizes of one role's messages in a mix."""

    role: str
    count: int
    mean_chars: float
    median_chars: float
    mean_bytes: float
    median_bytes: float
    max_bytes: int


def mix_stats(turns: Sequence[Sequence[Msg]]) -> tuple[list[RoleStats], dict[str, float]]:
    """Per role (and in all): count, characters of content, UTF-8 bytes of the wire JSON;
    and the mix's shape: messages per turn, tool calls, the share of code and CJK."""
    messages = flatten(turns)
    groups: dict[str, list[Msg]] = {"all": messages}
    for m in messages:
        key = "assistant (tool calls)" if m.tool_calls else m.role
        groups.setdefault(key, []).append(m)
    rows = []
    for role in ("user", "assistant", "assistant (tool calls)", "tool", "all"):
        group = groups.get(role, [])
        if not group:
            continue
        chars = [len(m.content) for m in group]
        sizes = [len(m.wire_json().encode()) for m in group]
        rows.append(
            RoleStats(
                role,
                len(group),
                statistics.fmean(chars),
                statistics.median(chars),
                statistics.fmean(sizes),
                statistics.median(sizes),
                max(sizes),
            )
        )
    texts = [m for m in messages if m.kind in ("text", "code", "cjk")]
    shape = {
        "turns": len(turns),
        "messages per turn": len(messages) / len(turns),
        "tool calls per turn": sum(len(m.tool_calls) for m in messages) / len(turns),
        "code share of user/assistant texts": sum(m.kind == "code" for m in texts) / len(texts),
        "CJK share of user/assistant texts": sum(m.kind == "cjk" for m in texts) / len(texts),
    }
    return rows, shape


def stats_table(turns: Sequence[Sequence[Msg]]) -> str:
    """The mix's statistics as a markdown table and a line about its shape."""
    rows, shape = mix_stats(turns)
    lines = [
        "| role | count | mean chars | median chars | mean bytes | median bytes | max bytes |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r.role} | {r.count} | {r.mean_chars:,.0f} | {r.median_chars:,.0f} "
        f"| {r.mean_bytes:,.0f} | {r.median_bytes:,.0f} | {r.max_bytes:,} |"
        for r in rows
    ]
    lines.append("")
    lines.append(
        f"{shape['turns']:.0f} turns, {shape['messages per turn']:.2f} messages and "
        f"{shape['tool calls per turn']:.2f} tool calls per turn; "
        f"{shape['code share of user/assistant texts']:.0%} of user/assistant texts carry code, "
        f"{shape['CJK share of user/assistant texts']:.0%} are CJK. "
        "Bytes: the chat-completions JSON, compact UTF-8."
    )
    return "\n".join(lines)
