#!/usr/bin/env python3
"""Reference outputs for dsv4's MTP and DSpark forwards (there is no transformers oracle for
either): random heads of the structure train_heads.py trains, on the mini_flash fixture trunk,
evaluated in float32 on the CPU by the same PyTorch modules.

    python3 scripts/gpu/make_head_fixtures.py tests/fixtures/mini_flash OUT_DIR

OUT_DIR gets mtp.safetensors (mtp.0.*), dspark.safetensors + dspark_config.json, and
  mtp_logits.f32     [T-1, vocab]: MTP at t (trunk streams at t, token t+1) for t = 0..T-2
  dspark_anchors.txt anchor positions t
  dspark_logits.f32  [anchors, W, vocab]: slot j (previous token = token t+1+j, teacher forced)
  dspark_conf.f32    [anchors, W]: the confidence logits
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_heads as th  # noqa: E402


def main():
    import torch
    from transformers import DeepseekV4ForCausalLM
    src, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(20261203)
    trunk = DeepseekV4ForCausalLM.from_pretrained(src, dtype=torch.float32).eval()
    trunk.set_experts_implementation("eager")
    mtp, ds, _ = th.build(trunk, torch.device("cpu"))
    with torch.no_grad():  # every weight away from its initial copy or constant
        for m in (mtp, ds):
            for name, p in m.named_parameters():
                p.add_(torch.randn_like(p) * (0.05 if p.dim() > 1 else 0.1))
    mtp.eval()
    ds.eval()
    with open(os.path.join(src, "tokens.txt")) as f:
        toks = [int(t) for t in f.read().split()]
    ids = torch.tensor([toks])
    T = len(toks)
    X = {}
    hook = trunk.model.layers[-1].register_forward_hook(lambda m, i, o: X.__setitem__("xf", o))
    embed, head = trunk.model.embed_tokens, trunk.lm_head
    with torch.no_grad():
        trunk(input_ids=ids, use_cache=False)
        xf = X["xf"].float()
        ml = mtp(xf[:, :T - 1], ids[:, 1:T], embed, head)[0]
        W = th.W_BLOCK
        anchors = [0, 1, 5, 17, 40, 63, 100, 150, T - W - 2]
        bi = torch.zeros(len(anchors), dtype=torch.long)
        ti = torch.tensor(anchors)
        j = torch.arange(W)
        prev = ids[bi[:, None], ti[:, None] + 1 + j]
        dl, cl = ds(xf[bi, ti], ids[bi, ti + 1], prev, embed, head)
    hook.remove()
    ml.contiguous().numpy().astype("<f4").tofile(os.path.join(out, "mtp_logits.f32"))
    dl.contiguous().numpy().astype("<f4").tofile(os.path.join(out, "dspark_logits.f32"))
    cl.contiguous().numpy().astype("<f4").tofile(os.path.join(out, "dspark_conf.f32"))
    with open(os.path.join(out, "dspark_anchors.txt"), "w") as f:
        f.write(" ".join(map(str, anchors)) + "\n")
    names = th.export_mtp(mtp, os.path.join(out, "mtp.safetensors"))
    th.export_dspark(ds, os.path.join(out, "dspark.safetensors"), os.path.join(out, "dspark_config.json"),
                     trunk.config.vocab_size)
    with open(os.path.join(out, "meta.json"), "w") as f:
        json.dump(dict(trunk=src, tokens=T, mtp_tensors=names, anchors=anchors,
                       mtp_logit_absmax=float(ml.abs().max()), dspark_logit_absmax=float(dl.abs().max())), f, indent=1)
    print(f"head fixtures in {out}: mtp {tuple(ml.shape)}, dspark {tuple(dl.shape)}, {len(names)} MTP tensors")


if __name__ == "__main__":
    main()
