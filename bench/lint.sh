#!/usr/bin/env bash
# Files per second of `closingtime lint` over the real-world corpus in
# internal/lint/testdata/corpus, next to kube-score v1.20.0 (installed from
# the module proxy into a temporary directory) over the same files in the
# same run, then the table of which of closingtime's rules kube-score,
# kube-linter and Polaris also have (bench/lint-peers.md).
#
# kube-score stops at the first file it cannot parse, so both tools get the
# files kube-score reads on their own; closingtime also reads the rest
# (see TestCorpus). Each tool lints them all in one invocation, RUNS times;
# the best run counts.
#
#   bench/lint.sh [RUNS]     default 5
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/closingtime" ./cmd/closingtime
GOBIN="$tmp" GOFLAGS= go install github.com/zegl/kube-score/cmd/kube-score@v1.20.0

corpus=internal/lint/testdata/corpus
find "$corpus" -type f \( -name '*.yaml' -o -name '*.yml' \) | sort > "$tmp/all"
while read -r f; do
	out=$("$tmp/kube-score" score -o ci "$f" </dev/null 2>&1 || true)
	case $out in
	*"Failed to score files"*) ;;
	*) echo "$f" ;;
	esac
done < "$tmp/all" > "$tmp/files"
mapfile -t files < "$tmp/files"
objects=$(cat "${files[@]}" | grep -c '^kind:' || true)
echo "corpus: ${#files[@]} of $(wc -l < "$tmp/all") files that kube-score parses, about $objects objects"

# best prints the fastest of $runs wall-clock times of "$@", in seconds.
best() {
	local b="" t0 t1
	for ((i = 0; i < runs; i++)); do
		t0=$(date +%s.%N)
		"$@" >/dev/null 2>&1 || true
		t1=$(date +%s.%N)
		b=$(awk -v t="$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" -v b="$b" 'BEGIN { print (b == "" || t < b) ? t : b }')
	done
	echo "$b"
}
ct=$(best "$tmp/closingtime" lint -o json "${files[@]}")
ks=$(best "$tmp/kube-score" score -o ci "${files[@]}")
awk -v n="${#files[@]}" -v ct="$ct" -v ks="$ks" 'BEGIN {
	printf "%-28s %8s %12s\n", "tool", "seconds", "files/s"
	printf "%-28s %8.3f %12.0f\n", "closingtime lint", ct, n / ct
	printf "%-28s %8.3f %12.0f\n", "kube-score v1.20.0 score", ks, n / ks
	printf "closingtime is %.2fx the speed of kube-score\n\n", ks / ct
}'
cat bench/lint-peers.md
