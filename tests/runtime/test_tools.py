"""The workspace tools: confinement to the workspace, exact effects, limits."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from sessions_app.runtime import tools
from sessions_app.runtime.registry import execute, validate_args
from sessions_app.runtime.tools import workspace_for

# The quota reads who owns a workspace (a user's workspaces share one).
pytestmark = pytest.mark.django_db


@pytest.fixture
def workspace(settings, tmp_path) -> Path:
    settings.AGENT_WORKSPACES = tmp_path / "workspaces"
    return workspace_for("s_AbC-_x0123456789abcdef")


@pytest.fixture
def outside(tmp_path) -> Path:
    """A directory next to the workspaces with a file no tool may touch."""
    path = tmp_path / "outside"
    path.mkdir()
    (path / "secret.txt").write_text("top secret\n")
    (path / "names0").write_bytes(b"secret.txt\0")
    return path


@pytest.fixture
def no_process(monkeypatch):
    """Fails the test if anything is started."""
    started = []

    def refuse(*args, **kwargs):
        started.append(args)
        raise AssertionError(f"a process was started: {args}")

    monkeypatch.setattr(tools.subprocess, "Popen", refuse)
    return started


def snapshot(root: Path) -> dict[str, object]:
    """Every entry under root: symlink targets, file bytes, directories."""
    found: dict[str, object] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            key = str(path.relative_to(root))
            if path.is_symlink():
                found[key] = ("link", os.readlink(path))
            elif path.is_dir():
                found[key] = "dir"
            else:
                found[key] = path.read_bytes()
    return found


# --- workspace_for --------------------------------------------------------


def test_workspace_for_creates_the_directory_under_agent_workspaces(settings, tmp_path):
    """A session's workspace is AGENT_WORKSPACES/<session_id>, created on demand."""
    settings.AGENT_WORKSPACES = tmp_path / "ws"
    path = workspace_for("s_abc-DEF_123")
    assert path == tmp_path / "ws" / "s_abc-DEF_123"
    assert path.is_dir()
    assert workspace_for("s_abc-DEF_123") == path


@pytest.mark.parametrize("bad", ["", ".", "..", "../x", "a/b", "s_a/../../x", "s_\x00", "s a"])
def test_workspace_for_refuses_ids_that_could_escape(settings, tmp_path, bad):
    """An id outside the URL-safe alphabet is refused and creates nothing."""
    settings.AGENT_WORKSPACES = tmp_path / "ws"
    with pytest.raises(ValueError):
        workspace_for(bad)
    assert not (tmp_path / "ws").exists() or not any((tmp_path / "ws").iterdir())


# --- validate_args ----------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("rm", {"path": "x"}),
        ("write_file", "notes.txt"),
        ("write_file", {"path": "x"}),
        ("write_file", {"path": "x", "text": 3}),
        ("write_file", {"path": "", "text": "x"}),
        ("write_file", {"path": "x", "text": "y", "mode": "w"}),
        ("terminal", {}),
        ("terminal", {"command": "   "}),
        ("terminal", {"command": ["ls"]}),
    ],
)
def test_malformed_calls_are_refused_without_raising(workspace, no_process, tool, args):
    """Bad tool names or arguments give (False, reason) and touch nothing."""
    before = snapshot(workspace.parent)
    assert validate_args(tool, args)
    ok, output = execute(tool, args, workspace)
    assert ok is False and output
    assert snapshot(workspace.parent) == before


# --- write_file -------------------------------------------------------------


def test_write_appends_text_and_a_newline_once_per_call(workspace):
    """Each call appends exactly TEXT plus a newline, and says how much."""
    assert execute("write_file", {"path": "notes.txt", "text": "hello"}, workspace) == (
        True,
        "appended 6 bytes to notes.txt",
    )
    assert execute("write_file", {"path": "notes.txt", "text": "wörld"}, workspace)[0]
    assert (workspace / "notes.txt").read_text() == "hello\nwörld\n"


def test_write_creates_parent_directories_inside_the_workspace(workspace):
    """Missing parent directories are created, inside the workspace."""
    ok, output = execute("write_file", {"path": "a/b/./c.txt", "text": "x"}, workspace)
    assert ok, output
    assert (workspace / "a" / "b" / "c.txt").read_text() == "x\n"
    assert output == "appended 2 bytes to a/b/c.txt"


def write_refusal_cases(workspace: Path, outside: Path) -> dict[str, str]:
    (workspace / "link.txt").symlink_to(outside / "secret.txt")
    (workspace / "linkdir").symlink_to(outside)
    (workspace / "sub").mkdir()
    (workspace / "sub" / "inner").symlink_to(outside)
    (workspace / "dangling").symlink_to(outside / "new.txt")
    (workspace / "adir").mkdir()
    (workspace / "plain.txt").write_text("plain\n")
    return {
        "absolute": str(outside / "secret.txt"),
        "absolute new file": str(outside / "new.txt"),
        "dotdot": "../outside/secret.txt",
        "dotdot inside": "sub/../../outside/new.txt",
        "symlinked file": "link.txt",
        "dangling symlink": "dangling",
        "symlinked dir": "linkdir/new.txt",
        "symlinked dir, deeper": "linkdir/deeper/new.txt",
        "symlinked nested dir": "sub/inner/secret.txt",
        "a directory": "adir",
        "a file as parent": "plain.txt/x",
    }


@pytest.mark.parametrize(
    "case",
    [
        "absolute",
        "absolute new file",
        "dotdot",
        "dotdot inside",
        "symlinked file",
        "dangling symlink",
        "symlinked dir",
        "symlinked dir, deeper",
        "symlinked nested dir",
        "a directory",
        "a file as parent",
    ],
)
def test_write_refuses_paths_that_leave_the_workspace(workspace, outside, tmp_path, case):
    """Absolute, '..', symlinked file or directory: (False, reason), nothing written."""
    path = write_refusal_cases(workspace, outside)[case]
    before = snapshot(tmp_path)
    ok, output = execute("write_file", {"path": path, "text": "pwned"}, workspace)
    assert ok is False
    assert output
    assert snapshot(tmp_path) == before


def test_write_refuses_a_hard_linked_file(workspace, outside, tmp_path):
    """A file with a second hard link (maybe outside) is not appended to."""
    os.link(outside / "secret.txt", workspace / "hard.txt")
    ok, output = execute("write_file", {"path": "hard.txt", "text": "pwned"}, workspace)
    assert ok is False and "hard link" in output
    assert (outside / "secret.txt").read_text() == "top secret\n"


def test_write_into_a_missing_workspace_fails_cleanly(settings, tmp_path):
    """A workspace that vanished is a failure, not an exception."""
    ok, output = execute("write_file", {"path": "x", "text": "y"}, tmp_path / "gone")
    assert ok is False and "workspace" in output


# --- terminal -----------------------------------------------------------------


def test_terminal_runs_echo_without_a_shell(workspace):
    """echo runs; shell syntax is plain text, not a second command."""
    ok, output = execute("terminal", {"command": "echo 'a  b' $HOME; touch x"}, workspace)
    assert (ok, output) == (True, "a  b $HOME; touch x\n")
    assert not (workspace / "x").exists()


def test_terminal_runs_ls_cat_wc_pwd_in_the_workspace(workspace):
    """ls, cat, wc and pwd see the workspace as their working directory."""
    (workspace / "notes.txt").write_text("one\ntwo\n")
    assert execute("terminal", {"command": "ls"}, workspace) == (True, "notes.txt\n")
    assert execute("terminal", {"command": "cat notes.txt"}, workspace) == (True, "one\ntwo\n")
    assert execute("terminal", {"command": "wc -l notes.txt"}, workspace) == (
        True,
        "2 notes.txt\n",
    )
    assert execute("terminal", {"command": "pwd"}, workspace) == (
        True,
        os.path.realpath(workspace) + "\n",
    )
    ok, output = execute("terminal", {"command": "date +%Y"}, workspace)
    assert ok and output.strip().isdigit()


def test_terminal_reports_a_failing_exit_status_with_its_output(workspace):
    """ok is the exit status being 0; stderr is part of the output."""
    ok, output = execute("terminal", {"command": "ls missing.txt"}, workspace)
    assert ok is False
    assert "missing.txt" in output


def test_terminal_stdin_is_empty(workspace):
    """A program reading stdin gets EOF at once instead of hanging."""
    assert execute("terminal", {"command": "cat"}, workspace) == (True, "")


def test_terminal_uses_a_minimal_environment(workspace, monkeypatch):
    """The child sees only PATH and LANG."""
    monkeypatch.setattr(tools, "ALLOWED_PROGRAMS", tools.ALLOWED_PROGRAMS | {"env"})
    monkeypatch.setenv("SECRET_TOKEN", "do-not-leak")
    assert execute("terminal", {"command": "env"}, workspace) == (
        True,
        "PATH=/usr/bin:/bin\nLANG=C.UTF-8\n",
    )


def test_terminal_output_is_capped_at_64_kib(workspace):
    """Output past 65536 bytes is cut and marked; the exit status still counts."""
    assert execute("write_file", {"path": "big.txt", "text": "x" * 200_000}, workspace)[0]
    ok, output = execute("terminal", {"command": "cat big.txt"}, workspace)
    assert ok is True
    assert output == "x" * tools.OUTPUT_CAP + tools.TRUNCATED_MARKER


def test_terminal_kills_a_command_at_the_timeout(workspace, monkeypatch):
    """A command running past the timeout is killed and reported as failed."""
    monkeypatch.setattr(tools, "ALLOWED_PROGRAMS", tools.ALLOWED_PROGRAMS | {"sleep"})
    monkeypatch.setattr(tools, "TERMINAL_TIMEOUT", 0.3)
    began = time.monotonic()
    ok, output = execute("terminal", {"command": "sleep 30"}, workspace)
    assert ok is False
    assert "timed out" in output
    assert time.monotonic() - began < 10


def terminal_refusal_cases(workspace: Path, outside: Path) -> list[str]:
    (workspace / "link").symlink_to(outside / "secret.txt")
    (workspace / "linkdir").symlink_to(outside)
    (workspace / "list0").write_bytes(b"link\0")
    return [
        "rm -rf .",
        "touch created",
        "sh -c 'touch created'",
        "/bin/ls",
        "/usr/bin/echo hi",
        "./ls",
        f"ls {outside}",
        f"cat {outside}/secret.txt",
        "cat ../outside/secret.txt",
        "ls sub/../..",
        "cat ..",
        "cat link",
        "ls linkdir",
        "wc linkdir/secret.txt",
        f"ls --hide={outside}",
        "date -f link",
        "date -uflink",
        "date --file=link",
        "date --refer=link",
        "date -s 2001-01-01",
        "date --set=2001-01-01",
        "wc --files0-from=list0",
        "wc --files0=list0",
        "ls -L",
        "ls -lRL",
        "ls --deref",
        "echo 'unbalanced",
    ]


@pytest.mark.parametrize("index", range(27))
def test_terminal_refuses_commands_without_running_anything(
    workspace, outside, tmp_path, no_process, index
):
    """Off-list programs, paths, '..', symlinks out, file-reading options: nothing runs."""
    cases = terminal_refusal_cases(workspace, outside)
    assert len(cases) == 27
    before = snapshot(tmp_path)
    ok, output = execute("terminal", {"command": cases[index]}, workspace)
    assert ok is False
    assert output
    assert no_process == []
    assert snapshot(tmp_path) == before


def test_terminal_allows_harmless_options_and_symlinks_inside(workspace):
    """Options with values and paths that stay inside are not refused."""
    (workspace / "sub").mkdir()
    (workspace / "sub" / "a.txt").write_text("a\n")
    (workspace / "alias").symlink_to(workspace / "sub" / "a.txt")
    assert execute("terminal", {"command": "cat alias"}, workspace) == (True, "a\n")
    assert execute("terminal", {"command": "ls -1 --hide=alias ."}, workspace) == (
        True,
        "sub\n",
    )
    assert execute("terminal", {"command": "date -d @0 -u +%Y"}, workspace) == (True, "1970\n")


@pytest.mark.parametrize("path", ["link.txt", "linkdir/new.txt", "sub/inner/new.txt"])
def test_write_refuses_a_symlink_swapped_in_after_the_checks(
    workspace, outside, tmp_path, monkeypatch, path
):
    """The final open follows no symlink, so a race past the checks writes nothing."""
    write_refusal_cases(workspace, outside)
    # As if each symlink appeared between the checks and the open.
    monkeypatch.setattr(tools, "write_parts", lambda path, root: path.split("/"))
    before = snapshot(tmp_path)
    ok, output = execute("write_file", {"path": path, "text": "pwned"}, workspace)
    assert ok is False and output
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize(
    "command",
    [
        "date 010100002000",
        "date -u 010100002000",
        "date -- 0101",
        "date +%s 0101",
        "date --se=2001-01-01",
        "date --s 2001-01-01",
        "date -d",
        "date --debug",
        "pwd somewhere",
        "ls --dereference-command-line",
        "ls -H",
        "cat --help-me",
        "wc --files0",
    ],
)
def test_terminal_allows_only_listed_options_and_operands(workspace, no_process, command):
    """Allow-list per program: a clock-setting date operand, a long-option prefix or any
    unlisted option is refused before anything runs."""
    ok, output = execute("terminal", {"command": command}, workspace)
    assert ok is False and output
    assert no_process == []


@pytest.mark.parametrize(
    "command, expected",
    [
        ("date -u -d @0 +%Y", "1970\n"),
        ("date --date=@0 --utc +%Y", "1970\n"),
        ("date -u -d @0 -Iminutes", "1970-01-01T00:00+00:00\n"),
        ("echo -n -hello", "-hello"),
        ("echo -- x", "-- x\n"),
    ],
)
def test_terminal_read_only_options_still_work(workspace, command, expected):
    """Formats, --date, -I with a glued value and echo's words are allowed."""
    assert execute("terminal", {"command": command}, workspace) == (True, expected)


def test_a_write_past_the_workspace_byte_quota_is_refused(tmp_path, settings):
    """AGENT_WORKSPACE_MAX_BYTES: a write that would pass it is refused with
    the figures, and the file is untouched."""
    settings.AGENT_WORKSPACE_MAX_BYTES = 100
    assert execute("write_file", {"path": "a.txt", "text": "x" * 60}, tmp_path)[0]
    ok, message = execute("write_file", {"path": "a.txt", "text": "y" * 60}, tmp_path)
    assert not ok and "quota" in message and "100" in message
    assert (tmp_path / "a.txt").read_text() == "x" * 60 + "\n"


def test_new_files_past_the_workspace_file_quota_are_refused(tmp_path, settings):
    """AGENT_WORKSPACE_MAX_FILES counts files and directories; appending to a
    file that exists is still allowed at the limit."""
    settings.AGENT_WORKSPACE_MAX_FILES = 3
    for name in ("a", "b", "c"):
        assert execute("write_file", {"path": name, "text": "1"}, tmp_path)[0]
    ok, message = execute("write_file", {"path": "d", "text": "1"}, tmp_path)
    assert not ok and "quota" in message and not (tmp_path / "d").exists()
    ok, message = execute("write_file", {"path": "sub/e", "text": "1"}, tmp_path)
    assert not ok and not (tmp_path / "sub").exists()
    assert execute("write_file", {"path": "a", "text": "2"}, tmp_path)[0]
