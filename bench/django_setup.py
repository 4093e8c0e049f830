"""Django for the benchmark scripts: imported first, for its side effect.

Sets up the project the way the tests do: the profile from the environment
(a fresh SQLite file in a temporary directory when neither DATABASE_URL nor
AGENT_VAR_DIR is set), a
throwaway SECRET_KEY (a benchmark signs nothing that outlives it), and ORM
calls allowed around the client's event loop.
"""

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
if "DATABASE_URL" not in os.environ and "AGENT_VAR_DIR" not in os.environ:
    os.environ["AGENT_VAR_DIR"] = tempfile.mkdtemp(prefix="agent-bench-")
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
os.environ.setdefault("SECRET_KEY", "bench-" + os.urandom(16).hex())

import django  # noqa: E402

django.setup()
