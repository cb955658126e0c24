#!/usr/bin/env bash
# BuildGrid on 127.0.0.1:50051 for `./bazelw ... --config=remote_local` (see docs/remote.md).
#   tools/remote/buildgrid.sh start | stop | status
# Installs the pinned BuildGrid (tools/remote/requirements.txt) into its own
# virtualenv under $MOBIUS_CACHE_DIR (default ~/.cache/mobius); state (pid, log)
# lives there too. Serves on 127.0.0.1 only.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE_DIR="${MOBIUS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mobius}"
REQ="$ROOT/tools/remote/requirements.txt"
VENV="$CACHE_DIR/buildgrid-$(sha256sum "$REQ" | cut -c1-12)"
PIDFILE="$CACHE_DIR/buildgrid.pid"
LOG="$CACHE_DIR/buildgrid.log"
PORT=50051

log() { echo "buildgrid.sh: $*" >&2; }

install() {
  [[ -x "$VENV/bin/bgd" ]] && return 0
  log "installing BuildGrid into $VENV"
  mkdir -p "$CACHE_DIR"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q -r "$REQ" </dev/null
}

running() { [[ -f "$PIDFILE" ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

listening() {
  python3 - "$PORT" <<'PY'
import socket, sys
s = socket.socket(); s.settimeout(0.5)
sys.exit(s.connect_ex(("127.0.0.1", int(sys.argv[1]))))
PY
}

start() {
  if running; then log "already running (pid $(cat "$PIDFILE"))"; return 0; fi
  install
  "$VENV/bin/bgd" server start "$ROOT/tools/remote/buildgrid.yml" >"$LOG" 2>&1 </dev/null &
  echo $! >"$PIDFILE"
  for _ in $(seq 1 60); do
    if listening; then log "serving on 127.0.0.1:$PORT (pid $(cat "$PIDFILE"), log $LOG)"; return 0; fi
    running || break
    sleep 1
  done
  log "server did not come up; last lines of $LOG:"; tail -20 "$LOG" >&2; exit 1
}

stop() {
  if running; then kill "$(cat "$PIDFILE")"; log "stopped pid $(cat "$PIDFILE")"; fi
  rm -f "$PIDFILE"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) if running; then log "running (pid $(cat "$PIDFILE"))"; else log "not running"; exit 1; fi ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
