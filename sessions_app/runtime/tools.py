"""The two built-in tools (entries of the registry, ``runtime.registry``),
and the session workspaces every tool acts in.

The runtime, never an agent, executes a call once it is approved. Both tools
are confined to the session's workspace directory: ``write_file`` only
appends inside it, ``terminal`` only runs a fixed list of harmless programs
there, without a shell. Anything that could leave the workspace is refused
before anything is touched, and bad input is reported as ``(False, reason)``
instead of raised.
"""

from __future__ import annotations

import contextlib
import os
import select
import shlex
import shutil
import signal
import stat
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from django.conf import settings

from sessions_app.runtime.journal import CallBusy, StaleHolder, attempt, remove_journal
from sessions_app.runtime.quota import Refused, check_quota
from sessions_app.runtime.registry import Tool
from sessions_app.wire.protocol import is_session_id

ALLOWED_PROGRAMS = frozenset({"echo", "ls", "cat", "wc", "date", "pwd"})
TERMINAL_TIMEOUT = 10.0
OUTPUT_CAP = 65536
TRUNCATED_MARKER = "\n[output truncated]"
TERMINAL_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}

MAX_PATH_CHARS = 1024
MAX_TEXT_CHARS = 1_000_000
MAX_COMMAND_CHARS = 4096


@dataclass(frozen=True)
class _Spec:
    """What one allowed program may be given: an allow-list, never a deny-list.

    ``short``/``long``: options that only change what is shown. ``short_value``
    and ``long_value``: options that take a value (glued on, ``-dnow``,
    ``--date=now``, or the next argument). ``operands``: ``paths`` (files
    inside the workspace), ``text`` (echo's words), ``format`` (date's
    ``+FORMAT`` only: any other operand of date sets the clock) or ``none``.
    Long options must be spelled in full: GNU's prefix matching would let
    ``--se`` mean ``--set``.
    """

    short: str = ""
    short_value: str = ""
    long: frozenset[str] = frozenset()
    long_value: frozenset[str] = frozenset()
    operands: str = "paths"


_SPECS = {
    "echo": _Spec(short="neE", operands="text"),
    "ls": _Spec(
        short="aAlh1RStrsdFpinogGQmxCcuUXv",
        short_value="ITw",
        long=frozenset(
            {"--all", "--almost-all", "--human-readable", "--recursive", "--reverse", "--size"}
            | {"--directory", "--classify", "--inode", "--numeric-uid-gid", "--literal"}
        ),
        long_value=frozenset({"--hide", "--ignore", "--sort", "--time-style", "--width"}),
    ),
    "cat": _Spec(
        short="AbeEnstTuv",
        long=frozenset({"--show-all", "--number-nonblank", "--show-ends", "--number"})
        | frozenset({"--squeeze-blank", "--show-tabs", "--show-nonprinting"}),
    ),
    "wc": _Spec(
        short="cmlwL",
        long=frozenset({"--bytes", "--chars", "--lines", "--words", "--max-line-length"}),
    ),
    "date": _Spec(
        short="uRI",
        short_value="d",
        long=frozenset({"--utc", "--universal", "--rfc-email", "--iso-8601"}),
        long_value=frozenset({"--date", "--iso-8601", "--rfc-3339"}),
        operands="format",
    ),
    "pwd": _Spec(short="LP", operands="none"),
}
# A program added to ALLOWED_PROGRAMS without a spec takes no option at all.
_NO_OPTIONS = _Spec()
# date -I takes an optional value glued on (-Ihours); nothing else follows it.
_OPTIONAL_GLUED = {"date": "I"}

_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


def remove_workspace(session_id: str) -> None:
    """Delete the session's workspace (with its session: nothing of a deleted
    session stays on disk). Never follows a symlink out of the workspaces."""
    if not is_session_id(session_id):
        return
    path = Path(settings.AGENT_WORKSPACES) / session_id
    if path.is_symlink():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    remove_journal(path)


def workspace_for(session_id: str) -> Path:
    """The session's workspace directory, created if missing."""
    # No dot or slash can get through: an id names only a direct child.
    if not is_session_id(session_id):
        raise ValueError("invalid session id")
    path = Path(settings.AGENT_WORKSPACES) / session_id
    # Other local users have no business reading a session's files.
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


class WriteFile(Tool):
    """``write_file``: append a line of text to a file inside the workspace."""

    name = "write_file"
    description = "Append TEXT and a newline to a file in the workspace."
    parameters = {
        "type": "object",
        "properties": {
            "path": {
                "type": "string",
                "description": "Relative path inside the workspace, e.g. notes.txt",
            },
            "text": {"type": "string", "description": "The text to append."},
        },
        "required": ["path", "text"],
        "additionalProperties": False,
    }
    display = [{"arg": "path", "label": "path", "as": "code"}, {"arg": "text", "as": "block"}]
    # Run again for the same call, it appends once (runtime.journal).
    idempotent = True

    def validate(self, args: Any) -> str | None:
        problem = super().validate(args)
        if problem:
            return problem
        if not args["path"]:
            return "path is empty"
        if len(args["path"]) > MAX_PATH_CHARS:
            return "path is too long"
        if len(args["text"]) > MAX_TEXT_CHARS:
            return "text is too long"
        return None

    def execute(self, args: dict[str, Any], workspace: Path) -> tuple[bool, str]:
        return self.execute_call(args, workspace, "")

    def execute_call(self, args: dict[str, Any], workspace: Path, call_id: str) -> tuple[bool, str]:
        try:
            return _write_file(args["path"], args["text"], workspace, call_id)
        except Refused as refused:
            return False, str(refused)


class Terminal(Tool):
    """``terminal``: one harmless command in the workspace, without a shell."""

    name = "terminal"
    description = (
        "Run one command (echo, ls, cat, wc, date or pwd) in the workspace, "
        "without a shell. Returns its output."
    )
    parameters = {
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "e.g. ls -l or cat notes.txt"},
        },
        "required": ["command"],
        "additionalProperties": False,
    }
    display = [{"arg": "command", "as": "command"}]
    # Its commands only read: running one again changes nothing.
    idempotent = True

    def validate(self, args: Any) -> str | None:
        problem = super().validate(args)
        if problem:
            return problem
        if not args["command"].strip():
            return "command is empty"
        if len(args["command"]) > MAX_COMMAND_CHARS:
            return "command is too long"
        return None

    def execute(self, args: dict[str, Any], workspace: Path) -> tuple[bool, str]:
        try:
            return _terminal(args["command"], workspace)
        except Refused as refused:
            return False, str(refused)


# --- write_file -----------------------------------------------------------


def _inside(root: Path, candidate: str) -> bool:
    real = os.path.realpath(candidate)
    return real == str(root) or real.startswith(str(root) + os.sep)


def write_parts(path: str, root: Path) -> list[str]:
    """The path's components, after refusing anything that could leave ``root``."""
    pure = PurePosixPath(path)
    if pure.is_absolute():
        raise Refused(f"absolute paths are not allowed: {path}")
    parts = list(pure.parts)
    if ".." in parts:
        raise Refused(f"'..' is not allowed in paths: {path}")
    if not parts:
        raise Refused(f"the path names no file: {path}")
    current = root
    for index, name in enumerate(parts):
        current = current / name
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            break  # the rest is created below, as real directories
        shown = "/".join(parts[: index + 1])
        if stat.S_ISLNK(info.st_mode):
            raise Refused(f"symlinks are not allowed: {shown}")
        if index < len(parts) - 1 and not stat.S_ISDIR(info.st_mode):
            raise Refused(f"not a directory: {shown}")
        if index == len(parts) - 1 and not stat.S_ISREG(info.st_mode):
            raise Refused(f"not a regular file: {shown}")
    if not _inside(root, os.path.join(root, *parts)):
        raise Refused(f"the path leaves the workspace: {path}")
    return parts


def _append(fd: int, data: bytes, root: Path, call_id: str) -> None:
    """Append ``data`` as one attempt of ``call_id``: what an earlier attempt
    appended is cut back first, under the call's lock, unless a newer holder
    of the run made its own (``journal``: then this one writes nothing)."""
    try:
        with attempt(root, call_id, lambda: os.fstat(fd).st_size) as before:
            if before < os.fstat(fd).st_size:
                os.ftruncate(fd, before)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
    except StaleHolder:
        raise Refused(
            "not written: this worker lost the run, and its new holder ran the call"
        ) from None
    except CallBusy:
        raise Refused(
            "unknown: another attempt of this call (a stalled worker) still holds "
            "it, and whether that one takes effect is unknown; this one wrote nothing"
        ) from None


def _write_file(path: str, text: str, root: Path, call_id: str = "") -> tuple[bool, str]:
    parts = write_parts(path, root)
    data = (text + "\n").encode("utf-8", errors="surrogatepass")
    check_quota(parts, root, len(data))
    # The checks above can race with a concurrent swap of a component for a
    # symlink; walking with directory fds and O_NOFOLLOW closes that window.
    dir_flags = os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC
    dir_fd = os.open(root, dir_flags)
    try:
        for name in parts[:-1]:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o755, dir_fd=dir_fd)
            try:
                next_fd = os.open(name, dir_flags, dir_fd=dir_fd)
            except OSError as exc:
                raise Refused(f"not a plain directory: {name}") from exc
            os.close(dir_fd)
            dir_fd = next_fd
        # O_NONBLOCK: a FIFO without a reader fails instead of hanging the run.
        file_flags = (
            os.O_WRONLY
            | os.O_APPEND
            | os.O_CREAT
            | os.O_NONBLOCK
            | os.O_NOCTTY
            | _O_NOFOLLOW
            | _O_CLOEXEC
        )
        try:
            fd = os.open(parts[-1], file_flags, 0o644, dir_fd=dir_fd)
        except OSError as exc:
            raise Refused(f"cannot open {path}: {exc.strerror}") from exc
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise Refused(f"not a regular file: {path}")
            # A second hard link could be a file outside the workspace.
            if info.st_nlink > 1:
                raise Refused(f"files with several hard links are not allowed: {path}")
            _append(fd, data, root, call_id)
        finally:
            os.close(fd)
    finally:
        os.close(dir_fd)
    return True, f"appended {len(data)} bytes to {'/'.join(parts)}"


# --- terminal -------------------------------------------------------------


def _check_path_like(arg: str) -> None:
    pure = PurePosixPath(arg)
    if pure.is_absolute():
        raise Refused(f"absolute paths are not allowed: {arg}")
    if ".." in pure.parts:
        raise Refused(f"'..' is not allowed in paths: {arg}")


def _check_options(program: str, spec: _Spec, argv: list[str]) -> None:
    """Refuse any option, operand or value the program's spec does not allow."""
    options_done = False
    expect_value = False
    for arg in argv[1:]:
        if expect_value:
            expect_value = False  # the value of the option before it
            continue
        if not options_done and arg == "--" and program != "echo":
            options_done = True
        elif not options_done and arg.startswith("--") and program != "echo":
            name, eq, _ = arg.partition("=")
            allowed = name in spec.long_value if eq else name in spec.long | spec.long_value
            if not allowed:
                raise Refused(f"option not allowed: {name}")
            expect_value = not eq and name in spec.long_value and name not in spec.long
        elif not options_done and _is_short_cluster(program, spec, arg):
            for index, letter in enumerate(arg[1:]):
                if letter in _OPTIONAL_GLUED.get(program, "") and letter in spec.short:
                    break
                if letter in spec.short_value:
                    expect_value = index == len(arg) - 2  # its value is the next argument
                    break
                if letter not in spec.short:
                    raise Refused(f"option not allowed: -{letter}")
        else:
            _check_operand(program, spec, arg)
    if expect_value:
        raise Refused(f"an option of {program} is missing its value")


def _is_short_cluster(program: str, spec: _Spec, arg: str) -> bool:
    if not arg.startswith("-") or arg == "-":
        return False
    # echo prints "-hello" as a word; only all-option clusters are options.
    return program != "echo" or all(letter in spec.short for letter in arg[1:])


def _check_operand(program: str, spec: _Spec, arg: str) -> None:
    if spec.operands == "none":
        raise Refused(f"{program} takes no operands: {arg}")
    if spec.operands == "format" and not arg.startswith("+"):
        raise Refused(f"{program} takes only a +FORMAT operand (anything else sets the clock)")


def _terminal_argv(command: str, root: Path) -> list[str]:
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise Refused(f"cannot parse the command: {exc}") from exc
    if not argv:
        raise Refused("command is empty")
    program = argv[0]
    if program not in ALLOWED_PROGRAMS:
        allowed = ", ".join(sorted(ALLOWED_PROGRAMS))
        raise Refused(f"program not allowed: {program} (allowed: {allowed})")
    _check_options(program, _SPECS.get(program, _NO_OPTIONS), argv)
    for arg in argv[1:]:
        _check_path_like(arg)
        # Catches a symlink inside the workspace that points out of it.
        if not _inside(root, os.path.join(root, arg)):
            raise Refused(f"the path leaves the workspace: {arg}")
        _check_single_link(root, arg)
        name, eq, value = arg.partition("=")
        if arg.startswith("--") and eq:
            _check_path_like(value)
            _check_single_link(root, value)
    return argv


def _check_single_link(root: Path, arg: str) -> None:
    """A file with a second hard link may be one outside the workspace (a
    link made to it from inside): read nothing through it, as ``write_file``
    writes nothing through one."""
    try:
        info = os.lstat(os.path.join(root, arg))
    except OSError:
        return  # not a path (an option, a +FORMAT): nothing to read through
    if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
        raise Refused(f"files with several hard links are not allowed: {arg}")


def _terminal(command: str, root: Path) -> tuple[bool, str]:
    argv = _terminal_argv(command, root)
    executable = next(
        (
            candidate
            for directory in TERMINAL_ENV["PATH"].split(os.pathsep)
            if os.access(candidate := os.path.join(directory, argv[0]), os.X_OK)
        ),
        None,
    )
    if executable is None:
        return False, f"program not installed: {argv[0]}"
    # argv passed the allow-list above; no shell is involved.
    proc = subprocess.Popen(  # noqa: S603
        argv,
        executable=executable,
        cwd=root,
        env=dict(TERMINAL_ENV),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        close_fds=True,
        start_new_session=True,  # its own process group, so a kill gets everything
    )
    try:
        output, truncated, timed_out = _collect(proc, time.monotonic() + TERMINAL_TIMEOUT)
    finally:
        if proc.poll() is None:
            _kill(proc)
        proc.stdout.close()
        proc.wait()
    text = output.decode("utf-8", errors="replace")
    if truncated:
        text += TRUNCATED_MARKER
    if timed_out:
        return False, text + f"\n[timed out after {TERMINAL_TIMEOUT:g} s]"
    return proc.returncode == 0, text


def _collect(proc: subprocess.Popen, deadline: float) -> tuple[bytes, bool, bool]:
    """Read the output up to the cap; past it, drain and discard until EOF."""
    fd = proc.stdout.fileno()
    kept = bytearray()
    truncated = False
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return bytes(kept), truncated, True
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        room = OUTPUT_CAP - len(kept)
        if len(chunk) > room:
            truncated = True
        kept += chunk[: max(room, 0)]
    try:
        proc.wait(timeout=max(deadline - time.monotonic(), 0.001))
    except subprocess.TimeoutExpired:
        return bytes(kept), truncated, True
    return bytes(kept), truncated, False


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
