# ruff: noqa: RUF001  (fullwidth CJK punctuation is the point of the CJK pool)
"""A seeded corpus of conversations by category, held out from what the estimate was fitted on.

``EstimatingCounter``'s weights were fitted on the traffic of ``traffic.py`` (its word list,
its code templates, its CJK pool and its JSON records). Nothing here comes from there: code
and English prose are real text read from the Python standard library on disk (source files,
and the docstrings in them, read as text, never imported), and the rest is generated from
pools written for this corpus alone. Nothing is downloaded; a category and a seed always give
the same conversation on the same Python version (the stdlib's files are the one input from
outside).

Categories (:data:`CATEGORIES`), each a conversation of whole turns after a system prompt:

- ``code``: questions with pasted snippets, ``read_file`` tool results (stdlib source, some
  with line numbers), answers with fenced code.
- ``json``: tool output: REST API JSON (compact, default and indented), metrics, container
  listings, access and application logs, Python tracebacks, HTML pages.
- ``cjk``: Chinese, Japanese and Korean questions and answers, with the ASCII terms, numbers
  and dates such text carries, and CJK JSON tool results.
- ``emoji``: chat dense with emoji: single code points, skin tones, ZWJ sequences, flags,
  keycaps, reactions made only of emoji.
- ``short_chat``: one-liners: "ok", "thanks!", short questions and replies.
- ``mixed``: each turn drawn from all of the above, plus plain prose, some user messages
  carrying a ``name``.
"""

from __future__ import annotations

import ast
import json
import random
import re
import string
import sysconfig
from collections.abc import Callable, Iterator, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from redis_history import Message, ToolCall

__all__ = ["CATEGORIES", "SYSTEM_PROMPT", "conversation", "stdlib_files", "turns"]

CATEGORIES = ("code", "json", "cjk", "emoji", "short_chat", "mixed")
SYSTEM_PROMPT = (
    "You are a careful engineering assistant. Use the tools when they help, quote what they "
    "return, and keep answers short unless asked for detail."
)

# -- the standard library, read as text ----------------------------------------------------------

_SKIP = {
    "__pycache__",
    "encodings",  # codec tables, not code anyone writes
    "idle_test",
    "lib2to3",
    "pydoc_data",  # one generated string
    "site-packages",
    "test",
    "tests",
    "turtledemo",
}


@cache
def stdlib_files() -> tuple[Path, ...]:
    """The standard library's Python sources of 2-200 KB, sorted (tests and packages left out)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts
        if _SKIP.intersection(parts) or not 2_000 <= path.stat().st_size <= 200_000:
            continue
        files.append(path)
    if not files:
        raise RuntimeError(f"no Python sources found under {root}")
    return tuple(files)


@cache
def _source(path: Path) -> tuple[str, tuple[str, ...]]:
    """A stdlib file's path relative to the stdlib, and its lines."""
    text = path.read_text(encoding="utf-8", errors="replace")
    rel = path.relative_to(Path(sysconfig.get_paths()["stdlib"])).as_posix()
    return f"Lib/{rel}", tuple(text.splitlines())


_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")


@cache
def _docstring_sentences(path: Path) -> tuple[str, ...]:
    """English sentences from the docstrings of a stdlib file (prose written by people)."""
    try:
        tree = ast.parse("\n".join(_source(path)[1]))
    except SyntaxError:
        return ()
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        doc = ast.get_docstring(node)
        if not doc:
            continue
        for paragraph in doc.split("\n\n"):
            if ">>>" in paragraph or paragraph.lstrip().startswith((":", "-", "*")):
                continue
            flat = " ".join(paragraph.split())
            for sentence in _SENTENCE.split(flat):
                letters = sum(c.isalpha() or c == " " for c in sentence)
                if 25 <= len(sentence) <= 300 and letters > 0.85 * len(sentence):
                    out.append(sentence)
    return tuple(out)


_IDENT = re.compile(r"\b[a-z][a-z0-9_]{3,24}\b")


@cache
def _identifiers(path: Path) -> tuple[str, ...]:
    """Lower-case identifiers used in a stdlib file, sorted, for names in generated data."""
    return tuple(sorted(set(_IDENT.findall("\n".join(_source(path)[1])))))


class _Writer:
    """Text of each kind, deterministic for its random generator."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        files = stdlib_files()
        self.files = [files[i] for i in sorted(rng.sample(range(len(files)), k=40))]
        self.sentences = [s for f in self.files for s in _docstring_sentences(f)]
        self.words = sorted({w for f in self.files[:12] for w in _identifiers(f)})
        if len(self.sentences) < 50 or len(self.words) < 100:
            raise RuntimeError("too little text in the chosen stdlib files")

    # English and code

    def prose(self, low: int, high: int) -> str:
        """Docstring sentences, ``low`` to ``high`` characters (about)."""
        target = self.rng.randint(low, high)
        out: list[str] = []
        size = 0
        while size < target:
            sentence = self.rng.choice(self.sentences)
            out.append(sentence)
            size += len(sentence) + 1
        return " ".join(out)

    def snippet(self, low: int, high: int) -> tuple[str, int, int, str]:
        """``low`` to ``high`` consecutive lines of a stdlib file: its path, first and last
        line numbers (from 1), and the text."""
        path = self.rng.choice(self.files)
        name, lines = _source(path)
        n = min(len(lines), self.rng.randint(low, high))
        start = self.rng.randrange(0, len(lines) - n + 1)
        return name, start + 1, start + n, "\n".join(lines[start : start + n])

    def word(self) -> str:
        return self.rng.choice(self.words)

    def call_id(self) -> str:
        alphabet = string.ascii_letters + string.digits
        return "call_" + "".join(self.rng.choices(alphabet, k=24))

    # JSON, logs, HTML

    def timestamp(self) -> str:
        r = self.rng
        return (
            f"2026-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}T{r.randint(0, 23):02d}:"
            f"{r.randint(0, 59):02d}:{r.randint(0, 59):02d}.{r.randint(0, 999):03d}Z"
        )

    def uuid(self) -> str:
        h = f"{self.rng.getrandbits(128):032x}"
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"

    def api_json(self) -> Any:
        r = self.rng
        kind = r.randrange(4)
        if kind == 0:  # a paginated REST listing
            items = [
                {
                    "id": self.uuid(),
                    "type": "issue",
                    "attributes": {
                        "title": self.prose(20, 90)[:90],
                        "state": r.choice(("open", "closed", "triaged")),
                        "created_at": self.timestamp(),
                        "labels": r.sample(self.words, k=r.randint(0, 4)),
                        "comments": r.randint(0, 240),
                        "author": {
                            "login": f"{self.word()}{r.randint(1, 99)}",
                            "id": r.randint(1000, 9_999_999),
                        },
                    },
                }
                for _ in range(r.randint(2, 14))
            ]
            return {
                "data": items,
                "meta": {
                    "page": r.randint(1, 9),
                    "per_page": len(items),
                    "total": r.randint(20, 900),
                },
                "links": {
                    "next": f"https://api.example.org/v2/issues?page={r.randint(2, 10)}&per_page=25"
                },
            }
        if kind == 1:  # metrics
            start = r.randint(1_760_000_000, 1_790_000_000)
            return {
                "metric": f"{self.word()}.{self.word()}",
                "unit": r.choice(("ms", "percent", "bytes", "req/s")),
                "tags": {
                    "host": f"node-{r.randint(1, 64):02d}",
                    "region": r.choice(("eu-west-1", "us-east-2", "ap-northeast-1")),
                },
                "points": [
                    [start + 60 * i, round(r.lognormvariate(2, 1), r.randint(1, 4))]
                    for i in range(r.randint(5, 60))
                ],
            }
        if kind == 2:  # a container listing
            return {
                "kind": "PodList",
                "items": [
                    {
                        "metadata": {
                            "name": f"{self.word()}-{r.getrandbits(40):010x}"[:40],
                            "namespace": r.choice(("default", "prod", "staging")),
                            "labels": {
                                "app": self.word(),
                                "tier": r.choice(("web", "worker", "db")),
                            },
                        },
                        "status": {
                            "phase": r.choice(("Running", "Pending", "Failed", "Succeeded")),
                            "restartCount": r.randint(0, 12),
                            "startTime": self.timestamp(),
                        },
                        "containers": [{"image": self.image()}],
                    }
                    for _ in range(r.randint(1, 10))
                ],
            }
        return {  # a forecast
            "location": {
                "lat": round(r.uniform(-60, 60), 4),
                "lon": round(r.uniform(-180, 180), 4),
            },
            "hourly": {
                "time": [
                    f"2026-11-{r.randint(1, 28):02d}T{h:02d}:00"
                    for h in range(0, 24, r.choice((1, 2, 3)))
                ],
                "temperature_2m": [round(r.uniform(-5, 30), 1) for _ in range(12)],
                "precipitation_probability": [r.randint(0, 100) for _ in range(12)],
            },
            "generationtime_ms": round(r.random(), 6),
        }

    def json_text(self) -> str:
        doc = self.api_json()
        style = self.rng.randrange(3)
        if style == 0:
            return json.dumps(doc, separators=(",", ":"))
        if style == 1:
            return json.dumps(doc)
        return json.dumps(doc, indent=2)

    def image(self) -> str:
        r = self.rng
        return (
            f"registry.local/{self.word()}:{r.randint(1, 9)}.{r.randint(0, 30)}.{r.randint(0, 9)}"
        )

    def access_log(self) -> str:
        r = self.rng
        lines = []
        for _ in range(r.randint(5, 40)):
            ip = f"{r.randint(1, 223)}.{r.randint(0, 255)}.{r.randint(0, 255)}.{r.randint(1, 254)}"
            path = f"/api/v{r.randint(1, 3)}/{self.word()}/{r.randint(1, 99999)}"
            if r.random() < 0.4:
                path += f"?{self.word()}={self.word()}&limit={r.choice((10, 25, 100))}"
            when = f"{r.randint(1, 28):02d}/Nov/2026:{r.randint(0, 23):02d}:{r.randint(0, 59):02d}"
            method = r.choice(("GET", "GET", "POST", "PUT", "DELETE"))
            status = r.choice((200, 200, 200, 201, 204, 301, 404, 500, 503))
            agent = r.choice(
                ("curl/8.5.0", "python-httpx/0.27.0", "Mozilla/5.0 (X11; Linux x86_64)")
            )
            lines.append(
                f'{ip} - - [{when}:{r.randint(0, 59):02d} +0000] "{method} {path} HTTP/1.1" '
                f'{status} {r.randint(0, 90000)} "-" "{agent}" {r.uniform(0.001, 2.5):.3f}'
            )
        return "\n".join(lines)

    def app_log(self) -> str:
        r = self.rng
        lines = []
        for _ in range(r.randint(5, 40)):
            level = r.choice(("INFO", "INFO", "INFO", "DEBUG", "WARNING", "ERROR"))
            fields = " ".join(
                f"{self.word()}={r.choice((str(r.randint(0, 5000)), self.word(), self.uuid()[:8]))}"
                for _ in range(r.randint(1, 5))
            )
            lines.append(f"{self.timestamp()} {level:<7} {self.word()}.{self.word()}: {fields}")
        return "\n".join(lines)

    def traceback(self) -> str:
        frames = []
        for _ in range(self.rng.randint(2, 8)):
            name, first, _, text = self.snippet(1, 1)
            frames.append(
                f'  File "/usr/lib/python3.12/{name[4:]}", line {first}, in {self.word()}\n'
                f"    {text.strip() or 'pass'}"
            )
        error = self.rng.choice(("KeyError", "ValueError", "TimeoutError", "ConnectionResetError"))
        return (
            "Traceback (most recent call last):\n"
            + "\n".join(frames)
            + f"\n{error}: {self.prose(10, 80)[:80]}"
        )

    def html(self) -> str:
        r = self.rng
        rows = "\n".join(
            f'      <tr class="{self.word()}"><td>{self.word()}</td><td>{r.randint(0, 99999)}</td>'
            f'<td><a href="/{self.word()}/{r.randint(1, 999)}">{self.word()}</a></td></tr>'
            for _ in range(r.randint(2, 20))
        )
        paragraphs = "\n".join(f"    <p>{self.prose(60, 300)}</p>" for _ in range(r.randint(1, 5)))
        return (
            '<!DOCTYPE html>\n<html lang="en">\n<head>\n  <meta charset="utf-8">\n'
            f"  <title>{self.prose(10, 50)[:50]}</title>\n"
            f'  <link rel="stylesheet" href="/static/{self.word()}.css?v={r.randint(1, 99)}">\n'
            '</head>\n<body>\n  <nav class="navbar navbar-expand-lg"><ul>'
            + "".join(f'<li><a href="/{self.word()}">{self.word()}</a></li>' for _ in range(4))
            + f'</ul></nav>\n  <main id="{self.word()}">\n{paragraphs}\n'
            f'    <table class="table table-sm">\n{rows}\n    </table>\n  </main>\n</body>\n</html>'
        )

    def tool_output(self) -> tuple[str, dict[str, Any], str]:
        """A tool's name, its arguments and its output."""
        r = self.rng
        kind = r.randrange(6)
        if kind <= 1:
            return (
                "http_get",
                {"url": f"https://api.example.org/v2/{self.word()}"},
                self.json_text(),
            )
        if kind == 2:
            return (
                "query_logs",
                {"service": self.word(), "since": "1h", "limit": 200},
                self.access_log(),
            )
        if kind == 3:
            return "query_logs", {"service": self.word(), "level": "INFO"}, self.app_log()
        if kind == 4:
            return "run_command", {"cmd": f"python -m {self.word()}"}, self.traceback()
        return "fetch_page", {"url": f"https://docs.example.org/{self.word()}.html"}, self.html()

    # CJK

    def cjk(self, low: int, high: int, language: str) -> str:
        """``low`` to ``high`` characters of Chinese, Japanese or Korean sentences, some with
        ASCII terms, numbers or dates in them."""
        pool = _CJK_SENTENCES[language]
        target = self.rng.randint(low, high)
        out: list[str] = []
        size = 0
        while size < target:
            sentence = self.rng.choice(pool)
            if self.rng.random() < 0.35:
                term = self.rng.choice(
                    (
                        self.word(),
                        f"v{self.rng.randint(1, 9)}.{self.rng.randint(0, 20)}",
                        str(self.rng.randint(2, 99_999)),
                        f"2026-{self.rng.randint(1, 12):02d}-{self.rng.randint(1, 28):02d}",
                        "API",
                        "Python",
                        "JSON",
                    )
                )
                sentence = f"{term} {sentence}" if language == "ko" else term + sentence
            out.append(sentence)
            size += len(sentence)
        return (" " if language == "ko" else "").join(out)

    # emoji

    def emoji(self) -> str:
        r = self.rng
        kind = r.random()
        if kind < 0.55:
            return chr(r.choice(_EMOJI_POINTS))
        if kind < 0.7:
            return chr(r.choice(_HANDS)) + chr(r.randint(0x1F3FB, 0x1F3FF))
        if kind < 0.82:
            return "\u200d".join(
                chr(r.choice(_PEOPLE)) if i == 0 else chr(r.choice(_OBJECTS)) for i in range(2)
            )
        if kind < 0.94:
            code = r.choice(_FLAGS)
            return "".join(chr(0x1F1E6 + ord(c) - ord("A")) for c in code)
        return f"{r.randint(0, 9)}\ufe0f\u20e3"

    def emoji_text(self, low: int, high: int) -> str:
        """A chat line or paragraph dense with emoji (between words, and runs of them)."""
        r = self.rng
        if r.random() < 0.2:
            return "".join(self.emoji() for _ in range(r.randint(1, 8)))
        words = (self.short_line() if high < 80 else self.prose(low, high)).split(" ")
        for _ in range(max(1, len(words) // r.randint(2, 6))):
            at = r.randrange(len(words) + 1)
            words.insert(at, "".join(self.emoji() for _ in range(r.randint(1, 3))))
        return " ".join(words)

    # short chat

    def short_line(self, role: str = "user") -> str:
        r = self.rng
        template = r.choice(_SHORT_USER if role == "user" else _SHORT_ASSISTANT)
        return template.format(
            n=r.randint(2, 120),
            t=f"{r.randint(6, 21)}:{r.choice(('00', '15', '30', '45'))}",
            w=self.word(),
            d=r.choice(("Monday", "Tuesday", "Friday", "tomorrow", "next week")),
            p=f"{r.randint(3, 900)}.{r.randint(0, 99):02d}",
        )


def _code_turn(w: _Writer) -> list[Message]:
    r = w.rng
    ask = w.prose(40, 300)
    if r.random() < 0.4:
        _, _, _, text = w.snippet(3, 40)
        ask += f"\n\n```python\n{text}\n```"
    turn = [Message.user(ask)]
    if r.random() < 0.6:
        calls = []
        results = []
        for _ in range(r.choice((1, 1, 2))):
            name, first, last, text = w.snippet(20, 250)
            call = ToolCall(
                id=w.call_id(),
                name="read_file",
                arguments={"path": name, "start": first, "end": last},
            )
            if r.random() < 0.4:
                text = "\n".join(
                    f"{first + i:6d}\t{line}" for i, line in enumerate(text.split("\n"))
                )
            calls.append(call)
            results.append(Message.tool(text, tool_call_id=call.id))
        turn.append(Message.assistant(w.prose(0, 80) if r.random() < 0.3 else "", tool_calls=calls))
        turn += results
    _, _, _, text = w.snippet(5, 80)
    turn.append(
        Message.assistant(
            f"{w.prose(40, 400)}\n\n```python\n{text}\n```\n\n{w.prose(0, 200)}".rstrip()
        )
    )
    return turn


def _json_turn(w: _Writer) -> list[Message]:
    r = w.rng
    turn = [Message.user(w.prose(30, 200))]
    for _ in range(r.choice((1, 1, 2))):
        calls, results = [], []
        for _ in range(r.choice((1, 1, 2, 3))):
            name, arguments, output = w.tool_output()
            call = ToolCall(id=w.call_id(), name=name, arguments=arguments)
            calls.append(call)
            results.append(Message.tool(output, tool_call_id=call.id))
        turn.append(Message.assistant("", tool_calls=calls))
        turn += results
    answer = w.prose(60, 400)
    if r.random() < 0.4:
        answer += "\n\n```json\n" + json.dumps(w.api_json(), indent=2)[:600] + "\n```"
    turn.append(Message.assistant(answer))
    return turn


def _cjk_turn(w: _Writer) -> list[Message]:
    r = w.rng
    language = r.choice(("zh", "ja", "ko"))
    turn = [Message.user(w.cjk(20, 200, language))]
    if r.random() < 0.3:
        call = ToolCall(
            id=w.call_id(),
            name="search_docs",
            arguments={"q": w.cjk(4, 20, language), "lang": language},
        )
        records = [
            {
                "title": w.cjk(8, 30, language),
                "snippet": w.cjk(40, 200, language),
                "score": round(r.random(), 3),
            }
            for _ in range(r.randint(1, 6))
        ]
        turn.append(Message.assistant("", tool_calls=[call]))
        turn.append(
            Message.tool(json.dumps({"results": records}, ensure_ascii=False), tool_call_id=call.id)
        )
    turn.append(Message.assistant(w.cjk(60, 800, language)))
    return turn


def _emoji_turn(w: _Writer) -> list[Message]:
    r = w.rng
    return [
        Message.user(w.emoji_text(10, 60 if r.random() < 0.6 else 300)),
        Message.assistant(w.emoji_text(20, 70 if r.random() < 0.5 else 500)),
    ]


def _short_turn(w: _Writer) -> list[Message]:
    return [Message.user(w.short_line("user")), Message.assistant(w.short_line("assistant"))]


def _prose_turn(w: _Writer) -> list[Message]:
    name = {"name": w.rng.choice(("alice", "bob", "ops-bot"))} if w.rng.random() < 0.3 else {}
    return [Message.user(w.prose(30, 400), **name), Message.assistant(w.prose(100, 1500))]


_TURNS: dict[str, Callable[[_Writer], list[Message]]] = {
    "code": _code_turn,
    "json": _json_turn,
    "cjk": _cjk_turn,
    "emoji": _emoji_turn,
    "short_chat": _short_turn,
    "prose": _prose_turn,
}


def turns(category: str, seed: int) -> Iterator[list[Message]]:
    """Whole turns of ``category``, endless, the same for the same seed."""
    rng = random.Random(f"{category}:{seed}")
    w = _Writer(rng)
    if category == "mixed":
        kinds: Sequence[str] = ("code", "json", "cjk", "emoji", "short_chat", "short_chat", "prose")
    elif category in _TURNS:
        kinds = (category,)
    else:
        raise ValueError(f"unknown category {category!r}; expected one of {CATEGORIES}")
    while True:
        yield _TURNS[rng.choice(kinds)](w)


def conversation(category: str, seed: int, messages: int) -> list[Message]:
    """A system prompt, then whole turns of ``category``, at least ``messages`` in all."""
    out = [Message.system(SYSTEM_PROMPT)]
    for turn in turns(category, seed):
        if len(out) - 1 >= messages:
            break
        out += turn
    return out


# -- pools written for this corpus ---------------------------------------------------------------

_CJK_SENTENCES = {
    "zh": (
        "请帮我看一下这个接口为什么返回超时。",
        "昨天晚上的部署之后，订单服务的延迟明显升高了。",
        "我们需要在下周五之前完成数据迁移。",
        "这个函数在输入为空的时候会抛出异常，应该先做检查。",
        "日志里有很多重复的警告，可以先把它们过滤掉。",
        "根据监控数据，数据库连接池在高峰期已经用满。",
        "建议把缓存的过期时间从十分钟改成三十分钟。",
        "测试环境和生产环境的配置不一致，导致了这个问题。",
        "你能把这段代码改成异步的版本吗？",
        "报表显示上个月的退款比例比前一个月高出不少。",
        "用户反馈说页面加载很慢，尤其是在手机上。",
        "我已经把修复提交到了新的分支，请帮忙审核。",
        "如果重试三次仍然失败，就把任务放回队列。",
        "这个版本兼容旧的客户端，不需要强制升级。",
        "请把结果按照时间倒序排列，并且只保留前二十条。",
        "服务器的磁盘空间只剩下百分之五了。",
        "会议改到明天下午三点，在二楼的小会议室。",
        "文档里关于权限的部分写得不太清楚。",
    ),
    "ja": (
        "このエラーメッセージの意味を教えていただけますか。",
        "昨日のリリース以降、検索結果の表示が遅くなっています。",
        "設定ファイルのパスが間違っているようです。",
        "テストはすべて通りましたが、警告がいくつか残っています。",
        "来週の月曜日までに見積もりを送っていただけると助かります。",
        "データベースのバックアップは毎晩二時に実行されます。",
        "この関数は引数が空のときに例外を投げます。",
        "ログを確認したところ、接続が何度も切れていました。",
        "申し訳ありませんが、その注文はすでに発送済みです。",
        "キャッシュを削除してから、もう一度お試しください。",
        "新しいバージョンでは、認証の仕組みが変わりました。",
        "お問い合わせの件について、担当者から折り返しご連絡します。",
        "画面の右上にある設定ボタンを押してください。",
        "処理に時間がかかる場合は、しばらくお待ちください。",
        "東京と大阪のサーバーで結果が違う理由を調べています。",
        "明日の天気は曇りのち雨、最高気温は十八度の予報です。",
    ),
    "ko": (
        "이 오류가 왜 발생하는지 확인해 주실 수 있나요?",
        "어제 배포 이후로 응답 시간이 두 배로 늘었습니다.",
        "설정 파일의 경로를 다시 확인해 보세요.",
        "테스트는 모두 통과했지만 경고가 몇 개 남아 있습니다.",
        "다음 주 금요일까지 데이터 이전을 끝내야 합니다.",
        "로그를 보면 연결이 여러 번 끊긴 것 같습니다.",
        "캐시를 삭제한 뒤에 다시 시도해 주세요.",
        "새 버전에서는 인증 방식이 바뀌었습니다.",
        "주문하신 상품은 이미 발송되었습니다.",
        "서버의 디스크 공간이 거의 다 찼습니다.",
        "회의는 내일 오후 세 시로 변경되었습니다.",
        "이 함수는 입력이 비어 있으면 예외를 던집니다.",
        "결과를 시간 역순으로 정렬해서 보여 주세요.",
        "고객들이 모바일에서 페이지가 느리다고 합니다.",
        "재시도를 세 번 해도 실패하면 작업을 큐에 다시 넣습니다.",
    ),
}

_EMOJI_POINTS = (
    *range(0x1F600, 0x1F650),  # emoticons
    *range(0x1F680, 0x1F6C6),  # transport and map
    *range(0x1F910, 0x1F940),  # supplemental faces and gestures
    *range(0x1F950, 0x1F9A0),  # food, animals
    *range(0x1F330, 0x1F394),  # plants, food, celebration
    0x2615,
    0x26A1,
    0x2728,
    0x2764,
    0x2B50,
    0x2705,
    0x274C,
    0x1F4A1,
    0x1F4AF,
    0x1F4E6,
    0x1F525,
)
_HANDS = (0x1F44B, 0x1F44D, 0x1F44E, 0x1F44F, 0x1F64C, 0x1F64F, 0x270C, 0x1F91D, 0x1F44C)
_PEOPLE = (0x1F468, 0x1F469, 0x1F9D1)
_OBJECTS = (0x1F4BB, 0x1F52C, 0x1F373, 0x1F680, 0x1F3A8, 0x1F33E, 0x1F527, 0x1F393)
_FLAGS = (
    "US",
    "GB",
    "DE",
    "FR",
    "JP",
    "KR",
    "CN",
    "BR",
    "IN",
    "ES",
    "IT",
    "NL",
    "SE",
    "PL",
    "MX",
    "CA",
)

_SHORT_USER = (
    "ok",
    "ok thanks",
    "thanks!",
    "thx",
    "yes",
    "no",
    "sure",
    "perfect",
    "hmm",
    "why?",
    "nvm",
    "go ahead",
    "cancel that",
    "sounds good",
    "got it",
    "and the other one?",
    "what about {d}?",
    "can you try again?",
    "how long will it take?",
    "make it {n}",
    "at {t} please",
    "is {w} enabled?",
    "what's the total?",
    "send it to me",
    "in euros please",
    "the second one",
    "no, the {w} one",
    "yes please, {d} works",
    "can we do {n} instead?",
    "ok, and the price?",
    "lol",
    "great, thanks a lot!",
)
_SHORT_ASSISTANT = (
    "Sure.",
    "Done!",
    "You're welcome!",
    "Got it. Anything else?",
    "Yes, that works.",
    "No problem.",
    "Booked for {t}.",
    "It comes to {p} EUR.",
    "I set it to {n}.",
    "Sorry, I couldn't find {w}.",
    "It takes about {n} minutes.",
    "Yes: {w} is enabled.",
    "Moved to {d} at {t}.",
    "Sent. Check your inbox.",
    "The total is ${p}.",
    "Cancelled. Nothing was charged.",
    "Which one do you mean?",
    "Retrying now... done.",
    "OK, {d} at {t} it is.",
    "All {n} items are in stock.",
)
