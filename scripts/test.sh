#!/usr/bin/env bash
# The test suite on both backends: SQLite (always) and the Postgres on 127.0.0.1:5432.
set -euo pipefail
cd "$(dirname "$0")/.."

if pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
  export GAC_TEST_BACKENDS="${GAC_TEST_BACKENDS:-sqlite,postgres}"
elif [ "${GAC_REQUIRE_POSTGRES:-0}" = 1 ]; then
  echo "Postgres is not reachable on 127.0.0.1:5432 and GAC_REQUIRE_POSTGRES=1" >&2
  exit 1
else
  echo "warning: no Postgres on 127.0.0.1:5432: running the SQLite half of the suite only" >&2
  export GAC_TEST_BACKENDS="${GAC_TEST_BACKENDS:-sqlite}"
fi
echo "backends: $GAC_TEST_BACKENDS"
# Lint, layout and types first (configured in pyproject.toml): ruff in a second, mypy in about a minute.
ruff check .
ruff format --check .
# mypy reads the `gac` namespace as installed, through a folder of links (scripts/namespace_tree.py).
(cd "$(python scripts/namespace_tree.py)" && mypy --config-file "$OLDPWD/pyproject.toml")
# pytest's default lines show progress per file (its name, a dot per test, the share done) rather
# than a quarter hour of bare dots; the slowest tests are listed at the end, where the time went.
exec python -m pytest -p no:cacheprovider --durations=15 "$@"
