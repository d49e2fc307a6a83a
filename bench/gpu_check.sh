#!/usr/bin/env bash
# Engine checks on a GPU machine, in one run of at most ~8 minutes:
#
#   A. a REAL SGLang server (only if `python -c "import sglang"` works):
#      python -m sglang.launch_server --model-path <small Llama folder> --port 30000,
#      then /get_model_info (exact key set), /generate with return_logprob,
#      /update_weights_from_disk (weights B; version and greedy output change),
#      /init_weights_update_group + /update_weights_from_distributed +
#      /destroy_weights_update_group driven by reef.engine.broadcast.publish_weights
#      (NCCL when the machine has 2+ GPUs: trainer on cuda:1; one GPU cannot hold two
#      NCCL ranks, so then gloo, which broadcasts into SGLang's CUDA tensors).
#   B. the same checks against Reef's engine: `python -m reef.cli.engine --device cuda`,
#      plus /load_lora_adapter and a LoRA-default update.
#
# Degrades gracefully: whatever cannot run (no sglang, no GPU, one GPU) is reported as
# SKIPPED with the reason; the summary lists CHECKED / FAILED / SKIPPED lines and the
# exit status is 1 only if a check that ran failed.
#
#   bash bench/gpu_check.sh            # run from the repository root
#   PYTHON=/path/to/python bash bench/gpu_check.sh
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
WORK=$(mktemp -d /tmp/reef-gpu-check.XXXXXX)
SUMMARY="$WORK/summary.txt"
: >"$SUMMARY"
PIDS=()
cleanup() { for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null; done; }
trap cleanup EXIT
say() { echo "[gpu_check] $*"; }
skip() { echo "SKIPPED $*" | tee -a "$SUMMARY"; }

say "python: $PY; work dir: $WORK"
if ! "$PY" -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  skip "everything: torch.cuda is not available on this machine"
  cat "$SUMMARY"; exit 0
fi
GPUS=$("$PY" -c "import torch; print(torch.cuda.device_count())")
say "$("$PY" -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(0))"), $GPUS GPU(s)"

# -- model folders A and B: a small Llama (head_dim 64, which every attention kernel
#    supports) with Reef's character tokenizer, random weights from two fixed seeds -----
"$PY" - "$WORK" <<'EOF' || { echo "FAILED writing model folders" >>"$SUMMARY"; cat "$SUMMARY"; exit 1; }
import sys
from pathlib import Path
import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM
from reef.modelkit import tiny

work = Path(sys.argv[1])
vocab = tiny.vocabulary()
config = LlamaConfig(
    vocab_size=len(vocab), hidden_size=256, intermediate_size=512, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=1024,
    tie_word_embeddings=False, bos_token_id=vocab["<bos>"], eos_token_id=vocab["<eos>"],
    pad_token_id=vocab["<pad>"], dtype="bfloat16",
)
for name, seed in (("A", 0), ("B", 1)):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(work / name)
    tiny.build_tokenizer().save_pretrained(work / name)
    tiny.make_portable(work / name)  # SGLang pins transformers 4.x
with torch.random.fork_rng(devices=[]):
    torch.manual_seed(7)
    lora = LoraConfig(r=8, lora_alpha=64, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    get_peft_model(LlamaForCausalLM.from_pretrained(work / "A"), lora).save_pretrained(work / "lora")
print("model folders written")
EOF

# -- the driver: every HTTP check, for one server ----------------------------------------
cat >"$WORK/drive.py" <<'EOF'
"""drive.py LABEL URL WORK GPUS [lora]: run the checks, append lines to summary.txt."""
import sys, time, traceback
from pathlib import Path
import httpx, torch
from transformers import AutoModelForCausalLM

label, url, work, gpus = sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
with_lora = len(sys.argv) > 5
summary = work / "summary.txt"
KEYS = {"model_path", "is_generation", "tokenizer_path", "preferred_sampling_params",
        "weight_version", "has_image_understanding", "has_audio_understanding"}
http = httpx.Client(timeout=300)

def record(status, what):
    line = f"{status} [{label}] {what}"
    print(line, flush=True)
    with summary.open("a") as f:
        f.write(line + "\n")

def check(what):
    def wrap(fn):
        started = time.monotonic()
        try:
            detail = fn()
            record("CHECKED", f"{what} ({time.monotonic() - started:.1f}s){': ' + detail if detail else ''}")
        except Exception as exc:  # report and go on with the other checks
            traceback.print_exc()
            record("FAILED", f"{what}: {type(exc).__name__}: {exc}")
        return fn
    return wrap

def greedy():
    body = {"text": "return exactly: hello", "return_logprob": True,
            "sampling_params": {"max_new_tokens": 16, "temperature": 0}}
    r = http.post(f"{url}/generate", json=body)
    r.raise_for_status()
    return r.json()

state = {}

@check("GET /get_model_info has exactly SGLang's keys")
def _():
    info = http.get(f"{url}/get_model_info").json()
    assert set(info) == KEYS, sorted(set(info) ^ KEYS)
    state["version0"] = info["weight_version"]
    return f"weight_version={info['weight_version']!r}"

@check("POST /generate return_logprob: [logprob, token_id, text] per output token + weight_version")
def _():
    out = greedy()
    meta = out["meta_info"]
    lps = meta["output_token_logprobs"]
    assert len(lps) == meta["completion_tokens"] and all(len(e) >= 2 for e in lps)
    assert all(isinstance(e[0], float) and isinstance(e[1], int) for e in lps)
    assert "weight_version" in meta, sorted(meta)
    state["ids_A"] = [e[1] for e in lps]
    return f"{len(lps)} tokens, weight_version={meta['weight_version']!r}"

@check("POST /update_weights_from_disk (B) swaps weights and weight_version")
def _():
    r = http.post(f"{url}/update_weights_from_disk",
                  json={"model_path": str(work / "B"), "weight_version": "disk-B"})
    body = r.json()
    assert r.status_code == 200 and body["success"], body
    assert http.get(f"{url}/get_model_info").json()["weight_version"] == "disk-B"
    out = greedy()
    assert out["meta_info"]["weight_version"] == "disk-B"
    ids_b = [e[1] for e in out["meta_info"]["output_token_logprobs"]]
    assert ids_b != state.get("ids_A"), "greedy output did not change"
    return f"response keys {sorted(body)}"

@check("POST /update_weights_from_disk (missing path) refuses; old weights keep serving")
def _():
    r = http.post(f"{url}/update_weights_from_disk",
                  json={"model_path": str(work / "missing"), "weight_version": "never"})
    assert r.json()["success"] is False, r.text
    assert greedy()["meta_info"]["weight_version"] == "disk-B"
    return f"HTTP {r.status_code}: {r.json()['message'][:80]!r}"

def broadcast(backend):
    from reef.engine.broadcast import publish_weights
    device = "cpu"
    if backend == "nccl":
        torch.cuda.set_device(1)
        device = "cuda:1"
    model = AutoModelForCausalLM.from_pretrained(work / "A", dtype=torch.bfloat16).to(device)
    result = publish_weights(model, [url], f"bcast-{backend}", backend=backend, timeout_s=120)
    out = greedy()
    assert out["meta_info"]["weight_version"] == f"bcast-{backend}"
    assert [e[1] for e in out["meta_info"]["output_token_logprobs"]] == state.get("ids_A")
    return f"{result.tensors} tensors, {result.bytes / 1e6:.1f} MB in {result.seconds:.2f}s"

if gpus >= 2:
    check("init/update_weights_from_distributed/destroy over NCCL (trainer cuda:1) = weights A")(
        lambda: broadcast("nccl"))
else:
    record("SKIPPED", "NCCL broadcast: one GPU cannot hold two NCCL ranks (needs 2 GPUs)")
    check("init/update_weights_from_distributed/destroy over gloo into CUDA weights = weights A")(
        lambda: broadcast("gloo"))

if with_lora:
    @check("POST /load_lora_adapter + /generate lora_path + /unload_lora_adapter")
    def _():
        r = http.post(f"{url}/load_lora_adapter", json={"lora_name": "l", "lora_path": str(work / "lora")})
        assert r.json()["success"], r.text
        body = {"text": "hi", "lora_path": "l", "sampling_params": {"max_new_tokens": 4, "temperature": 0}}
        assert http.post(f"{url}/generate", json=body).status_code == 200
        assert http.post(f"{url}/unload_lora_adapter", json={"lora_name": "l"}).json()["success"]

    @check("POST /update_weights_from_disk with a PEFT adapter folder (default adapter)")
    def _():
        r = http.post(f"{url}/update_weights_from_disk",
                      json={"model_path": str(work / "lora"), "weight_version": "lora-default"})
        assert r.json()["success"], r.text
        assert greedy()["meta_info"]["weight_version"] == "lora-default"
EOF

wait_health() {  # URL PID SECONDS
  local deadline=$((SECONDS + $3))
  while [ $SECONDS -lt $deadline ]; do
    kill -0 "$2" 2>/dev/null || return 1
    curl -sf -o /dev/null "$1/health" && return 0
    sleep 2
  done
  return 1
}

# -- A. real SGLang ----------------------------------------------------------------------
if "$PY" -c "import sglang" 2>/dev/null; then
  say "sglang $("$PY" -c 'import sglang; print(sglang.__version__)') found; launching (up to 240 s)"
  "$PY" -m sglang.launch_server --model-path "$WORK/A" --port 30000 --host 127.0.0.1 \
    --dtype bfloat16 --mem-fraction-static 0.3 --disable-cuda-graph \
    >"$WORK/sglang.log" 2>&1 &
  PIDS+=($!)
  if wait_health http://127.0.0.1:30000 "${PIDS[-1]}" 240; then
    timeout 180 "$PY" "$WORK/drive.py" sglang http://127.0.0.1:30000 "$WORK" "$GPUS" \
      || say "sglang driver exited with $?"
  else
    echo "FAILED [sglang] server did not become healthy; last log lines:" | tee -a "$SUMMARY"
    tail -n 25 "$WORK/sglang.log" | tee -a "$SUMMARY"
  fi
  kill "${PIDS[-1]}" 2>/dev/null; wait "${PIDS[-1]}" 2>/dev/null
else
  skip "[sglang] every SGLang check: 'import sglang' fails in $PY (not installed)"
fi

# -- B. Reef's engine on CUDA ----------------------------------------------------------
say "launching reef engine --device cuda"
"$PY" -m reef.cli.engine --model "$WORK/A" --port 30001 --device cuda --weight-version v0 \
  >"$WORK/reef-engine.log" 2>&1 &
PIDS+=($!)
if wait_health http://127.0.0.1:30001 "${PIDS[-1]}" 120; then
  timeout 120 "$PY" "$WORK/drive.py" reef http://127.0.0.1:30001 "$WORK" "$GPUS" lora \
    || say "reef driver exited with $?"
else
  echo "FAILED [reef] engine did not become healthy; last log lines:" | tee -a "$SUMMARY"
  tail -n 25 "$WORK/reef-engine.log" | tee -a "$SUMMARY"
fi

echo
echo "===== gpu_check summary (logs in $WORK) ====="
cat "$SUMMARY"
! grep -q '^FAILED' "$SUMMARY"
