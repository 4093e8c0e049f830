"""Settings: safe by default, nothing written on import, secrets kept private."""

from __future__ import annotations

import os
import secrets
import stat
import subprocess
import sys

import pytest
from django.core.management import call_command

from tests.harness import ROOT


def _settings_value(tmp_path, expr: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "DEBUG", "HTTPS")}
    base.update(AGENT_VAR_DIR=str(tmp_path / "var"), DJANGO_SETTINGS_MODULE="agentsite.settings")
    base.update(env)
    code = f"import django; django.setup(); from django.conf import settings; print({expr})"
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=base, capture_output=True, text=True
    )


def test_debug_is_off_unless_asked_for(tmp_path):
    """No DEBUG in the environment means DEBUG off, whether or not SECRET_KEY is set."""
    out = _settings_value(tmp_path, "settings.DEBUG", SECRET_KEY="k" * 50)
    assert out.stdout.strip() == "False", out.stderr
    out = _settings_value(tmp_path, "settings.DEBUG", SECRET_KEY="k" * 50, DEBUG="1")
    assert out.stdout.strip() == "True", out.stderr


def test_no_secret_key_is_a_clear_error_and_writes_nothing(tmp_path):
    """Without SECRET_KEY or the key file, start-up fails saying what to do; the
    import creates no file or directory."""
    out = _settings_value(tmp_path, "settings.SECRET_KEY")
    assert out.returncode != 0
    assert "SECRET_KEY is not set" in out.stderr and "./scripts/run" in out.stderr
    assert not (tmp_path / "var").exists()


@pytest.mark.parametrize(
    "name, value",
    [
        ("HTTPS", "1  # behind nginx"),
        ("TRUST_X_FORWARDED_PROTO", "yes, please"),
        ("REDIS_URL", "redis://127.0.0.1:6379/0  # the channel layer"),
        ("NUM_PROXIES", "1 # nginx"),
        ("AGENT_TOKEN_DAYS", "30 # a month"),
    ],
)
def test_a_setting_with_trailing_junk_stops_the_start(tmp_path, name, value):
    """An env file's inline comment (systemd keeps it in the value) is refused
    at start-up, naming the variable: ``HTTPS=1  # …`` never reads as off."""
    out = _settings_value(tmp_path, "settings.DEBUG", SECRET_KEY="k" * 50, **{name: value})
    assert out.returncode != 0
    assert f"{name}=" in out.stderr and "comments on lines of their own" in out.stderr


def test_proxy_header_and_https_only_when_configured(tmp_path):
    """X-Forwarded-Proto is trusted only with TRUST_X_FORWARDED_PROTO=1; secure
    cookies and redirects only with HTTPS=1."""
    expr = (
        "getattr(settings, 'SECURE_PROXY_SSL_HEADER', None), "
        "settings.SESSION_COOKIE_SECURE, settings.SECURE_SSL_REDIRECT"
    )
    out = _settings_value(tmp_path, expr, SECRET_KEY="k" * 50)
    assert out.stdout.strip() == "None False False", out.stderr
    out = _settings_value(
        tmp_path, expr, SECRET_KEY="k" * 50, HTTPS="1", TRUST_X_FORWARDED_PROTO="1"
    )
    assert out.stdout.strip() == "('HTTP_X_FORWARDED_PROTO', 'https') True True", out.stderr


@pytest.mark.django_db
def test_demo_password_file_is_private(settings, tmp_path):
    """The demo superuser's password is written 0600."""
    settings.VAR_DIR = tmp_path / "var"
    call_command("ensure_demo_user", stdout=open(os.devnull, "w"))  # noqa: SIM115
    mode = stat.S_IMODE((tmp_path / "var" / "demo_password").stat().st_mode)
    assert mode == 0o600


def test_workspaces_are_private(settings, tmp_path):
    """A session's workspace directory is 0700."""
    from sessions_app.runtime.tools import workspace_for

    settings.AGENT_WORKSPACES = tmp_path / "ws"
    path = workspace_for("s_private")
    assert stat.S_IMODE(path.stat().st_mode) == 0o700


def test_agent_runner_typo_fails_at_start(tmp_path):
    """AGENT_RUNNER is 'embedded' or 'worker'; anything else stops start-up, saying so."""
    out = _settings_value(
        tmp_path, "settings.AGENT_RUNNER", SECRET_KEY="k" * 50, AGENT_RUNNER="wrker"
    )
    assert out.returncode != 0 and "AGENT_RUNNER must be 'embedded' or 'worker'" in out.stderr


def test_check_deploy_is_clean_with_the_runbooks_env_file(tmp_path):
    """``manage.py check --deploy`` with docs/deploy.md's env file (its
    settings that change checks; services and paths aside) reports nothing."""
    runbook = (ROOT / "docs" / "deploy.md").read_text()
    block = runbook.split("```sh\nDATABASE_URL=", 1)[1].split("```", 1)[0]
    # Where the SQLite file lives: Django 6.1's checks open the database.
    (tmp_path / "var").mkdir()
    env = {
        "SECRET_KEY": secrets.token_urlsafe(50),
        "AGENT_VAR_DIR": str(tmp_path / "var"),
        "AGENT_WORKSPACES": str(tmp_path / "ws"),
    }
    keep = ("ALLOWED_HOSTS", "HTTPS", "TRUST_X_FORWARDED_PROTO", "NUM_PROXIES", "SERVE_STATIC")
    for line in block.splitlines():
        name, _, value = line.partition("=")
        if name in (*keep, "SILENCED_SYSTEM_CHECKS"):
            env[name] = value
    assert env["SILENCED_SYSTEM_CHECKS"] == "security.W005,security.W021"
    unset = ("SECRET_KEY", "DEBUG", "HTTPS", "DJANGO_ALLOW_ASYNC_UNSAFE")
    base = {k: v for k, v in os.environ.items() if k not in unset}
    done = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env={**base, **env, "DJANGO_SETTINGS_MODULE": "agentsite.settings"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues" in done.stdout


def test_hsts_preload_and_subdomains_are_opt_in(tmp_path):
    """HTTPS=1 turns HSTS on for the host alone; preload and subdomains, hard
    to undo, only when asked for."""
    expr = (
        "settings.SECURE_HSTS_SECONDS, settings.SECURE_HSTS_PRELOAD, "
        "settings.SECURE_HSTS_INCLUDE_SUBDOMAINS"
    )
    out = _settings_value(tmp_path, expr, SECRET_KEY="k" * 50, HTTPS="1")
    assert out.stdout.strip() == "31536000 False False", out.stderr
    out = _settings_value(
        tmp_path,
        expr,
        SECRET_KEY="k" * 50,
        HTTPS="1",
        SECURE_HSTS_PRELOAD="1",
        SECURE_HSTS_INCLUDE_SUBDOMAINS="1",
    )
    assert out.stdout.strip() == "31536000 True True", out.stderr


def _lib(call: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "LISTEN_BACKLOG")}
    base.update(env)
    return subprocess.run(
        ["bash", "-c", f"source scripts/lib.sh; {call}"],
        cwd=ROOT,
        env=base,
        capture_output=True,
        text=True,
    )


@pytest.mark.parametrize(
    "host, env, debug",
    [
        ("127.0.0.1", {}, "1"),
        ("localhost", {}, "1"),
        ("[::1]", {}, "1"),
        ("0.0.0.0", {}, "0"),
        ("192.0.2.7", {}, "0"),
        ("127.0.0.1.nip.io", {}, "0"),
        ("127.0.0.300", {}, "0"),
        ("0.0.0.0", {"DEBUG": "1"}, "1"),
        ("127.0.0.1", {"DEBUG": "0"}, "0"),
    ],
)
def test_run_keeps_debug_for_loopback_only(host, env, debug):
    """./scripts/run: DEBUG on for a loopback HOST, off for any other (and
    says so), unless DEBUG is set."""
    out = _lib(f"debug_for_host '{host}'", **env)
    assert out.stdout.strip() == debug
    assert ("not loopback" in out.stderr) == (host not in ("127.0.0.1", "localhost", "[::1]"))


def test_run_listens_with_a_large_backlog():
    """./scripts/run's daphne endpoint: the host, the port and a 4096 backlog
    (IPv6 escaped as Twisted wants)."""
    assert _lib("daphne_endpoint 127.0.0.1 8000").stdout.strip() == (
        "tcp:port=8000:interface=127.0.0.1:backlog=4096"
    )
    assert _lib("daphne_endpoint '[::1]' 8000").stdout.strip() == (
        "tcp6:port=8000:interface=\\:\\:1:backlog=4096"
    )
    assert "backlog=8192" in _lib("daphne_endpoint 0.0.0.0 80", LISTEN_BACKLOG="8192").stdout


def _documented_settings() -> set[str]:
    """The names in docs/deployment.md's configuration table (first column)."""
    import re

    text = (ROOT / "docs" / "deployment.md").read_text()
    table = text.split("## Configuration", 1)[1].split("\n### ", 1)[0]
    names = set()
    for line in table.splitlines():
        if line.startswith("| `"):
            names |= set(re.findall(r"`([A-Z][A-Z0-9_]+)`", line.split("|")[1]))
    return names


def test_the_deployment_guide_lists_every_setting():
    """Every app setting (``conf.DEFAULTS``) and every setting the site reads
    from the environment is in docs/deployment.md's configuration table, and
    the table names nothing that does not exist."""
    import re

    from sessions_app.conf import DEFAULTS

    listed = _documented_settings()
    source = (ROOT / "agentsite" / "settings.py").read_text()
    from_env = set(
        re.findall(
            r'(?:_env_bool|_env_list|_env_url|_env_int|environ\.get)\("([A-Z][A-Z0-9_]+)"', source
        )
    )
    from_env |= set(re.findall(r'_app\("([A-Z][A-Z0-9_]+)"\)', source))
    script_env = {"HOST", "PORT", "LISTEN_BACKLOG"}  # ./scripts/run's own
    # OpenTelemetry's own variables, read where tracing is set up.
    tracing = (ROOT / "sessions_app" / "server" / "tracing.py").read_text()
    from_env |= set(re.findall(r'"(OTEL_[A-Z0-9_]+)"', tracing))
    missing = (set(DEFAULTS) | from_env) - listed
    assert not missing, f"not in docs/deployment.md's table: {sorted(missing)}"
    unknown = listed - set(DEFAULTS) - from_env - script_env
    assert not unknown, f"in docs/deployment.md's table but read nowhere: {sorted(unknown)}"


def test_the_runbooks_env_file_has_its_comments_on_their_own_lines():
    """docs/deploy.md's /etc/agents/env, as systemd would read it: every line is
    a comment or NAME=VALUE with no inline comment, so every value is whole."""
    import re

    text = (ROOT / "docs" / "deploy.md").read_text()
    block = text.split("`/etc/agents/env`", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    for line in block.strip().splitlines():
        if line.startswith("#"):
            continue
        assert re.fullmatch(r"[A-Z][A-Z0-9_]*=[^\s#]+", line), line


def test_redis_url_may_name_several_hosts_and_memberships_expire_in_minutes(tmp_path):
    """``REDIS_URL`` with commas gives the channel layer every host (the cache
    the first); with Redis a group membership lives 300 s unless renewed (what
    a killed process leaves expires in minutes), without it a day."""
    urls = "redis://127.0.0.1:6379/0,redis://127.0.0.1:6380/0"
    expr = (
        "[h['address'] for h in settings.CHANNEL_LAYERS['default']['CONFIG'].get('hosts')],"
        "settings.CHANNEL_LAYERS['default']['CONFIG']['group_expiry'],"
        "settings.CACHES['default']['LOCATION']"
    )
    out = _settings_value(tmp_path, expr, SECRET_KEY="k" * 50, REDIS_URL=urls)
    assert out.stdout.strip() == (
        "['redis://127.0.0.1:6379/0', 'redis://127.0.0.1:6380/0'] 300 redis://127.0.0.1:6379/0"
    ), out.stderr
    expr = "settings.CHANNEL_LAYERS['default']['CONFIG']['group_expiry']"
    out = _settings_value(tmp_path, expr, SECRET_KEY="k" * 50, REDIS_URL="")
    assert out.stdout.strip() == "86400", out.stderr
    out = _settings_value(tmp_path, expr, SECRET_KEY="k" * 50, REDIS_URL=",")
    assert out.returncode != 0 and "names no Redis URL" in out.stderr
