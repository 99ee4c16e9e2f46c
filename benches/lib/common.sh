# shellcheck shell=bash
# Helpers for the benchmark scripts in benches/: functions only, no settings and no side effects.
# Source it with `. "$(dirname "$0")/lib/common.sh"` (lib/cluster.sh sources it itself). Provides:
#   now_ms     milliseconds since the epoch
#   json EXPR  prints the Python expression EXPR over `d`, the JSON document read from stdin
#   median     the median of the numbers read from stdin (one a line or separated by spaces)

now_ms() { date +%s%3N; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
