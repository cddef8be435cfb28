#!/usr/bin/env python3
"""Train the drafting heads of the embedded default model on its frozen trunk (issue 4):

 * an MTP block of the official DeepSeek-V4 structure (REFERENCE.md §8):
       e  = enorm(embed[x_{t+1}]),  hs = hnorm(X_final[t]) per stream,
       X0 = e·E_projᵀ (every stream) + hs·H_projᵀ,  X1 = Block(X0) (SWA attention, top-k MoE,
       shared expert, its own hyper-connections),  logits = head(norm(HyperHead(X1)))
   with the trunk's embedding and LM head (shared, frozen). It predicts x_{t+2}.
 * a DSpark-style block drafter (dsv4's own small design, docs/SPECULATIVE.md): from the trunk's
   last streams at the anchor t (mean over streams -> main_proj -> main_norm = c) and W = 4 slots
   z_0 = embed[x_{t+1}] + c + pos[0], z_j = embed[pad] + c + pos[j], two pre-norm transformer
   layers (causal inside the block, no RoPE, SwiGLU), logits_j = head(final_norm(h_j)) plus a
   low-rank Markov bias markov_a[d_{j-1}]·markov_bᵀ from the previous token (d_{-1} = x_{t+1}),
   and a confidence head sigmoid(conf·final_norm(h_j)) that predicts whether slot j's greedy token
   equals the trunk's. Slot j predicts x_{t+2+j}.

Both are distilled from the trunk (KL to the trunk's next-token distribution at the position
they predict, teacher-forced on corpus and synthetic text), trained together on one frozen-trunk
forward per batch. The trunk is not changed.

    python3 scripts/gpu/train_heads.py --corpus .corpus --trunk DIR_WITH_ckpt.tar.xz_OR_hf --out OUT \
        --deadline EPOCH_SECONDS

Output in --out: heads.tar.xz = heads/mtp.safetensors (mtp.0.* in the official naming; put it
next to the trunk's model.safetensors and `dsv4 convert` adds the MTP block to the GGUF),
heads/dspark.safetensors + heads/dspark_config.json (`dsv4 convert --dspark`), heads/receipt.json,
heads/loss.png, heads/train.log.
"""
import argparse
import copy
import json
import math
import os
import random
import sys
import tarfile
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_tiny as tt  # noqa: E402  (tokenizer wrapper, synthetic tasks, checkpoint unpacking)

T_START = time.time()
W_BLOCK = 4          # DSpark block size (drafts per pass)
DS_LAYERS, DS_HEADS, DS_HEAD_DIM, DS_FFN, DS_RANK = 2, 4, 64, 512, 32


def log(msg):
    tt.log(msg)


def parse_args():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default=".corpus")
    ap.add_argument("--trunk", required=True, help="folder with ckpt.tar.xz.NN parts, or an hf/ folder")
    ap.add_argument("--out", required=True)
    ap.add_argument("--deadline", type=float, default=0)
    ap.add_argument("--reserve", type=float, default=60)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--synth-frac", type=float, default=0.25)
    ap.add_argument("--anchors", type=int, default=8192, help="DSpark anchors sampled per batch")
    ap.add_argument("--seed", type=int, default=77)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--init-heads", default="",
                    help="folder with mtp.safetensors + dspark.safetensors (gguf_to_hf.py of the shipped "
                         "GGUFs) to start both heads from")
    return ap.parse_args()


def build(trunk, device):
    """The MTP block (inside a 1-layer DeepseekV4ForCausalLM whose layer 0, hc_head and norm we
    use) and the DSpark module, initialised from the trunk where shapes allow."""
    import torch
    from torch import nn
    from transformers import DeepseekV4ForCausalLM
    from transformers.models.deepseek_v4 import modeling_deepseek_v4 as mdv4

    cfg = trunk.config
    mcfg = copy.deepcopy(cfg)  # the trunk's config with one sliding, top-k-routed layer
    mcfg.num_hidden_layers = 1
    mcfg.layer_types = [tt.SWA]
    mcfg.mlp_layer_types = ["moe"]
    mcfg.num_nextn_predict_layers = 0
    mtp_lm = DeepseekV4ForCausalLM(mcfg).float().to(next(trunk.parameters()).device)
    mtp_lm.set_experts_implementation("eager")
    D = cfg.hidden_size
    blk = mtp_lm.model.layers[0]
    # Start from trunk pieces of the same shape: the attention of its last sliding layer, the
    # hyper-connections, norms and MoE of its last layer, its head collapse and final norm.
    swa = [i for i, t in enumerate(cfg.layer_types) if t == tt.SWA][-1]
    last = trunk.model.layers[-1]
    with torch.no_grad():
        blk.self_attn.load_state_dict(trunk.model.layers[swa].self_attn.state_dict())
        for name in ("mlp", "attn_hc", "ffn_hc", "input_layernorm", "post_attention_layernorm"):
            getattr(blk, name).load_state_dict(getattr(last, name).state_dict())
        mtp_lm.model.hc_head.load_state_dict(trunk.model.hc_head.state_dict())
        mtp_lm.model.norm.load_state_dict(trunk.model.norm.state_dict())

    class Mtp(nn.Module):
        def __init__(self):
            super().__init__()
            self.lm = mtp_lm
            self.e_proj = nn.Linear(D, D, bias=False)
            self.h_proj = nn.Linear(D, D, bias=False)
            self.enorm = mdv4.DeepseekV4RMSNorm(D, eps=cfg.rms_norm_eps)
            self.hnorm = mdv4.DeepseekV4RMSNorm(D, eps=cfg.rms_norm_eps)
            with torch.no_grad():
                self.h_proj.weight.copy_(torch.eye(D))
                self.e_proj.weight.normal_(0.0, 0.02)

        def forward(self, xf, nxt, embed, head):
            """xf [B,T,hc,D] trunk streams at t; nxt [B,T] tokens t+1 -> logits [B,T,V] for t+2."""
            from transformers.masking_utils import create_sliding_window_causal_mask
            B, T = nxt.shape
            e = self.e_proj(self.enorm(embed(nxt)))
            x0 = self.h_proj(self.hnorm(xf)) + e.unsqueeze(2)
            pos = torch.arange(T, device=nxt.device).unsqueeze(0)
            mask = create_sliding_window_causal_mask(config=mcfg, inputs_embeds=e, attention_mask=None,
                                                     past_key_values=None, position_ids=pos)
            pe = {"main": self.lm.model.rotary_emb(e, position_ids=pos, layer_type="main"),
                  "compress": self.lm.model.rotary_emb(e, position_ids=pos, layer_type="compress")}
            x1 = self.lm.model.layers[0](x0, position_embeddings=pe, position_ids=pos, attention_mask=mask,
                                         input_ids=nxt, past_key_values=None)
            return head(self.lm.model.norm(self.lm.model.hc_head(x1)))

    class DsLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn_norm = mdv4.DeepseekV4RMSNorm(D, eps=cfg.rms_norm_eps)
            self.q = nn.Linear(D, DS_HEADS * DS_HEAD_DIM, bias=False)
            self.k = nn.Linear(D, DS_HEADS * DS_HEAD_DIM, bias=False)
            self.v = nn.Linear(D, DS_HEADS * DS_HEAD_DIM, bias=False)
            self.o = nn.Linear(DS_HEADS * DS_HEAD_DIM, D, bias=False)
            self.ffn_norm = mdv4.DeepseekV4RMSNorm(D, eps=cfg.rms_norm_eps)
            self.gate = nn.Linear(D, DS_FFN, bias=False)
            self.up = nn.Linear(D, DS_FFN, bias=False)
            self.down = nn.Linear(DS_FFN, D, bias=False)
            with torch.no_grad():
                self.o.weight.mul_(0.5)
                self.down.weight.mul_(0.5)

        def forward(self, x):
            import torch.nn.functional as F
            N, Wb, _ = x.shape
            h = self.attn_norm(x)
            q, k, v = (p(h).view(N, Wb, DS_HEADS, DS_HEAD_DIM).transpose(1, 2) for p in (self.q, self.k, self.v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(N, Wb, -1)
            x = x + self.o(a)
            h = self.ffn_norm(x)
            return x + self.down(F.silu(self.gate(h)) * self.up(h))

    class DSpark(nn.Module):
        def __init__(self):
            super().__init__()
            self.main_proj = nn.Linear(D, D, bias=False)
            self.main_norm = mdv4.DeepseekV4RMSNorm(D, eps=cfg.rms_norm_eps)
            self.pos = nn.Parameter(torch.zeros(W_BLOCK, D))
            self.blk = nn.ModuleList([DsLayer() for _ in range(DS_LAYERS)])
            self.final_norm = mdv4.DeepseekV4RMSNorm(D, eps=cfg.rms_norm_eps)
            self.markov_a = nn.Parameter(torch.randn(cfg.vocab_size, DS_RANK) * 0.02)
            self.markov_b = nn.Parameter(torch.zeros(cfg.vocab_size, DS_RANK))
            self.conf = nn.Linear(D, 1)
            with torch.no_grad():
                self.pos.normal_(0.0, 0.02)

        def forward(self, xf, first, prev, embed, head):
            """xf [N,hc,D] trunk streams at the anchor; first [N] token t+1; prev [N,W] previous
            token of each slot (teacher forced) -> logits [N,W,V], confidence logit [N,W]."""
            N = first.shape[0]
            c = self.main_norm(self.main_proj(xf.mean(dim=1)))
            tok = torch.full((N, W_BLOCK), tt.PAD_ID, dtype=torch.long, device=first.device)
            tok[:, 0] = first
            z = embed(tok) + c.unsqueeze(1) + self.pos.unsqueeze(0)
            for layer in self.blk:
                z = layer(z)
            h = self.final_norm(z)
            logits = head(h) + self.markov_a[prev] @ self.markov_b.t()
            return logits, self.conf(h).squeeze(-1)

    mtp, ds = Mtp().to(device), DSpark().to(device)
    return mtp, ds, mcfg


def init_heads(mtp, ds, mcfg, trunk, d):
    """Both heads from an earlier model's (d: gguf_to_hf.py's mtp.safetensors and dspark.safetensors
    of the shipped GGUFs), so that a trunk trained further gets heads adapted rather than new."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import DeepseekV4ForCausalLM
    own = {k[len("mtp.0."):]: v for k, v in load_file(os.path.join(d, "mtp.safetensors")).items()
           if k.startswith("mtp.0.")}
    with torch.no_grad():
        for name, mod in (("e_proj", mtp.e_proj), ("h_proj", mtp.h_proj), ("enorm", mtp.enorm), ("hnorm", mtp.hnorm)):
            mod.weight.copy_(own.pop(f"{name}.weight"))
    # The rest is the 1-layer model as transformers saves it (export_mtp's inverse); it is loaded
    # through from_pretrained, which maps the saved names onto the modules.
    saved = {("model." + k if k.startswith("hc_head.") or k == "norm.weight" else "model.layers.0." + k): v
             for k, v in own.items()}
    saved["model.embed_tokens.weight"] = trunk.model.embed_tokens.weight.detach().float().cpu()
    saved["head.weight"] = trunk.lm_head.weight.detach().float().cpu()
    tmp = "/tmp/dsv4_mtp_init"
    os.makedirs(tmp, exist_ok=True)
    mcfg.to_json_file(os.path.join(tmp, "config.json"))
    save_file({k: v.contiguous() for k, v in saved.items()}, os.path.join(tmp, "model.safetensors"),
              metadata={"format": "pt"})
    m1 = DeepseekV4ForCausalLM.from_pretrained(tmp, dtype=torch.float32)
    mtp.lm.load_state_dict(m1.state_dict())
    dsw = {k[len("dspark."):]: v for k, v in load_file(os.path.join(d, "dspark.safetensors")).items()}
    ds.load_state_dict(dsw)
    log(f"heads: initialised from {d} (MTP {len(own) + 4} tensors, DSpark {len(dsw)})")


def export_mtp(mtp, path):
    """mtp.0.* in the official naming: the block's names come from saving the 1-layer model (HF
    writes the upstream names), renamed layers.0.X -> mtp.0.X; its head collapse and norm are
    mtp.0.hc_head_* and mtp.0.norm; embed and head are the trunk's and are not written."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file
    tmp = "/tmp/dsv4_mtp_export"
    m = copy.deepcopy(mtp.lm).to("cpu")
    m.save_pretrained(tmp)
    out = {}
    with safe_open(os.path.join(tmp, "model.safetensors"), "pt") as st:
        for k in st.keys():
            t = st.get_tensor(k)
            t = t.float() if t.is_floating_point() else t
            b = k[len("model."):] if k.startswith("model.") else k
            if b in ("embed.weight", "embed_tokens.weight", "head.weight", "lm_head.weight"):
                continue  # shared with the trunk
            out["mtp.0." + (b[len("layers.0."):] if b.startswith("layers.0.") else b)] = t
    for name, mod in (("e_proj", mtp.e_proj), ("h_proj", mtp.h_proj), ("enorm", mtp.enorm), ("hnorm", mtp.hnorm)):
        out[f"mtp.0.{name}.weight"] = mod.weight.detach().float().cpu().contiguous()
    save_file({k: v.contiguous() for k, v in out.items()}, path)
    return sorted(out)


def export_dspark(ds, path, cfg_path, vocab):
    from safetensors.torch import save_file
    out = {"dspark." + k: v.detach().float().cpu().contiguous() for k, v in ds.state_dict().items()}
    save_file(out, path)
    with open(cfg_path, "w") as f:
        json.dump(dict(block_size=W_BLOCK, n_layers=DS_LAYERS, n_heads=DS_HEADS, head_dim=DS_HEAD_DIM,
                       ffn=DS_FFN, markov_rank=DS_RANK, noise_token_id=tt.PAD_ID, vocab_size=vocab), f, indent=1)
    return sorted(out)


def main():
    args = parse_args()
    if not args.deadline:
        args.deadline = T_START + 540
    os.makedirs(args.out, exist_ok=True)
    hd = os.path.join(args.out, "heads")
    os.makedirs(hd, exist_ok=True)
    tt.LOG_FILE = os.path.join(hd, "train.log")

    import torch
    import torch.nn.functional as F
    from tokenizers import Tokenizer
    from transformers import DeepseekV4ForCausalLM

    torch.backends.cuda.matmul.allow_tf32 = True
    device = torch.device("cuda")
    gpu = torch.cuda.get_device_name(0)
    src = args.trunk
    if any(p.startswith("ckpt.tar.xz.") for p in os.listdir(src)):
        src = os.path.join(tt.unpack_checkpoint(src), "hf")
    trunk = DeepseekV4ForCausalLM.from_pretrained(src, dtype=torch.float32).to(device).eval()
    trunk.set_experts_implementation("eager")
    for p in trunk.parameters():
        p.requires_grad_(False)
    cfg = trunk.config
    V = cfg.vocab_size
    tok = tt.Tok(Tokenizer.from_file(os.path.join(src, "tokenizer.json")))
    log(f"trunk from {src}: {sum(p.numel() for p in trunk.parameters()) / 1e6:.2f}M params on {gpu}")

    train_docs = tt.read_docs(os.path.join(args.corpus, "train.txt.xz"))
    held_docs = tt.read_docs(os.path.join(args.corpus, "heldout.txt"))
    with open(os.path.join(args.corpus, "names.txt")) as f:
        names = [n.strip() for n in f if n.strip()]
    names_train = [n for n in names if zlib.crc32(n.encode()) % 10 != 0]
    names_eval = [n for n in names if zlib.crc32(n.encode()) % 10 == 0]
    if args.smoke:
        train_docs = train_docs[::40]
    import numpy as np
    enc = tok.encode_batch_ids(train_docs)
    stream = np.concatenate([np.array([tt.BOS_ID] + e + [tt.EOS_ID], dtype=np.int64) for e in enc])
    stream_t = torch.from_numpy(stream)
    synth = tt.Synth(train_docs, names_train, names_eval, sum(map(len, train_docs)) / len(stream))
    held = []
    for e in tok.encode_batch_ids(held_docs):
        held += [tt.BOS_ID] + e + [tt.EOS_ID]
    log(f"corpus {len(stream) / 1e6:.2f}M tokens, held-out {len(held)} tokens")

    mtp, ds, mcfg = build(trunk, device)
    if args.init_heads:
        try:
            init_heads(mtp, ds, mcfg, trunk, args.init_heads)
        except Exception as e:  # noqa: BLE001  (the heads then start as build() made them)
            log(f"heads: init from {args.init_heads} failed ({type(e).__name__}: {str(e)[:300]}); "
                "starting from the trunk-derived init")
            mtp, ds, mcfg = build(trunk, device)
    params = [p for p in list(mtp.parameters()) + list(ds.parameters()) if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.05)
    n_mtp = sum(p.numel() for p in mtp.parameters())
    n_ds = sum(p.numel() for p in ds.parameters())
    log(f"MTP block {n_mtp / 1e6:.2f}M params, DSpark {n_ds / 1e6:.2f}M params")

    X = {}
    hook = trunk.model.layers[-1].register_forward_hook(lambda m, i, o: X.__setitem__("xf", o))
    embed, head = trunk.model.embed_tokens, trunk.lm_head
    S = args.seq
    B = 2 if args.smoke else args.batch

    def batch(step, salt=0):
        ids = torch.empty((B, S), dtype=torch.long)
        for r in range(B):
            rng = random.Random(zlib.crc32(f"heads:{args.seed}:{step}:{r}:{salt}".encode()))
            res = None
            if rng.random() < args.synth_frac:
                task = rng.choice(["recall", "recall", "copy", "arithmetic", "tools"])
                res = tt.build_synthetic(tok, synth, rng, S - 1, task, 1.0)
            if res is not None:
                ids[r] = torch.tensor(res[0][:S])
            else:
                off = rng.randrange(len(stream_t) - S)
                ids[r, 0] = tt.BOS_ID
                ids[r, 1:] = stream_t[off:off + S - 1]
        return ids.to(device)

    def losses(ids, train=True):
        """Returns (mtp KL, dspark KL, conf BCE, stats). Trunk runs under no_grad."""
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            tl = trunk(input_ids=ids, use_cache=False).logits.float()
        xf = X["xf"].detach().float()
        p_log = F.log_softmax(tl, dim=-1)  # trunk's distribution of token t+1 at position t
        Bn, T = ids.shape
        with torch.autocast("cuda", dtype=torch.bfloat16):
            # MTP at t (streams t, token t+1) predicts t+2 = trunk at position t+1.
            ql = mtp(xf[:, :T - 2], ids[:, 1:T - 1], embed, head).float()
        tgt = p_log[:, 1:T - 1]
        q_log = F.log_softmax(ql, dim=-1)
        kl_mtp = (tgt.exp() * (tgt - q_log)).sum(-1).mean()
        agree_mtp = (ql.argmax(-1) == tl[:, 1:T - 1].argmax(-1)).float().mean()
        # DSpark anchors t in [0, T - W - 2]: slot j predicts t+2+j = trunk at position t+1+j.
        g = torch.Generator(device="cpu").manual_seed(int(time.time() * 1000) % (2**31) if train else 5)
        n_anch = min(args.anchors, Bn * (T - W_BLOCK - 1))
        bi = torch.randint(0, Bn, (n_anch,), generator=g).to(device)
        ti = torch.randint(0, T - W_BLOCK - 1, (n_anch,), generator=g).to(device)
        j = torch.arange(W_BLOCK, device=device)
        prev = ids[bi[:, None], (ti[:, None] + 1 + j)]           # token t+1+j precedes slot j's target
        with torch.autocast("cuda", dtype=torch.bfloat16):
            dl, cl = ds(xf[bi, ti], ids[bi, ti + 1], prev, embed, head)
        dl = dl.float()
        tgt_d = p_log[bi[:, None], ti[:, None] + 1 + j]           # [N, W, V]
        d_log = F.log_softmax(dl, dim=-1)
        kl_ds = (tgt_d.exp() * (tgt_d - d_log)).sum(-1).mean()
        hit = (dl.argmax(-1) == tgt_d.argmax(-1)).float()          # [N, W]
        bce = F.binary_cross_entropy_with_logits(cl.float(), hit)
        chain = torch.cumprod(hit, dim=1)                          # accepted while every earlier slot hit
        st = dict(agree_mtp=float(agree_mtp), ds_slot_agree=[float(x) for x in hit.mean(0)],
                  ds_mean_accepted=float(chain.sum(1).mean()))
        return kl_mtp, kl_ds, bce, st

    train_end = args.deadline - args.reserve
    t0 = time.time()
    budget = max(1.0, train_end - t0)
    hist, step = [], 0
    mtp.train()
    ds.train()
    log(f"training heads: {budget:.0f}s budget, batch {B}x{S}")
    while time.time() < train_end and not (args.smoke and step >= 3):
        remain = train_end - time.time()
        lr = args.lr * min(1.0, (step + 1) / 50) * (max(0.05, remain / (0.3 * budget)) if remain < 0.3 * budget else 1.0)
        for gp in opt.param_groups:
            gp["lr"] = lr
        a, b, c, st = losses(batch(step))
        (a + b + 0.1 * c).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        if step <= 3 or step % 20 == 0:
            h = dict(step=step, lr=lr, kl_mtp=float(a), kl_dspark=float(b), conf_bce=float(c),
                     elapsed_s=time.time() - t0, **st)
            hist.append(h)
            log(f"step {step} lr {lr:.2e} kl mtp {h['kl_mtp']:.4f} dspark {h['kl_dspark']:.4f} conf {h['conf_bce']:.4f} "
                f"agree mtp {st['agree_mtp']:.3f} dspark slots {[round(x, 3) for x in st['ds_slot_agree']]} "
                f"accepted {st['ds_mean_accepted']:.2f}")
    train_s = time.time() - t0
    log(f"training done: {step} steps, {train_s:.0f}s")

    mtp_names = export_mtp(mtp, os.path.join(hd, "mtp.safetensors"))
    ds_names = export_dspark(ds, os.path.join(hd, "dspark.safetensors"), os.path.join(hd, "dspark_config.json"), V)
    with tarfile.open(os.path.join(args.out, "heads.tar.xz"), "w:xz") as tf:  # safe copy before evaluating
        tf.add(hd, arcname="heads")
    log(f"exported {len(mtp_names)} MTP tensors, {len(ds_names)} DSpark tensors")

    # ---- held-out evaluation (fp32 trunk, the heads as trained) -------------------------------
    mtp.eval()
    ds.eval()
    try:
        ev = dict(agree_mtp=[], ds_slot_agree=[], ds_mean_accepted=[], kl_mtp=[], kl_dspark=[])
        tt.eval_model_fp32(trunk)
        with torch.no_grad():
            for i in range(0, min(len(held) - S, (4 if args.smoke else 24) * S), S):
                ids = torch.tensor([held[i:i + S]], device=device)
                a, b, c, st = losses(ids, train=False)
                ev["kl_mtp"].append(float(a))
                ev["kl_dspark"].append(float(b))
                for k in ("agree_mtp", "ds_slot_agree", "ds_mean_accepted"):
                    ev[k].append(st[k])
        n = max(1, len(ev["kl_mtp"]))
        heldout = dict(windows=len(ev["kl_mtp"]), tokens_per_window=S,
                       mtp_top1_agreement=sum(ev["agree_mtp"]) / n,
                       mtp_kl=sum(ev["kl_mtp"]) / n,
                       dspark_kl=sum(ev["kl_dspark"]) / n,
                       dspark_slot_top1_agreement=[sum(x[k] for x in ev["ds_slot_agree"]) / n for k in range(W_BLOCK)],
                       dspark_mean_accepted_of_4=sum(ev["ds_mean_accepted"]) / n)
    except Exception as e:  # noqa: BLE001
        heldout = dict(error=f"{type(e).__name__}: {str(e)[:300]}")
    log(f"held-out: {heldout}")
    hook.remove()

    receipt = dict(what="dsv4 embedded model drafting heads (issue 4): MTP block + DSpark drafter on the frozen trunk",
                   command=" ".join(sys.argv), gpu=gpu, torch=torch.__version__, steps=step, batch=B, seq=S,
                   train_minutes=train_s / 60, tokens_seen=step * B * S, mtp_params=n_mtp, dspark_params=n_ds,
                   dspark=dict(block_size=W_BLOCK, layers=DS_LAYERS, heads=DS_HEADS, head_dim=DS_HEAD_DIM,
                               ffn=DS_FFN, markov_rank=DS_RANK, anchors_per_batch=args.anchors),
                   loss="KL(trunk || head) at the predicted position + 0.1 BCE(confidence, greedy hit)",
                   heldout=heldout, mtp_tensors=mtp_names, dspark_tensors=ds_names, loss_log=hist,
                   script_minutes=(time.time() - T_START) / 60)
    with open(os.path.join(hd, "receipt.json"), "w") as f:
        json.dump(receipt, f, indent=1)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for k, lab in (("kl_mtp", "MTP KL to trunk"), ("kl_dspark", "DSpark KL to trunk"), ("conf_bce", "confidence BCE")):
            ax.plot([h["step"] for h in hist], [h[k] for h in hist], label=lab, linewidth=1)
        ax.set_yscale("log")
        ax.set_xlabel("step")
        ax.set_ylabel("nats")
        ax.set_title("dsv4 tiny: drafting heads on the frozen trunk")
        ax.grid(True, alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(hd, "loss.png"), dpi=110)
    except Exception as e:  # noqa: BLE001
        log(f"plot failed: {e}")
    with tarfile.open(os.path.join(args.out, "heads.tar.xz"), "w:xz") as tf:
        tf.add(hd, arcname="heads")
    log(f"done in {(time.time() - T_START) / 60:.1f} min")


if __name__ == "__main__":
    sys.exit(main())
