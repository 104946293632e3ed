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
tree="$(python scripts/namespace_tree.py)"  # its own line: set -e stops here if it cannot build
(cd "$tree" && mypy --config-file "$OLDPWD/pyproject.toml")
# The tests on two workers (pytest-xdist; GAC_TEST_WORKERS=auto takes a worker per core): a file
# runs whole on one worker, and each worker makes its own databases. Then the tests marked `serial`
# on their own: they time real kernels or load the cores on purpose, and another worker's tests
# beside them would be the very noise they measure. Progress is a line per file (its name, a dot
# per test, the share done: tests/fixtures/progress.py under the workers) rather than bare dots;
# each run lists its slowest tests at its end, where the time went.
parallel=0
python -m pytest -p no:cacheprovider -n "${GAC_TEST_WORKERS:-2}" --dist loadfile -m "not serial" --durations=15 "$@" || parallel=$?
serial=0
python -m pytest -p no:cacheprovider -m serial --durations=15 "$@" || serial=$?
# 5: nothing collected, as when the arguments name tests of one kind only (both 5: nothing ran at all).
if [ "$parallel" = 5 ] && [ "$serial" = 5 ]; then exit 5; fi
[ "$parallel" = 5 ] && parallel=0
[ "$serial" = 5 ] && serial=0
if [ "$parallel" != 0 ]; then exit "$parallel"; fi
exit "$serial"
