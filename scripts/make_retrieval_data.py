#!/usr/bin/env python3
"""Makes the two data files of `dsv4 eval retrieval` from the ignored corpus folder (.corpus/,
built by scripts/corpus/build_corpus.sh):

  models/retrieval_names.txt   the first names held out of training: every name of
                               .corpus/names.txt whose zlib.crc32(UTF-8 name) % 10 == 0
                               (train_tiny.py trains on the others), one per line
  models/retrieval_filler.txt  about 80 KB of filler text from .corpus/heldout.txt (documents
                               the model never saw): the first MAX_PER_DOC characters of each
                               document of at least MIN_DOC characters, cut at a line end, in
                               file order, so every source of the held-out split is mixed in;
                               documents separated by a line holding only U+001E, as in the corpus

Deterministic: the same corpus gives the same bytes. Usage: scripts/make_retrieval_data.py
[--corpus .corpus] [--out models] [--bytes 80000]
"""
import argparse
import os
import sys
import zlib

SEP = "\n\x1e\n"
MIN_DOC = 1500      # train_tiny.py's filler also skips shorter documents
MAX_PER_DOC = 4000  # so that no single source dominates the filler


def held_out_names(path):
    with open(path, encoding="utf-8") as f:
        names = [line.strip() for line in f if line.strip()]
    return [n for n in names if zlib.crc32(n.encode("utf-8")) % 10 == 0]


def filler_docs(path, budget):
    with open(path, encoding="utf-8") as f:
        docs = [d.strip("\n") for d in f.read().split(SEP)]
    out, total = [], 0
    for d in docs:
        if len(d) < MIN_DOC:
            continue
        piece = d[:MAX_PER_DOC]
        if len(piece) < len(d):
            cut = piece.rfind("\n")
            if cut > MIN_DOC // 2:
                piece = piece[:cut]
        piece = piece.rstrip()
        if total + len(piece) > budget:
            piece = piece[: max(0, budget - total)]
            cut = piece.rfind("\n")
            piece = piece[:cut].rstrip() if cut > 0 else ""
        if piece:
            out.append(piece)
            total += len(piece) + len(SEP)
        if total >= budget:
            break
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", default=".corpus")
    ap.add_argument("--out", default="models")
    ap.add_argument("--bytes", type=int, default=80000, help="filler size in characters (about)")
    a = ap.parse_args()
    for f in ("names.txt", "heldout.txt"):
        if not os.path.exists(os.path.join(a.corpus, f)):
            sys.exit(f"{os.path.join(a.corpus, f)}: missing (run scripts/corpus/build_corpus.sh first)")
    names = held_out_names(os.path.join(a.corpus, "names.txt"))
    docs = filler_docs(os.path.join(a.corpus, "heldout.txt"), a.bytes)
    with open(os.path.join(a.out, "retrieval_names.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write("".join(n + "\n" for n in names))
    with open(os.path.join(a.out, "retrieval_filler.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write(SEP.join(docs) + "\n")
    print(f"{len(names)} held-out names, {len(docs)} filler documents "
          f"({sum(len(d) for d in docs)} characters)")


if __name__ == "__main__":
    main()
