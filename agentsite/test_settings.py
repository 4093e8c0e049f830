"""Settings for the test suite: the site's own, with a secret key of the run's.

``agentsite.settings`` refuses to start without ``SECRET_KEY`` (production must
set one). A bare ``pytest`` on a fresh clone has none, so this module makes
one for the run, in the environment, before the settings read it: the
servers the tests start (daphne, run workers) inherit it, and the cookies
the tests sign are valid there. ``./scripts/test`` sets its own the same way.
"""

import os
import secrets

os.environ.setdefault("SECRET_KEY", "test-" + secrets.token_hex(16))

from agentsite.settings import *  # noqa: E402, F403 (the site's settings, as they are)

# The scripted agent's /hold waits for its release file here (tests.harness
# Hold): a folder of this run's, which the servers it starts inherit.
if not AGENT_TEST_HOLDS:  # noqa: F405 (from the site's settings)
    import atexit
    import shutil
    import tempfile

    AGENT_TEST_HOLDS = tempfile.mkdtemp(prefix="agent-holds-")
    os.environ["AGENT_TEST_HOLDS"] = AGENT_TEST_HOLDS
    atexit.register(shutil.rmtree, AGENT_TEST_HOLDS, ignore_errors=True)
