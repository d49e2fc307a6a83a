#!/bin/sh
# Evolve a harness and install it: the whole loop, as a new user runs it.
#
#   tutorials/harness_evolve/run.sh
#
# 1. reef serve with the harness_evolve recipe (harness.yaml; new scenarios start
#    from seed/), on a fresh state dir and a free port;
# 2. the seed release installed into a Claude Code folder with the install script
#    (reef harness install: the same script `curl .../reef/harness/install | sh` runs);
# 3. the agent (agent.py, reef-client) works through held-out tasks: the "before" score;
# 4. it works through training tasks and reports each score; four failures make the
#    recipe propose one edit, and the gate releases it only if it wins on gate tasks;
# 5. reef harness status says the folder is behind and prints the update command;
#    the install script updates the folder (verified, stale files pruned);
# 6. the agent runs the held-out tasks again: the "after" score.
#
# With REEF_UPSTREAM_URL and REEF_UPSTREAM_API_KEY set (and REEF_UPSTREAM_MODEL), the
# agent and the proposer are that real provider. Without them it says so and runs on
# the local scripted stand-in (reef/testing/harness_upstream.py, built on
# reef/testing/scripted_upstream.py): no network, no key, a few seconds.
set -eu

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
if [ -x "$ROOT/.venv/bin/python" ]; then BIN="$ROOT/.venv/bin"; else BIN=$(dirname "$(command -v python3)"); fi
PY="$BIN/python"
REEF="$BIN/reef"
WORK=${REEF_TUTORIAL_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/reef-harness-tutorial.XXXXXX")}
mkdir -p "$WORK"
SCENARIO=${REEF_TUTORIAL_SCENARIO:-tutorial-$(date +%s)}
export REEF_TOKEN=${REEF_TOKEN:-reef-tutorial-$$}
PIDS=""
cleanup() {
  for pid in $PIDS; do kill "$pid" 2>/dev/null || true; done
  for pid in $PIDS; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step() { printf '\n==> %s\n' "$*"; }
free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_for() {  # wait_for FILE TEXT SECONDS: until FILE contains TEXT
  i=0
  until grep -q "$2" "$1" 2>/dev/null; do
    i=$((i + 1)); [ "$i" -le $(($3 * 10)) ] || { echo "timed out waiting for '$2' in $1" >&2; cat "$1" >&2; exit 1; }
    sleep 0.1
  done
}

if [ -n "${REEF_UPSTREAM_URL:-}" ] && [ -n "${REEF_UPSTREAM_API_KEY:-}" ]; then
  MODE="real provider: $REEF_UPSTREAM_URL"
  UPSTREAM=$REEF_UPSTREAM_URL
  export REEF_UPSTREAM_MODEL=${REEF_UPSTREAM_MODEL:-gpt-4o-mini}
else
  MODE="local scripted stand-in, no real model"
  echo "REEF_UPSTREAM_URL and REEF_UPSTREAM_API_KEY are not both set:"
  echo "running on the local scripted stand-in, a scripted agent world, not a real model."
  PYTHONPATH="$ROOT" "$PY" -m reef.testing.harness_upstream --port 0 >"$WORK/stand-in.log" 2>&1 &
  PIDS="$PIDS $!"
  wait_for "$WORK/stand-in.log" "^ready " 30
  UPSTREAM="$(sed -n 's/^ready //p' "$WORK/stand-in.log")/v1"
  export REEF_UPSTREAM_API_KEY=sk-stand-in
  export REEF_UPSTREAM_MODEL=stub-model
fi
unset REEF_UPSTREAM_URL

step "reef serve: harness_evolve, upstream: $MODE"
PORT=$(free_port)
URL="http://127.0.0.1:$PORT"
(cd "$HERE" && exec "$REEF" serve -c harness.yaml --port "$PORT" --state-dir "$WORK/state" \
  --upstream-url "$UPSTREAM" --upstream-model "$REEF_UPSTREAM_MODEL") >"$WORK/reef-serve.log" 2>&1 &
PIDS="$PIDS $!"
i=0
until "$PY" -c "import urllib.request as u; u.urlopen('$URL/healthz', timeout=1)" 2>/dev/null; do
  i=$((i + 1)); [ "$i" -le 120 ] || { echo "reef serve did not start" >&2; cat "$WORK/reef-serve.log" >&2; exit 1; }
  sleep 0.5
done
echo "listening on $URL (state and logs in $WORK)"
agent() { "$PY" "$HERE/agent.py" "$@" --url "$URL" --scenario "$SCENARIO"; }
agent create

AGENT_HOME="$WORK/claude"
step "install the seed release into a Claude Code folder: $AGENT_HOME"
echo "(the same as: curl -fsS -H \"Authorization: Bearer \$REEF_TOKEN\" -H 'x-reef-scenario: $SCENARIO' '$URL/reef/harness/install?adapter=claude' | sh -s -- $AGENT_HOME)"
"$REEF" harness install --url "$URL" --adapter claude --scenario "$SCENARIO" "$AGENT_HOME"

step "before: the agent on held-out tasks"
agent run --harness "$AGENT_HOME" --tasks "$HERE/heldout-tasks.jsonl" --score-file "$WORK/before"

step "the agent works on training tasks and reports each score"
agent run --harness "$AGENT_HOME" --tasks "$HERE/train-tasks.jsonl" --report

step "harness_evolve proposes one edit; the gate decides"
agent released --after 1 --wait-s "${REEF_TUTORIAL_WAIT_S:-180}"

step "reef harness status"
"$REEF" harness status --url "$URL" --adapter claude --scenario "$SCENARIO" "$AGENT_HOME"
step "update the folder with the install script"
"$REEF" harness install --url "$URL" --adapter claude --scenario "$SCENARIO" "$AGENT_HOME"
echo "--- $AGENT_HOME/CLAUDE.md"
cat "$AGENT_HOME/CLAUDE.md"

step "after: the agent on the same held-out tasks"
agent run --harness "$AGENT_HOME" --tasks "$HERE/heldout-tasks.jsonl" --score-file "$WORK/after"

step "held-out score before -> after ($MODE): $(cat "$WORK/before") -> $(cat "$WORK/after")"
