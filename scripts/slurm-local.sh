#!/usr/bin/env bash
# A local Slurm to try the Slurm backend (not a production install: root, no authentication).
#   scripts/slurm-local.sh up     # starts it; prints the SLURM_CONF to export
#   scripts/slurm-local.sh down   # stops the one `up` started
# Needs the Debian packages slurmctld slurmd slurm-client, and root.
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
state=.slurm-local
case "${1:-}" in
  up)
    out="$("$py" -m budgeteer.backends.slurm_local up)"
    echo "$out"
    echo "$out" | sed -n 's/^export SLURM_CONF=\(.*\)\/slurm.conf$/\1/p' > "$state"
    ;;
  down)
    [ -f "$state" ] || { echo "no local Slurm started from here" >&2; exit 1; }
    "$py" -m budgeteer.backends.slurm_local down "$(cat "$state")"
    rm -f "$state"
    ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
