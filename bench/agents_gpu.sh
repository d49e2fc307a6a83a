#!/usr/bin/env bash
# The agents' closed loop (bench/agents.py) on a GPU machine: Codex, served by Reef's
# engine on CUDA from a real-architecture Qwen2 folder, learns single-tool tasks from its
# own sessions, the in-process trainer training on CUDA. Results: docs/benchmarks/agents_gpu.md.
#
#   bench/agents_gpu.sh prepare       here, with the package indexes: .gpu/ holds the wheels
#                                     the GPU machine's Python lacks and the Codex binary,
#                                     packed in parts that fit a 64 MiB transfer
#   bench/agents_gpu.sh stage         there: installs the wheels, unpacks the parts it has
#   bench/agents_gpu.sh run OUT       there: unpacks the rest, runs the loop, writes OUT/
#
# The GPU machine reaches no network: what Reef needs beyond the machine's own Python
# packages (torch, transformers, tokenizers, httpx, ...) travels as wheels. Claude Code's
# binary is larger than the transfers a run has: only Codex runs there.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
GPU="$ROOT/.gpu"
SITE=/tmp/reef-gpu-site
STAGE=/tmp/reef-gpu-stage
CODEX_REL=node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex
WHEELS=(
  "aiokafka>=0.14,<0.15" cramjam "fastavro>=1.13,<2" "fastapi>=0.165" starlette uvicorn
  httptools "minio>=7.2,<8" "pydantic>=2.9,<3" pydantic-core annotated-types
  typing-inspection typing_extensions orjson "rocksdict>=0.3.29,<0.4" "dulwich>=1.2,<2"
  cryptography cffi pycparser reef-client argon2-cffi argon2-cffi-bindings pycryptodome
  opentelemetry-api anyio
)

prepare() {
  mkdir -p "$GPU/wheels"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_34_x86_64 --platform manylinux_2_31_x86_64 \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$GPU/wheels" "${WHEELS[@]}"
  local codex="$ROOT/.tools/agents/$CODEX_REL"
  [ -x "$codex" ] || { echo "no $codex: run scripts/bootstrap first" >&2; exit 1; }
  rm -f "$GPU"/codex.xz.part*
  xz -T0 -6 -c "$codex" | split -b 31000000 -d - "$GPU/codex.xz.part"
  ls -l "$GPU" "$GPU/wheels"
}

stage() {
  mkdir -p "$STAGE"
  if [ ! -d "$SITE" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$SITE" "$GPU"/wheels/*.whl
  fi
  cp -n "$GPU"/codex.xz.part* "$STAGE"/ 2>/dev/null || true
  ls -l "$STAGE"
  PYTHONPATH="$SITE:$ROOT" python3 -c "import reef.api.app, reef_client, torch; \
print('imports ok; cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0))"
}

run() {
  local out="$1"
  stage
  mkdir -p "$ROOT/.tools/agents/$(dirname "$CODEX_REL")" /tmp/reef-gpu-bin
  cat "$STAGE"/codex.xz.part* | python3 -c \
    "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.stdin.buffer), sys.stdout.buffer)" \
    > "$ROOT/.tools/agents/$CODEX_REL"
  chmod +x "$ROOT/.tools/agents/$CODEX_REL"
  "$ROOT/.tools/agents/$CODEX_REL" --version
  printf '#!/bin/sh\nexec python3 -m reef.cli "$@"\n' > /tmp/reef-gpu-bin/reef
  chmod +x /tmp/reef-gpu-bin/reef
  export PATH="/tmp/reef-gpu-bin:$PATH" PYTHONPATH="$SITE:$ROOT" PYTHONUNBUFFERED=1
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/machine.txt"
  nproc >> "$out/machine.txt"
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" | tee -a "$out/machine.txt"
  git -C "$ROOT" rev-parse --short HEAD 2>/dev/null | tee -a "$out/machine.txt" || true
  # Codex's Linux sandbox (landlock, seccomp) is not counted on in the GPU machine's VM:
  # the session's commands run unsandboxed there, in a throwaway working directory.
  timeout "${REEF_AGENTS_GPU_BUDGET_S:-540}" python3 -m bench.agents --cli codex \
    --device cuda --hidden "${REEF_AGENTS_GPU_HIDDEN:-256}" --layers 4 --context 1600 \
    --warm-start copy --measure 8 --sessions 24 --rounds 8 \
    --gate-tasks 4 --steps "${REEF_AGENTS_GPU_STEPS:-40}" --lr "${REEF_AGENTS_GPU_LR:-1e-3}" \
    --budget-s "${REEF_AGENTS_GPU_LOOP_S:-300}" \
    --codex-sandbox danger-full-access --work /tmp/reef-gpu-work 2>&1 | tee "$out/agents_gpu.log"
}

case "${1:-}" in
  prepare) prepare ;;
  stage) stage ;;
  run) run "${2:?OUT folder}" ;;
  *) echo "usage: bench/agents_gpu.sh prepare | stage | run OUT" >&2; exit 2 ;;
esac
