#!/usr/bin/env bash
# Requests per second through graceful.Server against plain net/http with the
# same handler, on keep-alive connections and on a new connection per request,
# measured in one `go test -bench` run and compared with benchstat.
#
#   bench/graceful.sh [count]     (default count: 10)
set -euo pipefail
cd "$(dirname "$0")/.."
count=${1:-10}
benchstat_version=v0.0.0-20260908200009-22c9c6c9d4da
go install "golang.org/x/perf/cmd/benchstat@$benchstat_version"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
go test -run '^$' -bench Serve -count "$count" ./graceful | tee "$out"
"$(go env GOPATH)/bin/benchstat" -col /server "$out"
