#!/usr/bin/env bash
# The highest constant rate that `closingtime load` sustains with a p99
# schedule lag under 1 ms (and, for a throughput comparison, under 10 ms),
# in keep-alive and new-connection modes, against vegeta measured in the
# same run on the same target (`closingtime serve --work 0s`). vegeta is a
# dependency of bench/load's own module only, never of closingtime.
#
#   bench/load.sh [loadbench flags]     e.g. bench/load.sh -duration 5s -lag 1ms
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/closingtime" ./cmd/closingtime
(cd bench/load && go build -o "$tmp/loadbench" .)
"$tmp/loadbench" -closingtime "$tmp/closingtime" -lag 1ms,10ms "$@"
