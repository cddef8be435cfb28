#!/usr/bin/env python3
"""Makes the token tapes of `dsv4 quality` (models/tapes/*.tokens) from the texts in
models/tapes/src/, with the tokenizer of the default model (through `dsv4 tokenize`, so the
ids are exactly what the engine's tokenizer gives):

  prose.txt         the start of a held-out State of the Union address (US Government work,
                    public domain), cut from .corpus/heldout.txt when that folder exists (the
                    committed copy is used otherwise)
  code.txt          Python and C written for these tapes
  tool_calls.txt    tool-call exchanges in the DeepSeek chat format (JSON arguments and results)
  multilingual.txt  one paragraph in each of 19 languages, written for these tapes

Each tape starts with BOS and holds at most --max-tokens ids. Remake the tapes whenever the
default model's tokenizer changes (dsv4 quality refuses tapes of another tokenizer).
Usage: scripts/make_tapes.py --dsv4 build/dsv4 [--model FILE] [--corpus .corpus] [--max-tokens 2048]
"""
import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TAPES = os.path.join(ROOT, "models", "tapes")
PROSE_DOC = "State of the Union Address by John F Kennedy, 1961"
PROSE_CHARS = 7000


def refresh_prose(corpus):
    path = os.path.join(corpus, "heldout.txt")
    if not os.path.exists(path):
        return False
    with open(path, encoding="utf-8") as f:
        docs = f.read().split("\n\x1e\n")
    doc = next((d for d in docs if d.startswith(PROSE_DOC)), None)
    if doc is None:
        sys.exit(f"{path}: no document starting with '{PROSE_DOC}'")
    text = doc[:PROSE_CHARS]
    text = text[: text.rfind(". ") + 1].rstrip() + "\n"  # end on a sentence (paragraphs are long lines)
    with open(os.path.join(TAPES, "src", "prose.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dsv4", required=True, help="the dsv4 binary")
    ap.add_argument("--model", default="", help="model whose tokenizer to use (default: the embedded model)")
    ap.add_argument("--corpus", default=os.path.join(ROOT, ".corpus"))
    ap.add_argument("--max-tokens", type=int, default=2048)
    a = ap.parse_args()
    if refresh_prose(a.corpus):
        print("prose.txt cut from", os.path.join(a.corpus, "heldout.txt"))
    for name in sorted(os.listdir(os.path.join(TAPES, "src"))):
        if not name.endswith(".txt"):
            continue
        src = os.path.join(TAPES, "src", name)
        out = os.path.join(TAPES, name[:-4] + ".tokens")
        cmd = [a.dsv4, "tokenize", "--file", src, "--bos", "--max-tokens", str(a.max_tokens), "--tape", out,
               "--source", "models/tapes/src/" + name]
        if a.model:
            cmd += ["--model", a.model]
        subprocess.run(cmd, check=True)


if __name__ == "__main__":
    main()
