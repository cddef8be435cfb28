#!/usr/bin/env python3
"""Reference fixtures for dsv4, made from transformers' DeepseekV4ForCausalLM.

Run on the GPU machine (transformers 5.17 is installed there):

    python3 scripts/gpu/make_fixtures.py --out DIR

For every config below it builds the model with random weights (every parameter and
buffer randomised at a scale that keeps activations O(1): default init leaves norms at
one, sinks/biases at zero and tid2eid at zero, which would hide bugs), runs one full
forward in float32 with TF32 off and eager experts, and writes under DIR/<name>/:

    config.json, model.safetensors   what save_pretrained wrote (one fixture gets a
                                     legacy-style config.json and reloads from it)
    tokens.txt                       the token ids, space separated
    logits.f32                       [n_tokens, vocab] float32 little endian
    hidden.f32                       first 64 tokens of HF's hidden_states (debug aid): the embedding
                                     broadcast to [hc_mult, hidden], the streams after layers 0..n-2,
                                     then the final hc_head+norm output [hidden] (HF puts
                                     last_hidden_state in place of the last layer's output)
    meta.json                        shapes, max |logit|, chunked-vs-full check, tie gaps

Seeds are retried until no indexer or router top-k boundary is within float error of a
tie (a sum of ReLUs can tie exactly at 0), so the selected sets are unambiguous.
"""
import argparse
import copy
import json
import math
import os
import shutil
import sys

import torch

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.set_float32_matmul_precision("highest")

from transformers import DeepseekV4Config, DeepseekV4ForCausalLM  # noqa: E402
from transformers.models.deepseek_v4 import modeling_deepseek_v4 as mdv4  # noqa: E402

SWA, CSA, HCA = "sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"

# Each entry: name, config kwargs, sequence length, how to save.
FIXTURES = [
    # Flash-like schedule (SWA, SWA, then CSA/HCA), real rope/yarn values, hash then top-k MoE.
    ("mini_flash", dict(
        vocab_size=384, hidden_size=64, num_hidden_layers=6,
        layer_types=[SWA, SWA, CSA, HCA, CSA, HCA],
        mlp_layer_types=["hash_moe"] * 3 + ["moe"] * 3,
        compress_rates={CSA: 4, HCA: 16},
        num_attention_heads=4, head_dim=64, partial_rotary_factor=0.25, q_lora_rank=32,
        o_groups=2, o_lora_rank=16, sliding_window=16,
        index_n_heads=8, index_head_dim=32, index_topk=8,
        n_routed_experts=8, num_experts_per_tok=3, moe_intermediate_size=32,
        hc_mult=4, hc_sinkhorn_iters=20,
        rope_theta=10000.0, compress_rope_theta=160000.0,
        rope_parameters={"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 65536,
                         "beta_fast": 32.0, "beta_slow": 1.0},
    ), 192, "upstream"),
    # Legacy config keys (compress_ratios, num_hash_layers, qk_rope_head_dim, flat rope_scaling),
    # HF module names in the safetensors (save_original_format=False), hc_mult 2, real HCA rate 128.
    ("legacy_hfnames", dict(
        vocab_size=320, hidden_size=96, num_hidden_layers=4,
        layer_types=[SWA, CSA, HCA, CSA], mlp_layer_types=["hash_moe"] + ["moe"] * 3,
        compress_rates={CSA: 4, HCA: 128},
        num_attention_heads=8, head_dim=32, partial_rotary_factor=0.25, q_lora_rank=48,
        o_groups=4, o_lora_rank=24, sliding_window=32,
        index_n_heads=8, index_head_dim=16, index_topk=16,
        n_routed_experts=6, num_experts_per_tok=2, moe_intermediate_size=24,
        hc_mult=2, hc_sinkhorn_iters=5,
        rope_theta=10000.0, compress_rope_theta=50000.0,
        rope_parameters={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256,
                         "beta_fast": 32.0, "beta_slow": 1.0},
    ), 300, "hfnames_legacy"),
    # Odd layer orders (CSA first, hash MoE after a top-k layer), wide rope slice, no yarn.
    ("odd_order", dict(
        vocab_size=256, hidden_size=48, num_hidden_layers=3,
        layer_types=[CSA, SWA, HCA], mlp_layer_types=["hash_moe", "moe", "hash_moe"],
        compress_rates={CSA: 4, HCA: 32},
        num_attention_heads=2, head_dim=128, partial_rotary_factor=0.5, q_lora_rank=40,
        o_groups=1, o_lora_rank=32, sliding_window=64,
        index_n_heads=8, index_head_dim=64, index_topk=12,
        n_routed_experts=16, num_experts_per_tok=6, moe_intermediate_size=16,
        hc_mult=4, hc_sinkhorn_iters=20,
        rope_theta=10000.0, compress_rope_theta=160000.0,
    ), 140, "upstream"),
    # Longer sequence: the indexer keeps 32 of up to 150 rows, HCA emits 9 rows.
    ("long_seq", dict(
        vocab_size=512, hidden_size=64, num_hidden_layers=4,
        layer_types=[SWA, CSA, HCA, CSA], mlp_layer_types=["hash_moe", "moe", "moe", "moe"],
        compress_rates={CSA: 4, HCA: 64},
        num_attention_heads=4, head_dim=32, partial_rotary_factor=0.5, q_lora_rank=32,
        o_groups=2, o_lora_rank=16, sliding_window=24,
        index_n_heads=8, index_head_dim=32, index_topk=32,
        n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
        hc_mult=4, hc_sinkhorn_iters=20,
        rope_theta=10000.0, compress_rope_theta=160000.0,
        rope_parameters={"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 4096,
                         "beta_fast": 32.0, "beta_slow": 1.0},
    ), 600, "upstream"),
]

HIDDEN_TOKENS = 64  # hidden.f32 keeps the first 64 positions only: enough to localise a bug
TIE_GAP = 3e-5  # relative to the largest |score| of that query; float32 engines differ by ~1e-6


def legacy_config(cfg_kwargs):
    """The upstream DeepSeek config.json style for the same model."""
    ratio = {SWA: 0, CSA: cfg_kwargs["compress_rates"][CSA], HCA: cfg_kwargs["compress_rates"][HCA]}
    head_dim = cfg_kwargs["head_dim"]
    d = {k: v for k, v in cfg_kwargs.items()
         if k not in ("layer_types", "mlp_layer_types", "compress_rates", "partial_rotary_factor", "rope_parameters")}
    d["model_type"] = "deepseek_v4"
    d["architectures"] = ["DeepseekV4ForCausalLM"]
    d["compress_ratios"] = [ratio[t] for t in cfg_kwargs["layer_types"]] + [0]  # trailing MTP entry
    d["num_hash_layers"] = sum(1 for t in cfg_kwargs["mlp_layer_types"] if t == "hash_moe")
    d["qk_rope_head_dim"] = int(head_dim * cfg_kwargs["partial_rotary_factor"])
    d["compress_rate_csa"] = cfg_kwargs["compress_rates"][CSA]
    d["compress_rate_hca"] = cfg_kwargs["compress_rates"][HCA]
    rp = cfg_kwargs.get("rope_parameters")
    if rp:
        d["rope_scaling"] = {"type": rp["rope_type"], **{k: v for k, v in rp.items() if k != "rope_type"}}
    d["torch_dtype"] = "float32"
    return d


def randomise(model, cfg, gen):
    def rn(shape, std):
        return torch.randn(shape, generator=gen) * std

    with torch.no_grad():
        for name, p in model.named_parameters():
            shape = p.shape
            if name.endswith("sinks"):
                p.copy_(rn(shape, 0.7))
            elif name.endswith("position_bias"):
                p.copy_(rn(shape, 0.7))
            elif name.endswith(("hc.fn", "hc_fn")):
                p.copy_(rn(shape, 1.0 / math.sqrt(shape[-1])))
            elif name.endswith(("hc.base", "hc_base")):
                p.copy_(rn(shape, 0.5))
            elif name.endswith(("hc.scale", "hc_scale")):
                p.copy_(0.5 + torch.rand(shape, generator=gen))
            elif p.dim() == 1:  # weighted RMSNorms
                p.copy_(1.0 + rn(shape, 0.2))
            elif name.endswith("embed_tokens.weight"):
                p.copy_(rn(shape, 1.0))
            elif name.endswith("experts.gate_up_proj"):
                p.copy_(rn(shape, 1.0 / math.sqrt(shape[-1])))
            elif name.endswith("experts.down_proj"):
                p.copy_(rn(shape, 1.0 / math.sqrt(shape[-1])))
            elif p.dim() == 2:
                p.copy_(rn(shape, 1.0 / math.sqrt(shape[-1])))
            else:
                raise RuntimeError(f"no init rule for {name} {tuple(shape)}")
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(rn(b.shape, 0.1))
            elif name.endswith("tid2eid"):
                rows = [torch.randperm(cfg.n_routed_experts, generator=gen)[: cfg.num_experts_per_tok]
                        for _ in range(b.shape[0])]
                b.copy_(torch.stack(rows).to(b.dtype))


class TieWatch:
    """Records the smallest relative gap at the top-k boundary of the indexer and routers."""

    def __init__(self, model, cfg):
        self.min_gap = float("inf")
        self.where = ""
        self.handles = []
        for li, layer in enumerate(model.model.layers):
            comp = layer.self_attn.compressor
            if isinstance(comp, mdv4.DeepseekV4CSACompressor):
                rate, k = comp.indexer.compress_rate, comp.indexer.index_topk
                self.handles.append(comp.indexer.scorer.register_forward_hook(self._indexer_hook(li, rate, k)))
            gate = layer.mlp.gate
            if isinstance(gate, mdv4.DeepseekV4TopKRouter):
                self.handles.append(gate.register_forward_hook(self._router_hook(li, gate)))

    def _note(self, gap, where):
        if gap < self.min_gap:
            self.min_gap, self.where = gap, where

    def _indexer_hook(self, li, rate, k):
        def hook(module, args, out):
            scores = out[0]  # [S, T]
            for t in range(scores.shape[0]):
                n_vis = min((t + 1) // rate, scores.shape[1])
                if n_vis <= k:
                    continue
                s = torch.sort(scores[t, :n_vis].double(), descending=True).values
                scale = float(s.abs().max()) or 1.0
                self._note(float(s[k - 1] - s[k]) / scale, f"indexer layer {li} query {t}")
        return hook

    def _router_hook(self, li, gate):
        def hook(module, args, out):
            x = args[0].reshape(-1, gate.hidden_dim).double()
            scores = torch.nn.functional.softplus(x @ gate.weight.double().T).sqrt()
            sel = torch.sort(scores + gate.e_score_correction_bias.double(), dim=-1, descending=True).values
            gaps = (sel[:, gate.top_k - 1] - sel[:, gate.top_k]) / sel.abs().max(dim=-1).values
            g, i = gaps.min(0)
            self._note(float(g), f"router layer {li} token {int(i)}")
        return hook

    def close(self):
        for h in self.handles:
            h.remove()


def build(cfg_kwargs, seed):
    # Deep copy: the config standardises rope_parameters in place (adds rope_theta and
    # partial_rotary_factor), which would otherwise leak into legacy_config's rope_scaling.
    cfg = DeepseekV4Config(**copy.deepcopy(cfg_kwargs))
    torch.manual_seed(seed)
    model = DeepseekV4ForCausalLM(cfg).float().eval()
    model.set_experts_implementation("eager")
    gen = torch.Generator().manual_seed(seed)
    randomise(model, cfg, gen)
    tokens = torch.randint(0, cfg.vocab_size, (1, 1), generator=gen)  # placeholder, replaced by caller
    return cfg, model, gen, tokens


def run_full(model, ids):
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=False, output_hidden_states=True)
    return out.logits[0].float(), out.hidden_states


def run_chunked(model, ids, cuts):
    from transformers import DynamicCache
    cache = DynamicCache(config=model.config)
    pieces, start = [], 0
    with torch.no_grad():
        for end in list(cuts) + [ids.shape[1]]:
            out = model(input_ids=ids[:, start:end], past_key_values=cache, use_cache=True)
            pieces.append(out.logits[0].float())
            start = end
    return torch.cat(pieces, 0)


def make_one(name, cfg_kwargs, seq_len, save_mode, out_dir, device):
    best = None
    for seed in range(1, 200):
        cfg, model, gen, _ = build(cfg_kwargs, seed)
        ids = torch.randint(0, cfg.vocab_size, (1, seq_len), generator=gen)
        model.to(device)
        watch = TieWatch(model, cfg)
        logits, hidden = run_full(model, ids.to(device))
        watch.close()
        print(f"{name}: seed {seed} min tie gap {watch.min_gap:.3g} at {watch.where}", flush=True)
        if best is None or watch.min_gap > best[0]:
            best = (watch.min_gap, seed, model, ids, logits, hidden, watch.where, cfg)
        if watch.min_gap > TIE_GAP:
            break
    gap, seed, model, ids, logits, hidden, where, cfg = best
    if gap <= TIE_GAP:
        raise SystemExit(f"{name}: no seed without a near-tie (best {gap:.3g} at {where})")

    d = os.path.join(out_dir, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    model_cpu = model.to("cpu")
    if save_mode == "upstream":
        model_cpu.save_pretrained(d)
    else:
        model_cpu.save_pretrained(d, save_original_format=False)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(legacy_config(cfg_kwargs), f, indent=2)
    # The files on disk must reproduce the logits (checks the save format and the legacy config).
    reloaded = DeepseekV4ForCausalLM.from_pretrained(d, torch_dtype=torch.float32).eval()
    reloaded.set_experts_implementation("eager")
    reloaded.to(device)
    logits2, _ = run_full(reloaded, ids.to(device))
    reload_diff = float((logits2 - logits).abs().max())
    if reload_diff > 1e-5 * float(logits.abs().max()):
        raise SystemExit(f"{name}: reloaded model differs by {reload_diff}")
    cuts = [1, 7, seq_len // 3, seq_len // 3 + 5, (2 * seq_len) // 3]
    chunked = run_chunked(reloaded, ids.to(device), cuts)
    chunk_diff = float((chunked - logits).abs().max())

    with open(os.path.join(d, "tokens.txt"), "w") as f:
        f.write(" ".join(str(int(t)) for t in ids[0]) + "\n")
    logits.cpu().contiguous().numpy().astype("<f4").tofile(os.path.join(d, "logits.f32"))
    hs = [h[0, :HIDDEN_TOKENS].float().cpu() for h in (hidden or [])]
    torch.cat([h.reshape(-1) for h in hs]).numpy().astype("<f4").tofile(os.path.join(d, "hidden.f32"))
    from safetensors import safe_open
    with safe_open(os.path.join(d, "model.safetensors"), "pt") as st:
        keys = sorted(st.keys())
    meta = dict(
        name=name, seed=seed, n_tokens=seq_len, vocab=cfg.vocab_size, save_mode=save_mode,
        max_abs_logit=float(logits.abs().max()), min_tie_gap=gap, min_tie_gap_at=where,
        chunked_cuts=cuts, chunked_vs_full_max_abs=chunk_diff, reload_vs_full_max_abs=reload_diff,
        hidden_shapes=[list(h.shape) for h in hs], layer_types=cfg.layer_types,
        mlp_layer_types=cfg.mlp_layer_types, safetensors_keys=keys,
        torch=torch.__version__, transformers=__import__("transformers").__version__, device=str(device),
    )
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(f"{name}: seed {seed} max|logit| {meta['max_abs_logit']:.4g} chunked diff {chunk_diff:.3g} "
          f"reload diff {reload_diff:.3g} keys {len(keys)}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="")
    ap.add_argument("--device", default="cpu", help="cpu gives exact fp32 matmuls without TF32 questions")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    for name, kw, n, mode in FIXTURES:
        if args.only and name not in args.only.split(","):
            continue
        make_one(name, kw, n, mode, args.out, torch.device(args.device))


if __name__ == "__main__":
    sys.exit(main())
