#!/usr/bin/env bash
# The highest constant rate of gRPC calls that `closingtime load
# grpc://…` sustains against `closingtime serve --grpc --work 0s`, against
# ghz measured in the same run on the same target (its --rps mode), and
# the ratio. ghz is built from the Go module proxy into a temporary
# directory, never a dependency of closingtime. Trials last 10 s: ghz counts
# its connects in its duration. The calls ghz cancels itself as its run
# ends are counted apart, neither ok nor failed. Both tools are held to the
# same p99 schedule lag, ghz's from its calls' start times.
#
#   bench/grpc.sh [loadbench flags]     e.g. bench/grpc.sh -duration 5s -connections 8
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/closingtime" ./cmd/closingtime
(cd bench/load && go build -o "$tmp/loadbench" .)
GOBIN="$tmp" go install github.com/bojand/ghz/cmd/ghz@v0.93.0
"$tmp/loadbench" -closingtime "$tmp/closingtime" -ghz "$tmp/ghz" -proto "$PWD/internal/labpb/lab.proto" "$@"
