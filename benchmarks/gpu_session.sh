#!/usr/bin/env bash
# The GPU checks in one script, for a GPU machine held for a few minutes. Each step has its own
# time limit, so one slow step cannot eat the others; what it measures is written under OUT.
#
#   OUT=/tmp/gpu-out bash benchmarks/gpu_session.sh [timer] [profile] [align] [proof] [interrupt]   (default: all)
#
# Steps:
#   timer      gac agent platform and selftest; benchmarks/gpu_timer.py (ours vs do_bench, synced, graph; rate)
#   profile    the quick plan twice, back to back: does the largest step repeat?
#   align      examples/llama3-8b-asvd-r15.json --profile-missing from an empty database, end to end
#   proof      gac proof --device cuda:0 (the decoder at Llama-3-8B's dims, quick)
#   interrupt  gac profile --plan paper stopped by SIGTERM after 15 s, then run again: what was kept and skipped
#
# Where the machine lacks the service stack, wheels in .gpu/whl are installed first (see
# docs/architecture.md, "Developing without a GPU").
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/gac-gpu-out}"
mkdir -p "$OUT"
DEVICE="${DEVICE:-cuda:0}"
PY="${PYTHON:-python3}"

if [ -d .gpu/whl ] && ! "$PY" -c "import fastapi, sqlalchemy, ortools" 2>/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .gpu/whl/*.whl
  export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# What gets installed is one namespace, `gac`, whose parts are this repository's folders (gac.service is
# service/, ...): the mapping takes an install. Editable, from this checkout, with the setuptools (>= 77)
# carried in .gpu/whl when the machine's own is older.
if ! "$PY" -c "import gac.service, gac.agent, gac.solver" 2>/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 \
    || { echo "could not install this checkout (see $OUT/install.log; carry setuptools>=77 in .gpu/whl)"; exit 1; }
fi
export GAC_DATA_DIR="${GAC_DATA_DIR:-/tmp/gac-gpu-data}"
gac() { "$PY" -m gac "$@"; }

step() {  # step NAME LIMIT_S COMMAND...: run with a limit, keep its output, say how long it took
  local name=$1 limit=$2
  shift 2
  echo "== $name (limit ${limit}s)"
  local t0=$SECONDS
  timeout --signal=TERM --kill-after=10 "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "   rc=$rc in $((SECONDS - t0)) s"
  tail -n 25 "$OUT/$name.log"
}

steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(timer profile align proof interrupt)
for s in "${steps[@]}"; do
  case "$s" in
    timer)
      step platform 60 gac agent platform --device "$DEVICE"
      step selftest 180 gac agent selftest --device "$DEVICE"
      step gpu_timer 240 "$PY" benchmarks/gpu_timer.py --device "$DEVICE" --runs 3
      ;;
    profile)
      step quick-1 90 gac profile --plan quick --device "$DEVICE"
      GAC_DATA_DIR="$GAC_DATA_DIR-2" step quick-2 90 gac profile --plan quick --device "$DEVICE"
      ;;
    align)
      rm -rf "$GAC_DATA_DIR-align"
      GAC_DATA_DIR="$GAC_DATA_DIR-align" step align-8b 420 \
        gac align examples/llama3-8b-asvd-r15.json --profile-missing --yes --device "$DEVICE"
      cp "$GAC_DATA_DIR-align/gac.db" "$OUT/align-8b.db" 2>/dev/null || true
      ;;
    proof)
      step proof 420 gac proof --device "$DEVICE" --model llama8b --compressor all --quick
      ;;
    interrupt)
      rm -rf "$GAC_DATA_DIR-int"
      GAC_DATA_DIR="$GAC_DATA_DIR-int" step interrupt-1 15 gac profile --plan paper --device "$DEVICE"
      GAC_DATA_DIR="$GAC_DATA_DIR-int" step interrupt-2 90 gac profile --plan paper --device "$DEVICE"
      ;;
    *) echo "unknown step $s (timer, profile, align, proof, interrupt)"; exit 2 ;;
  esac
done
