#!/usr/bin/env bash
# What a lent GPU machine lacks, made ready here to carry to it (all three are ignored by git):
#   .gpu/whl     cp312 wheels of the service stack and setuptools >= 77 (gpu_session.sh installs them)
#   .gpu-runs    the proof runs kept in git (RUNS_ARCHIVE), for the kernels, swaps, chain and inplace steps
#   .gpu-minilm  MiniLM's config, tokenizer and weights re-saved in float16 (44 MB), for the minilm steps
# One call carries at most 64 MiB, and a call may find a fresh machine: carry .gpu in every call, with .gpu-runs
# (the chain and swaps steps) or .gpu-minilm (the minilm steps) beside it.
#
#   bash scripts/gpu_carry.sh        (after make setup; PY: the Python with this checkout installed)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-.venv/bin/python}"
RUNS_ARCHIVE="${RUNS_ARCHIVE:-$(ls -d benchmarks/results/*/gpu-session.tgz | sort | tail -n 1)}"

rm -rf .gpu/whl && mkdir -p .gpu/whl  # a wheel left from an earlier download beside a newer one fails the install
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d .gpu/whl \
  "pydantic==2.14.4" "pydantic-core==2.50.5" pydantic-settings annotated-types typing-inspection typing_extensions \
  python-dotenv platformdirs tenacity "sqlalchemy==2.1.9" greenlet alembic mako fastapi starlette uvicorn cachetools \
  "ortools==9.15.*" immutabledict "protobuf>=6.33.1,<6.34" opentelemetry-api fastapi-offline "setuptools>=77" markupsafe

rm -rf .gpu-runs && mkdir -p .gpu-runs
tar -xzf "$RUNS_ARCHIVE" -C .gpu-runs

rm -rf .gpu-minilm && mkdir -p .gpu-minilm
"$PY" - <<'PYEOF'
import shutil
from pathlib import Path

from safetensors.torch import load_file, save_file

from gac.proof.bert import model_dir

src, dst = model_dir(), Path(".gpu-minilm")
for name in ("config.json", "tokenizer.json"):
    shutil.copy(src / name, dst / name)
save_file({k: v.half().contiguous() for k, v in load_file(src / "model.safetensors").items()}, dst / "model.safetensors")
PYEOF

du -sh .gpu .gpu-runs .gpu-minilm
echo "runs from $RUNS_ARCHIVE"
