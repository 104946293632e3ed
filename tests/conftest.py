"""Where the shared fixtures are (each module says what it holds):

- tests/fixtures/database.py: BACKENDS (GAC_TEST_BACKENDS=sqlite or postgres narrows the run; the
  default is both), a fresh database per backend, and `settings`, `app`, `client`, `session` over it
- tests/fixtures/tokens.py: `make_token`, and `ingest_token`, `admin_token`, `read_token`
- tests/fixtures/live_service.py: `LiveService` and `live_service`, the real service under uvicorn
- tests/fixtures/progress.py: a line per file (its letters, the share done) under pytest-xdist's workers
- tests/factories.py: builders of valid wire objects, and `refused` for error answers
"""

from __future__ import annotations

import os

# The suite times this machine's CPU (the tests that need a GPU name their device): the same on a GPU box.
os.environ["GAC_DEVICE"] = "cpu"

pytest_plugins = ["tests.fixtures.database", "tests.fixtures.tokens", "tests.fixtures.live_service", "tests.fixtures.progress"]
