#!/usr/bin/env bash
# End-to-end test of dsv4 serve with clients we did not write: the official openai and
# @anthropic-ai/sdk npm packages, and curl, against the real server binary and the embedded
# default model. Idempotent and safe to run concurrently:
#   1. installs the pinned SDKs into BUILD_DIR/server_e2e (not into the repository);
#   2. starts `dsv4 serve` on a free loopback port;
#   3. runs e2e.mjs (every endpoint, streaming, tools, errors, cancellation, concurrency, and
#      a bounded load test), then stops the server with SIGTERM and checks it exits 0.
# Exits 77 (skip) when node/npm are missing or the npm registry cannot be reached.
# Usage: tests/server_e2e/run.sh BUILD_DIR DSV4_BINARY
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:?usage: run.sh BUILD_DIR DSV4_BINARY}"
bin="${2:?usage: run.sh BUILD_DIR DSV4_BINARY}"
work="$build/server_e2e"
mkdir -p "$work"

exec 9>"$work/.lock"
flock 9

for tool in node npm curl; do
    command -v "$tool" >/dev/null || { echo "run.sh: '$tool' not found: skipping (install Debian's nodejs, npm, curl)" >&2; exit 77; }
done

installed() {  # package version
    local f="$work/node_modules/$1/package.json"
    [ -f "$f" ] && node -e "process.exit(require(process.argv[1]).version === process.argv[2] ? 0 : 1)" "$f" "$2"
}
if ! installed openai 6.49.0 || ! installed @anthropic-ai/sdk 1.16.0; then
    cp "$here/package.json" "$work/package.json"
    echo "run.sh: npm install openai@6.49.0 @anthropic-ai/sdk@1.16.0 into $work" >&2
    if ! (cd "$work" && npm install --no-audit --no-fund --loglevel=error >&2); then
        echo "run.sh: npm install failed (is the npm registry reachable?): skipping" >&2
        exit 77
    fi
fi
cp "$here/e2e.mjs" "$work/e2e.mjs"  # beside node_modules, so its imports resolve

log="$work/server.log"
"$bin" serve --port 0 --parallel 2 > "$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true' EXIT
port=""
for _ in $(seq 1 300); do
    port="$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log" | head -1)"
    [ -n "$port" ] && break
    kill -0 "$pid" 2>/dev/null || { echo "run.sh: the server exited:" >&2; cat "$log" >&2; exit 1; }
    sleep 0.1
done
[ -n "$port" ] || { echo "run.sh: the server did not start within 30 s:" >&2; cat "$log" >&2; exit 1; }
model="$(sed -n "s/.*(model '\([^']*\)'.*/\1/p" "$log" | head -1)"
echo "run.sh: dsv4 serve on port $port, model $model" >&2

status=0
node "$work/e2e.mjs" "http://127.0.0.1:$port" "$model" || status=$?

kill -TERM "$pid"
server_rc=0
wait "$pid" || server_rc=$?
trap - EXIT
if [ "$server_rc" -ne 0 ]; then
    echo "run.sh: the server exited with status $server_rc after SIGTERM (expected 0); its log:" >&2
    tail -20 "$log" >&2
    status=1
fi
exit "$status"
