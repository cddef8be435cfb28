#!/usr/bin/env python3
"""A dsv4 GGUF back to a Hugging Face folder that transformers' DeepseekV4ForCausalLM loads:
config.json (the one the GGUF was converted from, dsv4.hf_config_json), model.safetensors
(float32, the GGUF's values dequantised) and tokenizer.json (tokenizer_from_gguf.py). A DSpark
drafter GGUF gives dspark.safetensors + dspark_config.json instead (dsv4 convert --dspark's input).

    python3 scripts/gpu/gguf_to_hf.py models/dsv4-tiny.gguf OUT_DIR
    python3 scripts/gpu/gguf_to_hf.py models/dsv4-tiny-dspark.gguf OUT_DIR

Why: training checkpoints do not outlive a device session, the shipped GGUF does; this lets
train_tiny.py --init-hf continue from the shipped weights (Q8_0: within half a quantisation step
of the trained bf16 ones). The names are the inverse of src/io/convert_hf.cpp's first choices
(the official checkpoint names, which transformers 5.17 also saves). The MTP block
(blk.{n_layers}+, nextn.*) goes to mtp.safetensors (mtp.I.*, as train_heads.py writes it), which
transformers does not load and dsv4 convert does: the folder converts back to the same GGUF.
Needs numpy.
"""
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokenizer_from_gguf as tg  # noqa: E402

F32, F16, Q8_0, BF16, I32 = 0, 1, 8, 30, 26  # ggml type ids

# GGUF per-block suffix -> HF suffix under model.layers.N. (convert_hf.cpp's convert_block).
BLOCK = {
    "attn_norm.weight": "attn_norm.weight",
    "ffn_norm.weight": "ffn_norm.weight",
    "hc_attn_fn.weight": "hc_attn_fn", "hc_attn_base.weight": "hc_attn_base", "hc_attn_scale.weight": "hc_attn_scale",
    "hc_ffn_fn.weight": "hc_ffn_fn", "hc_ffn_base.weight": "hc_ffn_base", "hc_ffn_scale.weight": "hc_ffn_scale",
    "attn_q_a.weight": "attn.wq_a.weight",
    "attn_q_a_norm.weight": "attn.q_norm.weight",
    "attn_q_b.weight": "attn.wq_b.weight",
    "attn_kv.weight": "attn.wkv.weight",
    "attn_kv_a_norm.weight": "attn.norm.weight",
    "attn_output_a.weight": "attn.wo_a.weight",
    "attn_output_b.weight": "attn.wo_b.weight",
    "attn_sinks.weight": "attn.attn_sink",
    "attn_compressor_kv.weight": "attn.compressor.wkv.weight",
    "attn_compressor_gate.weight": "attn.compressor.wgate.weight",
    "attn_compressor_ape.weight": "attn.compressor.ape",
    "attn_compressor_norm.weight": "attn.compressor.norm.weight",
    "indexer.attn_q_b.weight": "attn.indexer.wq_b.weight",
    "indexer.proj.weight": "attn.indexer.weights_proj.weight",
    "indexer_compressor_kv.weight": "attn.indexer.compressor.wkv.weight",
    "indexer_compressor_gate.weight": "attn.indexer.compressor.wgate.weight",
    "indexer_compressor_ape.weight": "attn.indexer.compressor.ape",
    "indexer_compressor_norm.weight": "attn.indexer.compressor.norm.weight",
    "ffn_gate_inp.weight": "ffn.gate.weight",
    "exp_probs_b.bias": "ffn.gate.bias",
    "ffn_gate_tid2eid.weight": "ffn.gate.tid2eid",
    "ffn_gate_shexp.weight": "ffn.shared_experts.w1.weight",
    "ffn_up_shexp.weight": "ffn.shared_experts.w3.weight",
    "ffn_down_shexp.weight": "ffn.shared_experts.w2.weight",
}
# The MTP block's own tensors (convert_nextn), under mtp.I. like the rest of that block, named as
# train_heads.py's export_mtp writes them (the head collapse as hc_head.hc_*).
NEXTN = {
    "nextn.e_proj.weight": "e_proj.weight", "nextn.h_proj.weight": "h_proj.weight",
    "nextn.enorm.weight": "enorm.weight", "nextn.hnorm.weight": "hnorm.weight",
    "nextn.shared_head_norm.weight": "norm.weight",
    "nextn.hc_head_fn.weight": "hc_head.hc_fn", "nextn.hc_head_base.weight": "hc_head.hc_base",
    "nextn.hc_head_scale.weight": "hc_head.hc_scale",
}
# A DSpark drafter GGUF (src/io/convert_dspark.cpp) keeps the safetensors names; its
# dspark_config.json fields come from these keys.
DSPARK_CONFIG = {
    "block_size": "dsv4.dspark.block_size", "n_layers": "dsv4.dspark.layer_count",
    "n_heads": "dsv4.dspark.head_count", "head_dim": "dsv4.dspark.head_dim",
    "ffn": "dsv4.dspark.feed_forward_length", "markov_rank": "dsv4.dspark.markov_rank",
    "noise_token_id": "dsv4.dspark.noise_token_id", "vocab_size": "dsv4.dspark.vocab_size",
    "rms_eps": "dsv4.dspark.layer_norm_rms_epsilon",
}
EXPERTS = {"ffn_gate_exps.weight": "w1", "ffn_up_exps.weight": "w3", "ffn_down_exps.weight": "w2"}
TOP = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output.weight": "head.weight",
    "output_norm.weight": "model.norm.weight",
    "output_hc_fn.weight": "model.hc_head.hc_fn",
    "output_hc_base.weight": "model.hc_head.hc_base",
    "output_hc_scale.weight": "model.hc_head.hc_scale",
}


def read_gguf(path):
    """(metadata, {name: numpy array in the HF/row-major shape}); float tensors as float32."""
    with open(path, "rb") as f:
        buf = f.read()
    kv, r, n_tensors = tg.parse_metadata(buf, path)
    infos = []
    for _ in range(n_tensors):
        name = r.string()
        nd = r.take("<I")
        ne = r.many("<Q", nd)
        typ, off = r.take("<I"), r.take("<Q")
        infos.append((name, ne, typ, off))
    align = kv.get("general.alignment", 32)
    base = (r.at + align - 1) // align * align
    tensors = {}
    for name, ne, typ, off in infos:
        shape = list(reversed(ne))  # row-major: the first GGUF dimension is the row length
        n = int(np.prod(ne))
        p = base + off
        if typ == Q8_0:
            blocks = np.frombuffer(buf, dtype=np.uint8, count=n // 32 * 34, offset=p).reshape(-1, 34)
            d = blocks[:, :2].copy().view(np.float16).astype(np.float32)
            q = blocks[:, 2:].copy().view(np.int8).astype(np.float32)
            a = (q * d).reshape(shape)
        elif typ in (F32, F16, I32):
            dt = {F32: np.float32, F16: np.float16, I32: np.int32}[typ]
            a = np.frombuffer(buf, dtype=dt, count=n, offset=p).reshape(shape)
            a = a.astype(np.int64 if typ == I32 else np.float32)
        elif typ == BF16:
            raw = np.frombuffer(buf, dtype=np.uint16, count=n, offset=p).astype(np.uint32) << 16
            a = raw.view(np.float32).reshape(shape)
        else:
            raise SystemExit(f"{path}: tensor {name} has ggml type {typ}; only F32, F16, BF16, Q8_0, I32 convert back")
        tensors[name] = a
    return kv, tensors


def to_hf(kv, tensors, path):
    """(trunk tensors, MTP tensors): HF names as transformers saves them (model.layers.N.*), the
    MTP block in the official naming (mtp.I.*) that train_heads.py writes."""
    n_layers = int(kv["deepseek4.block_count"]) - int(kv.get("deepseek4.nextn_predict_layers", 0))
    out, mtp = {}, {}
    for name, a in tensors.items():
        if name in TOP:
            out[TOP[name]] = a
            continue
        parts = name.split(".", 2)
        if parts[0] != "blk":
            raise SystemExit(f"{path}: unknown tensor {name}")
        layer, suffix = int(parts[1]), parts[2]
        dst, pre = (out, f"model.layers.{layer}.") if layer < n_layers else (mtp, f"mtp.{layer - n_layers}.")
        if suffix in EXPERTS:
            for e in range(a.shape[0]):
                dst[pre + f"ffn.experts.{e}.{EXPERTS[suffix]}.weight"] = a[e]
        elif suffix in BLOCK:
            dst[pre + BLOCK[suffix]] = a
        elif suffix in NEXTN and dst is mtp:
            dst[pre + NEXTN[suffix]] = a
        else:
            raise SystemExit(f"{path}: unknown tensor {name}")
    return out, mtp


def write_safetensors(tensors, path):
    header, chunks, at = {}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        dt = "I64" if a.dtype == np.int64 else "F32"
        a = a.astype(np.int64 if dt == "I64" else np.float32)
        b = a.tobytes()
        header[name] = dict(dtype=dt, shape=list(a.shape), data_offsets=[at, at + len(b)])
        chunks.append(b)
        at += len(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in chunks:
            f.write(b)


def write_dspark(kv, tensors, src, out):
    """dspark.safetensors + dspark_config.json, what dsv4 convert --dspark reads."""
    os.makedirs(out, exist_ok=True)
    write_safetensors(tensors, os.path.join(out, "dspark.safetensors"))
    with open(os.path.join(out, "dspark_config.json"), "w") as f:
        json.dump({k: kv[v] for k, v in DSPARK_CONFIG.items()}, f, indent=1)
    print(f"{out}: DSpark drafter, {len(tensors)} tensors")


def main():
    if len(sys.argv) != 3:
        raise SystemExit("usage: gguf_to_hf.py MODEL.gguf OUT_DIR")
    src, out = sys.argv[1:]
    try:
        kv, tensors = read_gguf(src)
    except (struct.error, ValueError, UnicodeDecodeError) as e:
        raise SystemExit(f"{src}: truncated or malformed GGUF ({e})")
    if kv.get("general.architecture") == "dsv4-dspark":
        return write_dspark(kv, tensors, src, out)
    if "dsv4.hf_config_json" not in kv:
        raise SystemExit(f"{src}: no dsv4.hf_config_json (not converted from a Hugging Face checkpoint by dsv4)")
    hf, mtp = to_hf(kv, tensors, src)

    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        f.write(kv["dsv4.hf_config_json"])  # verbatim
    write_safetensors(hf, os.path.join(out, "model.safetensors"))
    if mtp:  # beside the trunk, as train_heads.py's output is put there for dsv4 convert
        write_safetensors(mtp, os.path.join(out, "mtp.safetensors"))
    if "tokenizer.ggml.tokens" in kv:
        with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(tg.tokenizer_json(kv, src), f, ensure_ascii=False)
    print(f"{out}: {len(hf)} tensors, {sum(a.size for a in hf.values()) / 1e6:.2f} M values"
          + (f"; MTP block: {len(mtp)} tensors (mtp.safetensors)" if mtp else ""))


if __name__ == "__main__":
    main()
