#!/usr/bin/env bash
# node-run.sh -- run kgate on a GPU node without network, from a shell that may
# end before the run does (a time-limited job step, a remote command with a
# time limit). Run it from the kgate checkout.
#
# Usage:
#   scripts/node-run.sh setup  [--wheels DIR [--replace-installed]] [--kgate] [--state DIR]
#   scripts/node-run.sh launch [--state DIR] -- COMMAND [ARG...]
#   scripts/node-run.sh wait   SECONDS [--state DIR]
#   scripts/node-run.sh stop   [--state DIR]
#
# What it does:
#   setup   python3 on PATH is the node's environment (CUDA torch, Triton).
#           Installs DIR/*.whl into it with --no-deps --no-index (wheels
#           carried in: docs/slurm.md, "A GPU node without network"), except
#           each wheel of a distribution the environment already has (PEP 503
#           names): the node's version wins, as a second copy installed with
#           --no-deps would shadow the one its torch was built with; the
#           skipped ones are listed. --replace-installed installs them too. And
#           with --kgate this checkout (pip install --no-deps -e .). Then makes `python`, which every stage job runs, the
#           same interpreter: when PATH's `python` is missing or runs in
#           another environment (sys.prefix; a link to a virtual environment's
#           interpreter placed outside it starts Python outside the
#           environment), it writes STATE/bin/python, a wrapper script
#           (exec <python3>), never a link, and prints the PATH to export. Last, it
#           imports kgate's stack through that python under a 60 s timeout and
#           exits 1 naming the module that failed.
#   launch  starts COMMAND detached in a session of its own (setsid), its
#           output in STATE/run.log, its pid in STATE/run.pid and, when it
#           ends, its exit status in STATE/run.rc; returns at once. PATH gets
#           STATE/bin first when setup wrote a wrapper there.
#   wait    polls that pid (never a match on process names, which also
#           matches the polling shell's own command line) for up to SECONDS;
#           prints RUNNING, or FINISHED with the exit status, the seconds since
#           launch and the log's last lines. Exits 0 either way.
#   stop    ends COMMAND's whole process group (TERM, then KILL after 10 s).
#
# Options:
#   --wheels DIR   wheels to install with --no-deps (setup)
#   --replace-installed  with --wheels: also install wheels of distributions python3 already has
#   --kgate        install this checkout into python3's environment (setup)
#   --state DIR    pid, log, exit status and the wrapper (default /tmp/kgate-node)
set -euo pipefail

cmd=${1:-}
[[ -n "$cmd" ]] && shift
STATE=/tmp/kgate-node
WHEELS=
REPLACE=
KGATE=
SECS=
ARGS=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --state) STATE=$2; shift 2 ;;
    --wheels) WHEELS=$2; shift 2 ;;
    --kgate) KGATE=1; shift ;;
    --replace-installed) REPLACE=1; shift ;;
    --) shift; ARGS=("$@"); break ;;
    *) if [[ "$cmd" == wait && -z "$SECS" ]]; then SECS=$1; shift
       else echo "node-run.sh: unknown argument '$1'" >&2; exit 2; fi ;;
  esac
done
mkdir -p "$STATE"

setup() {
  local py3 py real3 realpy
  py3=$(command -v python3) || { echo "node-run.sh: no python3 on PATH" >&2; exit 1; }
  if [[ -n "$WHEELS" ]]; then
    shopt -s nullglob
    local whl=("$WHEELS"/*.whl)
    shopt -u nullglob
    if [[ ${#whl[@]} -gt 0 && -z "$REPLACE" ]]; then
      # one pass in python3: a wheel's distribution (its file name's first field) against the environment's,
      # both as PEP 503 names; prints the wheels to install, one per line, and names the skipped on stderr,
      # which goes to setup's output
      local keep
      { keep=$("$py3" - "$py3" "${whl[@]}" 2>&3 <<'PY'
import importlib.metadata as m, os, re, sys
norm = lambda name: re.sub(r"[-_.]+", "-", name).lower()
have = {norm(d.metadata["Name"]) for d in m.distributions() if d.metadata["Name"]}
names = [norm(os.path.basename(w).split("-")[0]) for w in sys.argv[2:]]
print("\n".join(w for w, n in zip(sys.argv[2:], names) if n not in have))
skipped = [n for n in names if n in have]
if skipped:
    print(f"setup: skipped {len(skipped)} wheel(s) of distributions {sys.argv[1]} already has"
          f" (--replace-installed installs them): {' '.join(skipped)}", file=sys.stderr)
PY
); } 3>&1
      mapfile -t whl < <([[ -n "$keep" ]] && printf '%s\n' "$keep")
    fi
    if [[ ${#whl[@]} -gt 0 ]]; then
      "$py3" -m pip install -q --no-deps --no-index "${whl[@]}"
      echo "setup: installed ${#whl[@]} wheel(s) from $WHEELS into $py3"
    fi
  fi
  if [[ -n "$KGATE" ]]; then
    "$py3" -m pip install -q --no-deps --no-build-isolation -e .
    echo "setup: installed kgate from $(pwd) into $py3"
  fi
  # the environment (sys.prefix) python3 runs in, and the one `python` runs in
  real3=$(timeout 60 "$py3" -c "import sys; print(sys.prefix)")
  py=$(command -v python || true)
  realpy=$([[ -n "$py" ]] && timeout 60 "$py" -c "import sys; print(sys.prefix)" 2>/dev/null || true)
  rm -f "$STATE/bin/python"
  if [[ -z "$py" || "$realpy" != "$real3" ]]; then
    mkdir -p "$STATE/bin"
    printf '#!/bin/sh\nexec %s "$@"\n' "$py3" > "$STATE/bin/python"
    chmod +x "$STATE/bin/python"
    echo "setup: 'python' on PATH (${py:-none}) runs in $realpy, python3 in $real3;" \
      "wrote $STATE/bin/python -> $py3"
    echo "setup: export PATH=$STATE/bin:\$PATH (launch does this itself)"
    py=$STATE/bin/python
  fi
  # what the stage jobs import, from kgate's own lists: every stage module (kgate.protocol.STAGES, the preflight
  # and the report) and the test-run plugins (kgate.site.node.STAGE_MODULES); first the node's torch and Triton,
  # the launcher and kgate itself
  local probe
  probe="import importlib, sys

def need(m):
    try:
        importlib.import_module(m)
    except Exception as exc:
        sys.exit(f'setup: {sys.executable} cannot import {m}: {type(exc).__name__}: {exc}')

for m in ('torch', 'triton', 'snakemake', 'kgate.protocol', 'kgate.site.node'):
    need(m)
from kgate.protocol import STAGES
from kgate.site.node import STAGE_MODULES
for m in (*(f'kgate.stages.{s}' for s in (*STAGES, 'doctor', 'report')), *STAGE_MODULES):
    need(m)
import torch, triton
print('setup: python is', sys.executable, '| torch', torch.__version__, '| triton', triton.__version__,
      '| GPU', torch.cuda.get_device_name() if torch.cuda.is_available() else 'none')"
  if ! timeout 60 "$py" -c "$probe"; then
    echo "setup: $py cannot import kgate's stack (above), or took over 60 s" >&2
    exit 1
  fi
}

launch() {
  [[ ${#ARGS[@]} -gt 0 ]] || { echo "node-run.sh launch: no COMMAND after --" >&2; exit 2; }
  if [[ -f "$STATE/run.pid" ]] && kill -0 "$(cat "$STATE/run.pid")" 2>/dev/null; then
    echo "node-run.sh launch: pid $(cat "$STATE/run.pid") from an earlier launch still runs (stop it first)" >&2
    exit 1
  fi
  rm -f "$STATE/run.rc"
  [[ -x "$STATE/bin/python" ]] && export PATH="$STATE/bin:$PATH"
  date +%s > "$STATE/run.start"
  RC="$STATE/run.rc" setsid nohup bash -c '"$@"; echo $? > "$RC"' node-run "${ARGS[@]}" \
    > "$STATE/run.log" 2>&1 < /dev/null &
  echo $! > "$STATE/run.pid"
  echo "launched pid $(cat "$STATE/run.pid"): ${ARGS[*]} (log $STATE/run.log)"
}

wait_for() {
  [[ "$SECS" =~ ^[0-9]+$ ]] || { echo "node-run.sh wait: SECONDS must be a whole number" >&2; exit 2; }
  [[ -f "$STATE/run.pid" ]] || { echo "node-run.sh wait: nothing launched ($STATE/run.pid)" >&2; exit 1; }
  local pid end
  pid=$(cat "$STATE/run.pid")
  end=$(( $(date +%s) + SECS ))
  while kill -0 "$pid" 2>/dev/null && [[ $(date +%s) -lt $end ]]; do sleep 1; done
  if kill -0 "$pid" 2>/dev/null; then
    echo "RUNNING pid $pid"
  else
    echo "FINISHED exit $(cat "$STATE/run.rc" 2>/dev/null || echo 'unknown (killed)')"
  fi
  echo "seconds since launch: $(( $(date +%s) - $(cat "$STATE/run.start") ))"
  tail -n 20 "$STATE/run.log"
}

stop() {
  [[ -f "$STATE/run.pid" ]] || { echo "node-run.sh stop: nothing launched" >&2; exit 0; }
  local pid
  pid=$(cat "$STATE/run.pid")
  kill -TERM -- "-$pid" 2>/dev/null || true
  for _ in $(seq 10); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  kill -KILL -- "-$pid" 2>/dev/null || true
  echo "stopped process group $pid"
}

case "$cmd" in
  setup) setup ;;
  launch) launch ;;
  wait) wait_for ;;
  stop) stop ;;
  *) sed -n '2,40p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
