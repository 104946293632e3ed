#!/usr/bin/env bash
# The GPU checks in one script, for a GPU machine held for a few minutes. Each step has its own
# time limit, clipped to what is left of the whole run's (DEADLINE_S), so one slow step cannot eat
# the others; every log goes into one archive, OUT/gpu-session.tgz, refreshed after each step
# (what a lease returns is a few files, and a run stopped at its limit still returns the archive).
#
#   OUT=/tmp/gpu-out DEADLINE_S=540 bash benchmarks/gpu_session.sh [STEP...]
#   (default: timer selftest profile align interrupt proof proof-fp16)
#
# Steps:
#   timer      gac agent platform; benchmarks/gpu_timer.py (ours vs do_bench, chained, synced, graph; profiling rate)
#   timer-small the kernels of a few us only, with a 256 MB flush beside ours (do_bench's size)
#   why        the small kernels: ours against do_bench and copies of its loop, one factor at a time, SM clock beside
#   align-stop the Llama-3-8B alignment from an empty database stopped by SIGKILL, then run again: kept and skipped
#   selftest   gac agent selftest (repeatability on small kernels, the L2 flush)
#   profile    the quick plan twice, back to back: does the largest step repeat?
#   align      examples/llama3-8b-asvd-r15.json --profile-missing from an empty database, end to end
#   align-dense the same with --exhaustive (every dim of every window), from another empty database; run after
#              align, it prints both runs' points, times and estimates side by side
#   align-jobs the same alignment through the fleet's path, from an empty database: `gac serve`, an agent following
#              its queue on the GPU (`gac agent run --jobs --follow`), `gac align --enqueue-missing --wait`; run after
#              align, it prints the agent's jobs beside the local run's points and times (JOBS_MANIFEST: another one)
#   interrupt  the paper plan stopped by SIGTERM, then by SIGKILL, then again by SIGTERM: what was kept and skipped
#   proof      gac proof --device cuda:0 on the decoder at Llama-3-8B's dims (quick; the device's fast dtype),
#              each pass a CUDA graph's replay
#   proof-eager that run's variants re-timed with the host launching every kernel (--retime --eager)
#   proof-fp16 the same in float16 (proof-fp16-asvd, -prune, -palu: one compressor)
#   proof-2048 ASVD in float16 at prefill 1,024 and 2,048 tokens and decode (proof-2048-all: every compressor, bf16)
#   proof-2048-pp pruning and PaLU (bf16) at prefill 1,024 and 2,048 tokens and decode, one run each
#   kernels    benchmarks/in_model_kernels.py --whole on the saved runs in RUNS (default .gpu-runs), else this session's:
#              proof-2048-palu.json (decode), proof-2048-prune.json and proof-minilm.json (prefill, with .gpu-minilm): the
#              kernels of the linears in place, alone and in the whole step, unaligned against round-to-8, GAC or a second instance
#   swaps      benchmarks/in_model_swaps.py on the PaLU run (as kernels picks it): GAC latency-aware's dims swapped
#              into the unaligned decode step one projection at a time, in and out, and again under the trace:
#              which weights carry the step's loss, and whether it stays under the trace
#   proof-no-slower PaLU with --no-slower: no timed setting predicted slower than the compressor's dims
#   minilm     gac proof --model minilm (both compressors, quick); its trained weights from GAC_MINILM_DIR
#              (default .gpu-minilm: config.json, tokenizer.json, model.safetensors); minilm-warm: profiled with
#              the L2 warm (--profile-l2 warm), as a model that fits in the L2 runs
#   cuda-tests the proof's tests that run only where there is a GPU (CUDA graphs, the tiny proof on CUDA)
#   chain      benchmarks/in_model_linears.py on the saved Llama-3-8B run (as kernels picks it), PaLU and ASVD at decode:
#              does the agent's kernel timed in chains (8 calls back to back, new weights each call) save what
#              the linears save in place, where cold, warm and alone call it a wash?
#   proof-chain gac proof on the decoder at Llama-3-8B's dims (PaLU, quick), profiled with --profile-l2 chain,
#              then its PaLU decode swap by swap (in_model_swaps, against the chained profile's deltas)
#   inplace    benchmarks/in_model_linears.py on saved runs in RUNS (default .gpu-runs), else this session's:
#              proof-minilm.json (ASVD, prefill) and proof-llama8b.json (PaLU, decode); the compressed
#              linears in place (one graph) against each alone, and the agent's kernel cold and warm
#
# Where the machine lacks the service stack, wheels in .gpu/whl are installed first (see
# docs/architecture.md, "Developing without a GPU").
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/gac-gpu-out}"
LOGS="${LOGS:-/tmp/gac-gpu-logs}"
DEADLINE_S="${DEADLINE_S:-3600}"
mkdir -p "$OUT" "$LOGS"
DEVICE="${DEVICE:-cuda:0}"
PY="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1

pack() {  # GNU tar exits 1 where a log grew while it read it (a service still running): the archive holds the rest
  tar --warning=no-file-changed -czf "$OUT/gpu-session.tgz.part" -C "$LOGS" .
  [ $? -le 1 ] && mv "$OUT/gpu-session.tgz.part" "$OUT/gpu-session.tgz"
}
# Stopped from outside (a limit shorter than DEADLINE_S), the logs so far still go into the archive.
trap pack EXIT
# A step runs in the background and is waited for: bash runs a trap only once its foreground command ends, and
# timeout puts itself in a process group of its own, so a stop sent to the script would wait out the step's limit.
STEP_PID=
trap 'echo "== stopped by a signal"; [ -n "$STEP_PID" ] && kill -TERM "$STEP_PID" 2>/dev/null; exit 143' TERM INT

# A second call on a machine still held finds the first one's install there.
[ -d /tmp/site ] && export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
if [ -d .gpu/whl ] && ! "$PY" -c "import fastapi, sqlalchemy, ortools" 2>/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .gpu/whl/*.whl
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
# What gets installed is one namespace, `gac`, whose parts are this repository's folders (gac.service is
# service/, ...): the mapping takes an install. Editable, from this checkout, with the setuptools (>= 77)
# carried in .gpu/whl when the machine's own is older.
if ! "$PY" -c "import gac.service, gac.agent, gac.solver" 2>/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-build-isolation -e . > "$LOGS/install.log" 2>&1 \
    || { echo "could not install this checkout (carry setuptools>=77 in .gpu/whl)"; cat "$LOGS/install.log"; pack; exit 1; }
fi
export GAC_DATA_DIR="${GAC_DATA_DIR:-/tmp/gac-gpu-data}"
GAC=("$PY" -m gac)  # timeout runs programs, not shell functions

step() {  # step NAME LIMIT_S [SIGNAL] -- COMMAND...: run with a limit, keep its output, say how long it took
  local name=$1 limit=$2 signal=TERM
  shift 2
  if [ "$1" != "--" ]; then signal=$1; shift; fi
  shift
  local left=$((DEADLINE_S - SECONDS - 5))
  if [ "$left" -lt 10 ]; then echo "== $name: skipped, ${left}s left of the run"; return; fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "== $name (limit ${limit}s, then SIG$signal)"
  local t0=$SECONDS
  timeout --signal="$signal" --kill-after=10 "$limit" "$@" > "$LOGS/$name.log" 2>&1 &
  STEP_PID=$!
  wait "$STEP_PID"
  local rc=$?
  STEP_PID=
  echo "   rc=$rc in $((SECONDS - t0)) s, ended $(date -u +%T.%N | cut -c1-12) UTC"
  tail -n 30 "$LOGS/$name.log" | cut -c1-220
  pack
}

stored() {  # stored DATA_DIR: measurements in that embedded database (flagged ones apart)
  "$PY" - "$1/gac.db" <<'PYEOF'
import sqlite3, sys
try:
    db = sqlite3.connect(sys.argv[1])
    total, flagged, last = db.execute("select count(*), count(quality), max(measured_at) from measurements").fetchone()
    print(f"   stored: {total} points ({flagged} flagged), the last measured at {last} UTC")
except Exception as exc:  # no database yet: nothing stored
    print(f"   stored: none ({exc})")
PYEOF
}

first_file() {  # first_file PATH...: the first of the paths that is a file, in the order given
  local f
  for f in "$@"; do [ -f "$f" ] && { echo "$f"; return; }; done
}

{ nvidia-smi; "$PY" -c "import torch; print(torch.__version__, torch.version.cuda)"; } > "$LOGS/machine.log" 2>&1
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(timer selftest profile align interrupt proof proof-fp16)
for s in "${steps[@]}"; do
  case "$s" in
    timer)
      step platform 60 -- "${GAC[@]}" agent platform --device "$DEVICE"
      step gpu_timer 120 -- "$PY" benchmarks/gpu_timer.py --device "$DEVICE" --runs 3
      ;;
    timer-small)
      step gpu_timer_small 60 -- "$PY" benchmarks/gpu_timer.py --device "$DEVICE" --runs 3 --small
      ;;
    align-stop)
      d="$GAC_DATA_DIR-stop"
      rm -rf "$d"
      GAC_DATA_DIR="$d" step align-kill 30 KILL -- \
        "${GAC[@]}" align examples/llama3-8b-asvd-r15.json --profile-missing --yes --device "$DEVICE"
      stored "$d"
      GAC_DATA_DIR="$d" step align-again 60 TERM -- \
        "${GAC[@]}" align examples/llama3-8b-asvd-r15.json --profile-missing --yes --device "$DEVICE"
      stored "$d"
      ;;
    why)
      step gpu_timer_why 90 -- "$PY" benchmarks/gpu_timer.py --device "$DEVICE" --runs 3 --why
      ;;
    cuda-tests)
      # -v: each test's outcome as it ends, so that a run stopped at its limit still says which passed.
      step cuda-tests 200 -- "$PY" -m pytest -v -p no:cacheprovider --durations=5 tests/proof/test_device.py -k "cuda or graph"
      ;;
    proof-no-slower)
      step proof-no-slower 200 -- "${GAC[@]}" proof --device "$DEVICE" --model llama8b --compressor palu --quick --no-slower \
        --save "$LOGS/proof-no-slower.json"
      ;;
    proof-2048-all)
      step proof-2048-all 450 -- "${GAC[@]}" proof --device "$DEVICE" --model llama8b --compressor all --quick \
        --seq 1024 --seq 2048 --save "$LOGS/proof-2048-all.json"
      ;;
    proof-2048-pp)
      for c in prune palu; do
        step "proof-2048-$c" 200 -- "${GAC[@]}" proof --device "$DEVICE" --model llama8b --compressor "$c" --quick \
          --seq 1024 --seq 2048 --save "$LOGS/proof-2048-$c.json"
      done
      ;;
    kernels)
      # Saved runs carried in RUNS (default .gpu-runs), else this session's: each model's every kernel traced.
      R="${RUNS:-.gpu-runs}"
      run=$(first_file "$R/proof-2048-palu.json" "$R/proof-llama8b.json" "$LOGS/proof-2048-palu.json" "$LOGS/proof-no-slower.json" "$LOGS/proof-llama8b.json")
      [ -n "$run" ] && step kernels-palu 90 -- "$PY" benchmarks/in_model_kernels.py "$run" --device "$DEVICE" --method palu \
        --decode --whole --variant round-to-8 --variant "GAC latency-aware"
      run=$(first_file "$R/proof-2048-prune.json" "$LOGS/proof-2048-prune.json")
      [ -n "$run" ] && step kernels-prune 90 -- "$PY" benchmarks/in_model_kernels.py "$run" --device "$DEVICE" --method prune \
        --whole --variant round-to-8 --variant "unaligned, again"
      run=$(first_file "$R/proof-minilm.json" "$LOGS/proof-minilm.json")
      [ -n "$run" ] && [ -d "${GAC_MINILM_DIR:-$PWD/.gpu-minilm}" ] && GAC_MINILM_DIR="${GAC_MINILM_DIR:-$PWD/.gpu-minilm}" \
        step kernels-minilm 90 -- "$PY" benchmarks/in_model_kernels.py "$run" --device "$DEVICE" --method prune \
        --whole --variant "unaligned, again" --variant round-to-8
      ;;
    chain)
      R="${RUNS:-.gpu-runs}"
      run=$(first_file "$R/proof-2048-palu.json" "$R/proof-llama8b.json" "$LOGS/proof-2048-palu.json" "$LOGS/proof-llama8b.json")
      for c in palu asvd; do
        [ -n "$run" ] && step "chain-$c" 120 -- "$PY" benchmarks/in_model_linears.py "$run" --device "$DEVICE" --method "$c" \
          --decode --variant "GAC latency-aware" --max-seconds 60
      done
      ;;
    proof-chain)
      # PaLU only: what swaps-chain reads, and a chained sample costs 8 calls (all three compressors overran 240 s).
      step proof-chain 240 -- "${GAC[@]}" proof --device "$DEVICE" --model llama8b --compressor palu --quick \
        --profile-l2 chain --save "$LOGS/proof-chain.json"
      # Its PaLU decode, swap by swap: does the chained profile's delta per projection match the step's?
      [ -f "$LOGS/proof-chain.json" ] && step swaps-chain 120 -- "$PY" benchmarks/in_model_swaps.py "$LOGS/proof-chain.json" \
        --device "$DEVICE" --method palu --decode --variant "GAC latency-aware" --one-out
      ;;
    swaps)
      R="${RUNS:-.gpu-runs}"
      run=$(first_file "$R/proof-2048-palu.json" "$R/proof-llama8b.json" "$LOGS/proof-2048-palu.json" "$LOGS/proof-no-slower.json" "$LOGS/proof-llama8b.json")
      [ -n "$run" ] && step swaps-palu 150 -- "$PY" benchmarks/in_model_swaps.py "$run" --device "$DEVICE" --method palu \
        --decode --variant "GAC latency-aware" --one-out --traced
      ;;
    proof-2048)
      step proof-2048 240 -- "${GAC[@]}" proof --device "$DEVICE" --model llama8b --compressor asvd --quick --dtype float16 \
        --seq 1024 --seq 2048 --save "$LOGS/proof-2048.json"
      ;;
    minilm|minilm-warm)
      warm=()
      [ "$s" = minilm-warm ] && warm=(--profile-l2 warm)
      GAC_MINILM_DIR="${GAC_MINILM_DIR:-$PWD/.gpu-minilm}" step "$s" 200 -- \
        "${GAC[@]}" proof --device "$DEVICE" --model minilm --compressor both --quick "${warm[@]}" --save "$LOGS/proof-$s.json"
      ;;
    selftest)
      step selftest 90 -- "${GAC[@]}" agent selftest --device "$DEVICE"
      ;;
    profile)
      step quick-1 90 -- "${GAC[@]}" profile --plan quick --device "$DEVICE"
      GAC_DATA_DIR="$GAC_DATA_DIR-2" step quick-2 90 -- "${GAC[@]}" profile --plan quick --device "$DEVICE"
      ;;
    align)
      rm -rf "$GAC_DATA_DIR-align"
      GAC_DATA_DIR="$GAC_DATA_DIR-align" step align-8b 330 -- \
        "${GAC[@]}" align examples/llama3-8b-asvd-r15.json --profile-missing --yes --device "$DEVICE"
      cp "$GAC_DATA_DIR-align/gac.db" "$LOGS/align-8b.db" 2>/dev/null
      stored "$GAC_DATA_DIR-align"
      pack
      ;;
    align-dense)
      rm -rf "$GAC_DATA_DIR-dense"
      GAC_DATA_DIR="$GAC_DATA_DIR-dense" step align-8b-dense 400 -- \
        "${GAC[@]}" align examples/llama3-8b-asvd-r15.json --profile-missing --exhaustive --yes --device "$DEVICE"
      stored "$GAC_DATA_DIR-dense"
      for f in align-8b align-8b-dense; do  # the needs-driven run and the dense one, side by side
        [ -f "$LOGS/$f.log" ] && echo "   $f: $(grep -h 'measured .* points in' "$LOGS/$f.log" | tr '\n' ';')"
      done
      pack
      ;;
    align-jobs)
      d="$GAC_DATA_DIR-jobs" url=http://127.0.0.1:8790
      rm -rf "$d"
      GAC_DATA_DIR="$d" "${GAC[@]}" serve --port 8790 > "$LOGS/align-jobs-serve.log" 2>&1 &
      serve=$!
      "$PY" - "$url/readyz" <<'PYEOF' || echo "   the service did not come up (align-jobs-serve.log)"
import sys, time, httpx
for _ in range(300):
    try:
        if httpx.get(sys.argv[1], timeout=2).status_code == 200:
            sys.exit(0)
    except httpx.HTTPError:
        pass
    time.sleep(0.2)
sys.exit(1)
PYEOF
      token=$(GAC_DATA_DIR="$d" "${GAC[@]}" token create --name "gpu-agent-$$" --scope ingest)
      "${GAC[@]}" agent run --server "$url" --token "$token" --jobs --follow --poll-s 1 --device "$DEVICE" --quiet \
        > "$LOGS/align-jobs-agent.log" 2>&1 &
      agent=$!
      # The agent's first claim makes its platform known to the service: align for it then.
      fp=$("$PY" - "$url" "$token" <<'PYEOF'
import sys, time, httpx
for _ in range(600):
    items = httpx.get(f"{sys.argv[1]}/v1/platforms", headers={"Authorization": f"Bearer {sys.argv[2]}"}, timeout=5).json()["items"]
    if items:
        print(items[0]["fingerprint"])
        break
    time.sleep(0.2)
PYEOF
)
      if [ -n "$fp" ]; then
        step align-8b-jobs 360 -- "${GAC[@]}" align "${JOBS_MANIFEST:-examples/llama3-8b-asvd-r15.json}" --server "$url" \
          --token "$token" --platform "$fp" --enqueue-missing --wait --yes
      else
        echo "== align-8b-jobs: skipped, the agent's platform never reached the service (align-jobs-agent.log)"
      fi
      kill -TERM "$agent" 2>/dev/null; wait "$agent" 2>/dev/null
      kill -TERM "$serve" 2>/dev/null; wait "$serve" 2>/dev/null
      echo "   the agent's jobs: $(grep -h '^job .* points in' "$LOGS/align-jobs-agent.log" | tr '\n' ';')"
      [ -f "$LOGS/align-8b.log" ] && echo "   align-8b (measured here): $(grep -h 'measured .* points in' "$LOGS/align-8b.log" | tr '\n' ';')"
      pack
      ;;
    interrupt)
      d="$GAC_DATA_DIR-int"
      rm -rf "$d"
      GAC_DATA_DIR="$d" step interrupt-term 12 TERM -- "${GAC[@]}" profile --plan paper --device "$DEVICE"
      stored "$d"
      GAC_DATA_DIR="$d" step interrupt-kill 12 KILL -- "${GAC[@]}" profile --plan paper --device "$DEVICE"
      stored "$d"
      GAC_DATA_DIR="$d" step interrupt-again 15 -- "${GAC[@]}" profile --plan paper --device "$DEVICE"
      stored "$d"
      ;;
    proof)
      step proof 240 -- "${GAC[@]}" proof --device "$DEVICE" --model llama8b --compressor all --quick \
        --save "$LOGS/proof-llama8b.json"
      ;;
    proof-eager)
      step proof-eager 90 -- "${GAC[@]}" proof --device "$DEVICE" --retime "$LOGS/proof-llama8b.json" --eager \
        --save "$LOGS/proof-llama8b-eager.json"
      ;;
    proof-fp16|proof-fp16-asvd|proof-fp16-prune|proof-fp16-palu)
      c="${s#proof-fp16}"
      c="${c#-}"
      step "$s" 240 -- "${GAC[@]}" proof --device "$DEVICE" --model llama8b --compressor "${c:-all}" --quick \
        --dtype float16 --save "$LOGS/$s.json"
      ;;
    inplace)
      # A saved run carried in RUNS, else the one this session just made (minilm-warm or minilm; proof-no-slower or proof).
      RUNS="${RUNS:-.gpu-runs}"
      run=$(first_file "$RUNS/proof-minilm.json" "$LOGS/proof-minilm-warm.json" "$LOGS/proof-minilm.json")
      if [ -n "$run" ]; then
        GAC_MINILM_DIR="${GAC_MINILM_DIR:-$PWD/.gpu-minilm}" step inplace-minilm 120 -- \
          "$PY" benchmarks/in_model_linears.py "$run" --device "$DEVICE" --method asvd \
          --variant "GAC latency-aware" --max-seconds 60
      else
        echo "== inplace-minilm: skipped, no MiniLM run saved"
      fi
      run=$(first_file "$RUNS/proof-llama8b.json" "$LOGS/proof-no-slower.json" "$LOGS/proof-llama8b.json")
      if [ -n "$run" ]; then
        step inplace-llama8b 120 -- "$PY" benchmarks/in_model_linears.py "$run" --device "$DEVICE" \
          --method palu --decode --variant "GAC latency-aware" --max-seconds 60
      else
        echo "== inplace-llama8b: skipped, no Llama-3-8B PaLU run saved"
      fi
      ;;
    *) echo "unknown step $s (timer, timer-small, why, selftest, profile, align, align-stop, interrupt, proof, proof-fp16," \
         "proof-eager, proof-2048, proof-2048-all, proof-2048-pp, kernels, swaps, chain, proof-chain, align-dense, align-jobs," \
         "proof-no-slower, minilm, minilm-warm, cuda-tests, inplace)"; exit 2 ;;
  esac
done
pack
