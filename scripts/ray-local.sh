#!/usr/bin/env bash
# A local Ray head to try the Ray backend (not a production install).
#   scripts/ray-local.sh up     # one node carrying both budgeteer resources; Jobs API on :8265,
#                               # GCS on :6379
#   scripts/ray-local.sh down
# Needs the `ray` extra: .venv/bin/pip install -e '.[ray]'.
set -euo pipefail
cd "$(dirname "$0")/.."
ray=.venv/bin/ray
case "${1:-}" in
  up)
    "$ray" start --head --port 6379 --num-cpus 2 --include-dashboard true --dashboard-host 127.0.0.1 \
      --dashboard-port 8265 --resources '{"budgeteer-od": 4, "budgeteer-spot": 4}'
    ;;
  down) "$ray" stop ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
