#!/usr/bin/env bash
# The project's test command (README's second command; .ci/run runs exactly this).
# Creates .venv if missing, installs the pinned stack (constraints.txt) and the dev tools, installs Debian's headless
# Chromium for the MLflow UI test where apt is available, then runs ruff, mypy and the whole pytest suite.
#
#   bash scripts/test.sh            the whole suite (what CI runs)
#   bash scripts/test.sh --fast     the fast lane for whoever changes the code: every unit test (not `slow`, nothing
#                                   under tests/flows, which start Prefect servers and real runs), ~1-2 min on 2 cores
#   bash scripts/test.sh ARGS       ARGS go to pytest (e.g. tests/ascent -x)
set -euo pipefail
cd "$(dirname "$0")/.."
FAST=()
if [ "${1:-}" = "--fast" ]; then
  shift
  FAST=(-m "not slow" --ignore=tests/flows)
fi

PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x .venv/bin/python ]; then
  echo "== creating .venv with $PY"
  "$PY" -m venv .venv
fi
echo "== installing (pinned by constraints.txt)"
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -c constraints.txt -e ".[dev]"

if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "== installing Debian's chromium for the browser test"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
  else
    echo "!! /usr/bin/chromium or chromedriver is missing and cannot be installed here: the browser test will fail" >&2
  fi
fi

echo "== ruff"
.venv/bin/ruff check .
echo "== mypy"
.venv/bin/mypy
echo "== pytest"
set +e
.venv/bin/python -m pytest -p no:cacheprovider "${FAST[@]}" "$@"
rc=$?
set -e
case $rc in
  0) echo "== tests passed" ;;
  5) echo "!! pytest collected no tests: that is a failure here" >&2; exit 5 ;;
  *) echo "!! pytest failed with exit code $rc" >&2; exit "$rc" ;;
esac
