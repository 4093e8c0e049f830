"""The house's shape (docs/architecture.md), held by tests: the package root
stays small, modules stay short, and no module imports itself back through
others, function-level imports included (import-linter's layer contract,
run by ./scripts/test, keeps the stages' order)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "sessions_app"


def test_the_package_root_keeps_only_entry_points():
    """At most 10 modules at sessions_app's root; every stage is a subpackage."""
    modules = sorted(p.name for p in APP.glob("*.py"))
    assert len(modules) <= 10, modules
    for stage in ("wire", "log", "fanout", "access", "sockets", "runtime", "server", "web"):
        assert (APP / stage / "__init__.py").is_file(), stage


# Not the project's own text: environments, tools, outputs, vendored code.
SKIPPED = {".git", ".venv", ".nox", ".tools", "node_modules", "var", "test-results", "vendor"}
TEXT = {".py", ".js", ".mjs", ".css", ".html", ".md", ".toml", ".sh", ".json", ".txt", ""}


def test_no_file_is_longer_than_500_lines():
    """No file of the project (code, tests, docs, styles, templates; migrations
    and vendored code aside) runs past 500 lines."""
    long = []
    for path in ROOT.rglob("*"):
        parts = set(path.relative_to(ROOT).parts)
        if not path.is_file() or parts & SKIPPED or "migrations" in parts:
            continue
        if path.suffix not in TEXT or "__pycache__" in parts or path.name == "LICENSE":
            continue
        if path.name in ("package-lock.json", "uv.lock"):  # written by npm and uv, not by us
            continue
        try:
            lines = path.read_text().count("\n")
        except UnicodeDecodeError:
            continue
        if lines > 500:
            long.append((str(path.relative_to(ROOT)), lines))
    assert long == []


MAX_FUNCTION_LINES = 60
MAX_PARAMETERS = 6  # past that, a request object (``runtime.gates.Gate``, ``turns.NewTurn``)


def long_functions(source: str) -> list[tuple[str, str]]:
    """Each function of ``source`` past ``MAX_FUNCTION_LINES`` lines (its
    decorators and docstring included), or taking more than
    ``MAX_PARAMETERS`` parameters (``self`` and ``cls`` aside; ``*args`` and
    ``**kwargs`` count one each): (name, what is wrong)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        lines = node.end_lineno - node.lineno + 1
        if lines > MAX_FUNCTION_LINES:
            found.append((node.name, f"{lines} lines"))
        a = node.args
        named = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
        count = len([n for n in named if n not in ("self", "cls")]) + bool(a.vararg)
        count += bool(a.kwarg)
        if count > MAX_PARAMETERS:
            found.append((node.name, f"{count} parameters"))
    return found


def test_no_function_is_too_long_or_takes_too_many_parameters():
    """Beside the file guard, a function guard: none of the app's functions
    runs past 60 lines or takes more than 6 parameters (split by purpose;
    past six, one request object)."""
    found = [
        (str(path.relative_to(ROOT)), *problem)
        for path in sorted(APP.rglob("*.py"))
        if "migrations" not in path.parts
        for problem in long_functions(path.read_text())
    ]
    assert found == []


def test_the_function_guard_catches_a_planted_violation():
    """A 61-line function and a seven-parameter one are each caught; 60
    lines and six parameters (with self) pass."""
    body = "".join(f"    x{i} = {i}\n" for i in range(59))
    planted = (
        f"def long():\n{body}    return 0\n"
        f"def fits():\n{body[: body.rindex('    x58')]}    return 0\n"
        "def many(a, b, c, d, e, f, *, g): pass\n"
        "class C:\n    def ok(self, a, b, c, d, e, f): pass\n"
    )
    assert long_functions(planted) == [("long", "61 lines"), ("many", "7 parameters")]


JS = ROOT / "static" / "sessions_app" / "js"
JS_IMPORT = re.compile(r"^import[^;]*?from \"([^\"]+)\"", re.M | re.S)
# What each folder of the browser client may import: the stages below it.
JS_BELOW = {"wire": set(), "model": {"wire", "model"}, "client": {"wire", "model", "client"}}


def test_the_browser_clients_folders_import_only_the_stages_below():
    """``wire/`` (the protocol's names) imports nothing of the client,
    ``model/`` only ``wire/`` (the review found ``model/apply.js`` importing
    ``client/``), ``client/`` no ``view/``."""
    found = []
    for folder, allowed in JS_BELOW.items():
        for path in sorted((JS / folder).glob("*.js")):
            for target in JS_IMPORT.findall(path.read_text()):
                stage = (path.parent / target).resolve().parent.name
                if target.startswith(".") and stage not in allowed | {folder}:
                    found.append((f"{folder}/{path.name}", target))
    assert found == []


def test_no_import_cycle():
    """No chain of imports (function-level ones too) leads from a module of
    the app back to itself."""
    graph = grimp.build_graph("sessions_app")
    edges = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    cycles = _cycles(edges)
    assert cycles == []


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in edges.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


# The socket's frame parsers: an HTTP view that calls one builds a fake frame.
FRAME_PARSERS = re.compile(r"\bparse_(send|switch|decide|cancel|sync|ack|start|resume)\(")


def http_views_building_frames(folder: Path) -> list[str]:
    """Calls of a socket frame's parser in ``folder`` (file:line)."""
    return [
        f"{path.name}:{n}"
        for path in sorted(folder.glob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if FRAME_PARSERS.search(line)
    ]


def test_http_views_build_commands_by_their_constructors(tmp_path):
    """The HTTP views (web/) build a command from its fields with the wire's
    constructors (``protocol.send_of``, ``switch_of``), never by parsing a
    socket frame made up for it; a planted one is caught."""
    assert http_views_building_frames(APP / "web") == []
    planted = tmp_path / "view.py"
    planted.write_text('send = p.parse_send({"type": p.SEND, **body})\n')
    assert http_views_building_frames(tmp_path) == ["view.py:1"]
