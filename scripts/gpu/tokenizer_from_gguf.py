#!/usr/bin/env python3
"""Rebuild the Hugging Face tokenizer.json of a dsv4 GGUF from its tokenizer.ggml.* keys, so that
a model trained later (train_tiny.py --tokenizer) keeps the shipped model's tokenizer exactly:

    python3 scripts/gpu/tokenizer_from_gguf.py models/dsv4-tiny.gguf OUT/tokenizer.json

The GGUF holds the byte-level BPE vocabulary (tokens, in id order) and its merges ("a b"); the
normalizer, pre-tokenizer, decoder, post-processor and the added-token flags are the DeepSeek-V3
sections that train_tiny.py puts into every tokenizer it trains. Pure Python (no tokenizers
library): the device call that uses the file checks its encodings against tests/data/tiny_refs.
"""
import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_tiny as tt  # noqa: E402  (the V3 sections and the special tokens; imports no torch)

# GGUF metadata value types (gguf v3): the fixed-size ones as struct formats.
SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9


class Reader:
    """Little-endian reads from a GGUF's bytes at a moving offset (at)."""

    def __init__(self, buf, path, at=0):
        self.buf, self.path, self.at = buf, path, at

    def take(self, fmt):
        """One value of struct format fmt ("<Q")."""
        return self.many(fmt, 1)[0]

    def many(self, fmt, n):
        """n values of struct format fmt, as a list."""
        f = f"<{n}{fmt[1:]}"
        v = struct.unpack_from(f, self.buf, self.at)
        self.at += struct.calcsize(f)
        return list(v)

    def string(self):
        n = self.take("<Q")
        s = self.buf[self.at:self.at + n].decode("utf-8")
        self.at += n
        return s

    def value(self, t):
        if t in SCALAR:
            return self.take(SCALAR[t])
        if t == STRING:
            return self.string()
        if t == ARRAY:
            et, n = self.take("<I"), self.take("<Q")
            return [self.value(et) for _ in range(n)]
        raise SystemExit(f"{self.path}: unknown GGUF value type {t}")


def parse_metadata(buf, path):
    """(the key-value section as a dict, arrays as lists; a Reader just after it, at the tensor
    infos; the tensor count) of a GGUF's bytes."""
    if buf[:4] != b"GGUF":
        raise SystemExit(f"{path}: not a GGUF file")
    r = Reader(buf, path, 4)
    version = r.take("<I")
    if version != 3:
        raise SystemExit(f"{path}: GGUF version {version}, expected 3")
    n_tensors, n_kv = r.take("<Q"), r.take("<Q")
    kv = {}
    for _ in range(n_kv):
        k = r.string()
        kv[k] = r.value(r.take("<I"))
    return kv, r, n_tensors


def read_metadata(path):
    with open(path, "rb") as f:
        buf = f.read(64 << 20)  # the metadata of a small model is far smaller than this
    return parse_metadata(buf, path)[0]


def tokenizer_json(kv, path):
    tokens, merges = kv.get("tokenizer.ggml.tokens"), kv.get("tokenizer.ggml.merges")
    if kv.get("tokenizer.ggml.model") != "gpt2" or tokens is None or merges is None:
        raise SystemExit(f"{path}: no byte-level BPE tokenizer (tokenizer.ggml.model gpt2 with tokens and merges)")
    for i, (content, _) in enumerate(tt.SPECIAL_TOKENS):
        if tokens[i] != content:
            raise SystemExit(f"{path}: token {i} is {tokens[i]!r}, expected the special token {content!r}")
    added = [dict(id=i, content=c, single_word=False, lstrip=False, rstrip=False, normalized=not sp, special=sp)
             for i, (c, sp) in enumerate(tt.SPECIAL_TOKENS)]
    model = dict(type="BPE", dropout=None, unk_token=None, continuing_subword_prefix=None, end_of_word_suffix=None,
                 fuse_unk=False, byte_fallback=False, ignore_merges=False,
                 vocab={t: i for i, t in enumerate(tokens)}, merges=[m.split(" ") for m in merges])
    if len(model["vocab"]) != len(tokens):
        raise SystemExit(f"{path}: the vocabulary repeats a token")
    return dict(version="1.0", truncation=None, padding=None, added_tokens=added,
                normalizer=tt.V3_NORMALIZER, pre_tokenizer=tt.V3_PRE_TOKENIZER,
                post_processor=tt.V3_POST_PROCESSOR, decoder=tt.V3_DECODER, model=model)


def main():
    if len(sys.argv) != 3:
        raise SystemExit("usage: tokenizer_from_gguf.py MODEL.gguf OUT/tokenizer.json")
    src, out = sys.argv[1:]
    try:
        kv = read_metadata(src)
    except (struct.error, UnicodeDecodeError) as e:
        raise SystemExit(f"{src}: truncated or malformed GGUF ({e})")
    j = tokenizer_json(kv, src)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False)
    print(f"{out}: {len(j['model']['vocab'])} tokens, {len(j['model']['merges'])} merges")


if __name__ == "__main__":
    main()
