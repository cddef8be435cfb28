#!/usr/bin/env python3
"""Reference numbers for the regression tests of the shipped model (tests/test_default_model.cpp),
made with the training libraries on the trained Hugging Face folder:

    python3 scripts/gpu/make_model_refs.py HF_DIR tests/data/heldout_sample.txt OUT_DIR

OUT_DIR/heldout_ids.txt   `tokenizers`' encoding of each document of the sample (documents are
                          separated by a line holding only U+001E), one line of ids per document
OUT_DIR/refs.json         fp32 transformers NLL of [BOS] doc [EOS] ... (all documents in one
                          sequence), and greedy continuations (ids) of fixed prompts
"""
import json
import math
import os
import sys

PROMPTS = ["Call me Ishmael.", "In the beginning", "Fellow-Citizens of the Senate and House of Representatives:"]


def main():
    import torch
    import torch.nn.functional as F
    from tokenizers import Tokenizer
    from transformers import DeepseekV4ForCausalLM
    hf, sample, out = sys.argv[1:4]
    os.makedirs(out, exist_ok=True)
    tok = Tokenizer.from_file(os.path.join(hf, "tokenizer.json"))
    docs = open(sample, encoding="utf-8").read().rstrip("\n").split("\n\x1e\n")
    ids = [tok.encode(d, add_special_tokens=False).ids for d in docs]
    with open(os.path.join(out, "heldout_ids.txt"), "w") as f:
        for row in ids:
            f.write(" ".join(map(str, row)) + "\n")
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    m = DeepseekV4ForCausalLM.from_pretrained(hf, dtype=torch.float32).to(dev).eval()
    m.set_experts_implementation("eager")
    seq = []
    for row in ids:
        seq += [0] + row + [1]
    with torch.no_grad():
        x = torch.tensor([seq], device=dev)
        logits = m(input_ids=x, use_cache=False).logits[0].float()
        nll = F.cross_entropy(logits[:-1], x[0, 1:], reduction="sum").item()
        greedy = []
        for p in PROMPTS:
            g = [0] + tok.encode(p, add_special_tokens=False).ids
            n0 = len(g)
            for _ in range(48):
                nxt = int(m(input_ids=torch.tensor([g], device=dev), use_cache=False).logits[0, -1].argmax())
                g.append(nxt)
                if nxt == 1:
                    break
            greedy.append(dict(prompt=p, prompt_ids=g[:n0], continuation=g[n0:]))
    refs = dict(hf=hf, tokens=len(seq), scored=len(seq) - 1, nll_nats=nll / (len(seq) - 1),
                ppl=math.exp(nll / (len(seq) - 1)), greedy=greedy, device=str(dev))
    with open(os.path.join(out, "refs.json"), "w") as f:
        json.dump(refs, f, indent=1)
    print(f"refs: {len(seq)} tokens, ppl {refs['ppl']:.3f}; greedy {[len(g['continuation']) for g in greedy]}")


if __name__ == "__main__":
    main()
