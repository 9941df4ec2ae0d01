#!/usr/bin/env bash
# closingtime proxy against NGINX, as a reverse proxy to the same upstream,
# in one run: the p99 latency each adds at 1,500 requests/s, and the
# throughput of closed-loop keep-alive clients through each, as a ratio.
# Installs Debian's NGINX (nginx-light) if it is missing.
#
#   bench/proxy.sh [proxybench flags]     e.g. bench/proxy.sh -duration 5s -conns 32
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v nginx >/dev/null; then
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nginx-light >/dev/null
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/closingtime" ./cmd/closingtime
(cd bench/proxy && go build -o "$tmp/proxybench" .)
"$tmp/proxybench" -closingtime "$tmp/closingtime" -nginx "$(command -v nginx)" "$@"
