#!/usr/bin/env python3
"""Writes tests/fixtures/byte_tokenizer/tokenizer.json: a DeepSeek-V3-style byte-level BPE small
enough for the fixture models' vocabularies (>= 300 rows), so `dsv4 run` can be tested on them.

Ids: 0 BOS, 1 EOS, 2..257 the 256 byte tokens (GPT-2 byte alphabet), then a few merges of
common English pairs. The pre-tokenizer, decoder and post-processor sections are the DeepSeek-V3
ones (taken from the embedded model's tokenizer.json given as argv[1], which has them verbatim).
"""
import json
import sys


def byte_alphabet():
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    out, n = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + n)
            n += 1
    return out


def main():
    src = json.load(open(sys.argv[1], encoding="utf-8"))
    alpha = byte_alphabet()
    specials = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"]
    vocab = {}
    for b in range(256):
        vocab[alpha[b]] = 2 + b
    sp = alpha[ord(" ")]
    pairs = [("t", "h"), ("th", "e"), (sp, "t"), (sp, "the"), ("i", "n"), ("e", "r"), ("a", "n"), ("o", "n"),
             (sp, "a"), ("e", "n"), (sp, "s"), ("in", "g"), (sp, "w"), ("o", "r"), (sp, "o"), ("e", "s")]
    merges = []
    for a, b in pairs:
        merges.append(f"{a} {b}")
        vocab[a + b] = len(vocab) + len(specials)
    added = [dict(id=i, content=s, single_word=False, lstrip=False, rstrip=False, normalized=False, special=True)
             for i, s in enumerate(specials)]
    out = dict(version="1.0", truncation=None, padding=None, added_tokens=added, normalizer=src["normalizer"],
               pre_tokenizer=src["pre_tokenizer"], post_processor=src["post_processor"], decoder=src["decoder"],
               model=dict(type="BPE", dropout=None, unk_token=None, continuing_subword_prefix=None,
                          end_of_word_suffix=None, fuse_unk=False, byte_fallback=False, ignore_merges=False,
                          vocab=vocab, merges=merges))
    path = "tests/fixtures/byte_tokenizer/tokenizer.json"
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=0)
    print(f"{path}: {len(vocab) + len(specials)} tokens, {len(merges)} merges")


if __name__ == "__main__":
    main()
