#!/usr/bin/env bash
# Local Prefect + MLflow servers for WHALE, bound to 127.0.0.1, state under $WHALE_HOME.
#
#   infra/local_servers.sh start    # start both (no-op for one already running), wait for health, print exports
#   infra/local_servers.sh status   # say which are running
#   infra/local_servers.sh stop     # stop what `start` started (pid files), whole process groups
#
# Environment (all optional):
#   WHALE_HOME            project home (default ./.whale); servers keep pid files and logs in $WHALE_HOME/servers
#   WHALE_PREFECT_PORT    default 4200        WHALE_MLFLOW_PORT   default 5000
#   WHALE_SERVER_TIMEOUT  seconds to wait for health (default 180; a first Prefect start on 2 cores takes ~25 s)
#   WHALE_BIN             directory holding `prefect` and `mlflow` (default: the repo's .venv/bin if present, else PATH)
#   PREFECT_SERVER_DATABASE_CONNECTION_URL, PREFECT_MESSAGING_*  passed through (Postgres/Redis, see infra/README.md)
#
# The embedded WHALE default needs none of this; the servers give the two UIs and let several processes share state.
# The MLflow server reads the same $WHALE_HOME/mlflow.db and $WHALE_HOME/mlartifacts as the embedded store.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
home="${WHALE_HOME:-$PWD/.whale}"
mkdir -p "$home"
home="$(cd "$home" && pwd)"
run_dir="$home/servers"
host=127.0.0.1
prefect_port="${WHALE_PREFECT_PORT:-4200}"
mlflow_port="${WHALE_MLFLOW_PORT:-5000}"
timeout_s="${WHALE_SERVER_TIMEOUT:-180}"
if [[ -n "${WHALE_BIN:-}" ]]; then
    bin="$WHALE_BIN/"
elif [[ -x "$repo/.venv/bin/mlflow" ]]; then
    bin="$repo/.venv/bin/"
else
    bin=""
fi

prefect_url="http://$host:$prefect_port"
mlflow_url="http://$host:$mlflow_port"

alive() { # alive NAME -> 0 if the pid in NAME.pid runs
    local f="$run_dir/$1.pid"
    [[ -f "$f" ]] && kill -0 "$(cat "$f")" 2>/dev/null
}

healthy() { # healthy URL
    if command -v curl >/dev/null; then
        curl -sf -o /dev/null --max-time 2 "$1"
    else
        "${bin}python" -c "import sys,urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)" "$1" 2>/dev/null
    fi
}

launch() { # launch NAME CMD... : a new session (so `stop` can signal the whole group), output to NAME.log
    local name="$1"
    shift
    if alive "$name"; then
        echo "$name: already running (pid $(cat "$run_dir/$name.pid"))"
        return
    fi
    setsid "$@" >"$run_dir/$name.log" 2>&1 </dev/null &
    echo $! >"$run_dir/$name.pid"
    echo "$name: started (pid $!, log $run_dir/$name.log)"
}

wait_healthy() { # wait_healthy NAME URL
    local name="$1" url="$2" waited=0
    until healthy "$url"; do
        if ! alive "$name"; then
            echo "$name: exited before it was healthy; last log lines:" >&2
            tail -n 30 "$run_dir/$name.log" >&2 || true
            return 1
        fi
        if ((waited >= timeout_s)); then
            echo "$name: not healthy at $url after ${timeout_s}s; last log lines:" >&2
            tail -n 30 "$run_dir/$name.log" >&2 || true
            return 1
        fi
        sleep 1
        waited=$((waited + 1))
    done
    echo "$name: healthy at $url"
}

stop_one() { # stop_one NAME : SIGTERM the process group, SIGKILL after 20 s
    local name="$1" f="$run_dir/$1.pid" pid waited=0
    if [[ ! -f "$f" ]]; then
        echo "$name: not started by this script"
        return
    fi
    pid="$(cat "$f")"
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
        while kill -0 "$pid" 2>/dev/null && ((waited < 20)); do
            sleep 1
            waited=$((waited + 1))
        done
        if kill -0 "$pid" 2>/dev/null; then
            kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
        fi
        echo "$name: stopped (pid $pid)"
    else
        echo "$name: was not running"
    fi
    rm -f "$f"
}

start() {
    mkdir -p "$run_dir" "$home/prefect" "$home/mlartifacts"
    PREFECT_HOME="${PREFECT_HOME:-$home/prefect}" \
        PREFECT_SERVER_ANALYTICS_ENABLED=false \
        PREFECT_UI_API_URL="$prefect_url/api" \
        launch prefect "${bin}prefect" server start --host "$host" --port "$prefect_port"
    MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false \
        MLFLOW_DISABLE_TELEMETRY=true \
        launch mlflow "${bin}mlflow" server --host "$host" --port "$mlflow_port" --workers 1 \
        --backend-store-uri "sqlite:///$home/mlflow.db" \
        --artifacts-destination "$home/mlartifacts"
    local ok=0
    wait_healthy prefect "$prefect_url/api/health" || ok=1
    wait_healthy mlflow "$mlflow_url/health" || ok=1
    if ((ok != 0)); then
        stop
        return 1
    fi
    cat <<EOF

Prefect UI: $prefect_url      MLflow UI: $mlflow_url
Point WHALE (and the prefect/mlflow clients) at them with:
export PREFECT_API_URL=$prefect_url/api
export MLFLOW_TRACKING_URI=$mlflow_url
Stop them with: $0 stop
EOF
}

stop() {
    stop_one prefect
    stop_one mlflow
}

status() {
    local name
    for name in prefect mlflow; do
        if alive "$name"; then echo "$name: running (pid $(cat "$run_dir/$name.pid"))"; else echo "$name: stopped"; fi
    done
}

case "${1:-start}" in
start) start ;;
stop) stop ;;
status) status ;;
*)
    echo "usage: $0 [start|stop|status]" >&2
    exit 2
    ;;
esac
