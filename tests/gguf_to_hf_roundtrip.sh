#!/usr/bin/env bash
# scripts/gpu/gguf_to_hf.py (what continues training from a shipped model) inverts dsv4 convert:
#   1. mini_flash's HF checkpoint -> GGUF (f32) -> HF gives back every tensor of the fixture exactly;
#   2. the shipped model (Q8_0, with its MTP block) -> HF (+ mtp.safetensors) -> GGUF (q8_0) gives
#      back every tensor exactly, and the rebuilt tokenizer.json embeds the same tokenizer;
#   3. the shipped DSpark drafter -> dspark.safetensors + dspark_config.json -> GGUF, the same.
# Uses Debian's python3 with numpy (scripts/install_deps.sh).
set -eu
bin=$1
src=$2
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bin" convert --hf "$src/tests/fixtures/mini_flash" --out "$tmp/mf.gguf" --dtype f32 > /dev/null
$py "$src/scripts/gpu/gguf_to_hf.py" "$tmp/mf.gguf" "$tmp/mf_hf"
$py "$src/scripts/gpu/gguf_to_hf.py" "$src/models/dsv4-tiny.gguf" "$tmp/tiny_hf"
"$bin" convert --hf "$tmp/tiny_hf" --out "$tmp/tiny.gguf" --dtype q8_0 > /dev/null
$py "$src/scripts/gpu/gguf_to_hf.py" "$src/models/dsv4-tiny-dspark.gguf" "$tmp/dspark"
"$bin" convert --dspark "$tmp/dspark" --out "$tmp/dspark.gguf" --dtype q8_0 > /dev/null
$py - "$src" "$tmp" <<'PY'
import json, struct, sys
import numpy as np
src, tmp = sys.argv[1:]
sys.path.insert(0, src + "/scripts/gpu")
import gguf_to_hf as g

def safetensors(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    h.pop("__metadata__", None)
    dt = {"F32": np.float32, "I64": np.int64}
    return {k: np.frombuffer(b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]],
                             dtype=dt[v["dtype"]]).reshape(v["shape"]) for k, v in h.items()}

fails = 0
want, got = safetensors(src + "/tests/fixtures/mini_flash/model.safetensors"), safetensors(tmp + "/mf_hf/model.safetensors")
if set(want) != set(got):
    print("mini_flash names differ:", sorted(set(want) ^ set(got))[:8]); fails += 1
bad = [k for k in set(want) & set(got) if want[k].shape != got[k].shape or not np.array_equal(want[k], got[k])]
if bad:
    print("mini_flash tensors differ:", sorted(bad)[:8]); fails += 1
print(f"mini_flash: {len(got)} tensors back, {len(bad)} differ")

kv1, t1 = g.read_gguf(src + "/models/dsv4-tiny.gguf")
kv2, t2 = g.read_gguf(tmp + "/tiny.gguf")
if sorted(t1) != sorted(t2):
    print("dsv4-tiny names differ:", sorted(set(t1) ^ set(t2))[:8]); fails += 1
bad = [k for k in t1 if k in t2 and (t1[k].shape != t2[k].shape or not np.array_equal(t1[k], t2[k]))]
if bad:
    print("dsv4-tiny tensors differ:", sorted(bad)[:8]); fails += 1
for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "deepseek4.nextn_predict_layers", "dsv4.hf_config_json"):
    if kv1[key] != kv2[key]:
        print(key, "differs"); fails += 1
print(f"dsv4-tiny: {len(t1)} tensors back bit for bit ({len(bad)} differ), MTP block and tokenizer kept")

kv1, t1 = g.read_gguf(src + "/models/dsv4-tiny-dspark.gguf")
kv2, t2 = g.read_gguf(tmp + "/dspark.gguf")
bad = [k for k in t1 if k not in t2 or t1[k].shape != t2[k].shape or not np.array_equal(t1[k], t2[k])]
meta = [k for k in set(kv1) | set(kv2) if k != "general.name" and kv1.get(k) != kv2.get(k)]
if bad or meta or len(t1) != len(t2):
    print("dspark differs:", sorted(bad)[:8], meta); fails += 1
print(f"dsv4-tiny-dspark: {len(t1)} tensors back bit for bit ({len(bad)} differ), metadata kept")
sys.exit(1 if fails else 0)
PY
