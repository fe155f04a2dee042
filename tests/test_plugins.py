"""The one dotted-path importer every plug-in kind uses, and the error it gives."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from redis_history.compaction.summarizers import resolve_summarizer
from redis_history.plugins import PluginPathError, import_path
from redis_history.tokens import resolve_counter

MODULE = "rh_test_plugin_paths"
BROKEN = "rh_test_plugin_paths_broken"
NEEDS_MISSING = "rh_test_plugin_paths_needs_missing"
EXPECTED = "a widget, or a dotted path 'package.module:attr'"

SOURCE = """
class Widget:
    @classmethod
    def make(cls):
        return cls()


WIDGET = Widget()
"""


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A plug-in module, one that raises on import, one importing a missing module."""
    (tmp_path / f"{MODULE}.py").write_text(SOURCE)
    (tmp_path / f"{BROKEN}.py").write_text("raise RuntimeError('boom at import')\n")
    (tmp_path / f"{NEEDS_MISSING}.py").write_text("import rh_no_such_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for name in (MODULE, BROKEN, NEEDS_MISSING):
        sys.modules.pop(name, None)


@pytest.mark.usefixtures("modules")
@pytest.mark.parametrize(
    ("spec", "attr"),
    [
        (f"{MODULE}:WIDGET", "WIDGET"),
        (f"{MODULE}.WIDGET", "WIDGET"),
        (f"{MODULE}:Widget", "Widget"),
        (f"{MODULE}:Widget.make", "Widget.make"),
    ],
)
def test_a_path_names_an_attribute_after_a_colon_or_the_last_dot(spec: str, attr: str) -> None:
    """'module:attr', 'module:Class.attr' and 'module.attr' all find the object."""
    expected: object = sys.modules.get(MODULE) or __import__(MODULE)
    for part in attr.split("."):
        expected = getattr(expected, part)
    assert import_path(spec, "widget", EXPECTED) == expected


@pytest.mark.usefixtures("modules")
@pytest.mark.parametrize(
    ("spec", "failure", "problem"),
    [
        ("plain", "malformed", "not a dotted path 'package.module:attr'"),
        (f"{MODULE}:", "malformed", "not a dotted path 'package.module:attr'"),
        (":WIDGET", "malformed", "not a dotted path 'package.module:attr'"),
        ("a:b:c", "malformed", "not a dotted path 'package.module:attr'"),
        ("not a path:x y", "malformed", "not a dotted path 'package.module:attr'"),
        ("gpt-4.1-mini", "malformed", "not a dotted path 'package.module:attr'"),
        (
            "rh_no_such_module:thing",
            "no module",
            "cannot import 'rh_no_such_module': No module named 'rh_no_such_module'",
        ),
        (
            "rh_no_such_package.sub.thing",
            "no module",
            "cannot import 'rh_no_such_package.sub': No module named 'rh_no_such_package'",
        ),
        (
            f"{NEEDS_MISSING}:thing",
            "import failed",
            f"cannot import '{NEEDS_MISSING}': No module named 'rh_no_such_dependency'",
        ),
        (
            f"{BROKEN}:thing",
            "import failed",
            f"cannot import '{BROKEN}': RuntimeError: boom at import",
        ),
        (f"{MODULE}:missing", "no attribute", f"'{MODULE}' has no attribute 'missing'"),
        (f"{MODULE}.missing", "no attribute", f"'{MODULE}' has no attribute 'missing'"),
        (
            f"{MODULE}:Widget.missing",
            "no attribute",
            f"'{MODULE}.Widget' has no attribute 'missing'",
        ),
    ],
)
def test_every_failure_names_the_spec_the_problem_and_what_is_expected(
    spec: str, failure: str, problem: str
) -> None:
    """One message shape for every failure: what was given, what went wrong, what is expected."""
    with pytest.raises(PluginPathError) as caught:
        import_path(spec, "widget", EXPECTED)
    error = caught.value
    assert isinstance(error, ValueError)
    assert (error.failure, error.problem) == (failure, problem)
    assert str(error) == f"unknown widget {spec!r}: {problem}; expected {EXPECTED}"
    if failure == "import failed":
        assert error.__cause__ is not None


@pytest.mark.usefixtures("modules")
def test_token_counters_and_summarizers_report_a_bad_path_the_same_way() -> None:
    """Both resolvers go through import_path: the same problem, each with its own expectation."""
    spec = f"{MODULE}:missing"
    problem = f"'{MODULE}' has no attribute 'missing'"
    with pytest.raises(PluginPathError) as counter:
        resolve_counter(spec)
    with pytest.raises(PluginPathError) as summarizer:
        resolve_summarizer(spec)
    assert str(counter.value).startswith(f"unknown token counter {spec!r}: {problem}; expected a ")
    assert str(summarizer.value).startswith(f"unknown summarizer {spec!r}: {problem}; expected a ")
