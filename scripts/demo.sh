#!/usr/bin/env bash
# The main job, end to end, on the embedded SQLite default:
#   service up -> profile this machine's kernels into it -> align a compressed model against them.
set -euo pipefail
cd "$(dirname "$0")/.."

PORT="${GAC_DEMO_PORT:-8765}"
URL="http://127.0.0.1:${PORT}"
MANIFEST="${1:-examples/cpu-demo-lowrank.json}"
# One timing thread unless THREADS says otherwise, for every step: the thread count is part of the
# platform's fingerprint, so the profile and the points --profile-missing adds must agree on it (an
# agent that picks fewer threads on a busy machine at step 4 than at step 3 profiles another
# platform), and one thread waits on no other, so other work on the machine stalls it least.
THREADS="${THREADS:-1}"

echo "== 1. the service, on the embedded database (GAC_DATA_DIR=${GAC_DATA_DIR:-default})"
gac serve --port "$PORT" > "${TMPDIR:-/tmp}/gac-demo-service.log" 2>&1 &
SERVICE=$!
trap 'kill $SERVICE 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  curl -fsS "$URL/readyz" > /dev/null 2>&1 && break
  kill -0 "$SERVICE" 2>/dev/null || { cat "${TMPDIR:-/tmp}/gac-demo-service.log"; exit 1; }
  sleep 0.2
done
curl -fsS "$URL/readyz"; echo

echo "== 2. an ingest token for this machine's agent"
# The token goes to the agent below, not to the screen (the command prints it on stdout, its note on stderr).
TOKEN=$(gac token create --name "demo-$(hostname)-$(date +%s)" --scope ingest 2> "${TMPDIR:-/tmp}/gac-demo-token.log") ||
  { cat "${TMPDIR:-/tmp}/gac-demo-token.log"; exit 1; }
echo "created token ${TOKEN:0:8}... (scope ingest)"

echo "== 3. the agent: detect this platform (and its fast dtype), time the quick plan's kernels (about a minute)"
# bf16 is emulated on CPUs without AVX512-BF16/AMX (many times slower than float32): profile
# and align in the dtype this platform runs fast, unless DTYPE is set.
PLATFORM_JSON=$(gac agent platform --threads "$THREADS")
PLATFORM=$(echo "$PLATFORM_JSON" | python -c "import json,sys; print(json.load(sys.stdin)['fingerprint'])")
DTYPE="${DTYPE:-$(echo "$PLATFORM_JSON" | python -c "import json,sys; print(json.load(sys.stdin).get('fast_dtype') or 'bfloat16')")}"
gac agent run --server "$URL" --token "$TOKEN" --plan quick --dtype "$DTYPE" --threads "$THREADS"

echo "== 4. align $MANIFEST in $DTYPE on platform ${PLATFORM:0:12}: profile the points it still lacks, then align (minutes: it prints its estimate)"
# --profile-missing times exactly the curve points this alignment needs and the quick plan
# did not cover (each window, the look-ahead, the compressor's own dims), sends them to the
# service, and aligns again: the predicted speed-up is then complete.
gac align "$MANIFEST" --server "$URL" --token "$TOKEN" --platform "$PLATFORM" --dtype "$DTYPE" --threads "$THREADS" --profile-missing --yes
# The service stops with this script; what it stored stays in GAC_DATA_DIR.
echo "== done. To see it on the dashboard: \`gac serve --port $PORT\`, then open $URL/ (alignments: $URL/#/alignments)"
