#!/usr/bin/env bash
# The demonstration: convert a transformers reference checkpoint to GGUF, run the CPU engine
# over its tokens, and compare the logits with the ones transformers produced.
set -euo pipefail
build=${1:-build}
fx=tests/fixtures/mini_flash
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$build/dsv4" convert --hf "$fx" --out "$tmp/mini_flash.gguf"
start=$(date +%s.%N)
"$build/dsv4" logits --model "$tmp/mini_flash.gguf" --tokens-file "$fx/tokens.txt" --out "$tmp/logits.f32"
end=$(date +%s.%N)
n=$(wc -w <"$fx/tokens.txt")
python3 - "$fx/logits.f32" "$tmp/logits.f32" "$n" "$start" "$end" <<'PY'
import array, sys
ref, got = array.array('f'), array.array('f')
ref.frombytes(open(sys.argv[1], 'rb').read()); got.frombytes(open(sys.argv[2], 'rb').read())
n = int(sys.argv[3]); V = len(ref) // n
same = sum(max(range(V), key=ref[t*V:(t+1)*V].__getitem__) == max(range(V), key=got[t*V:(t+1)*V].__getitem__) for t in range(n))
diff = max(abs(a - b) for a, b in zip(ref, got)); scale = max(abs(a) for a in ref)
secs = float(sys.argv[5]) - float(sys.argv[4])
print(f"demo: {n} tokens through mini_flash (6 layers: sliding, CSA, HCA; hash and top-k MoE) in {secs:.2f} s")
print(f"demo: same next token as transformers at {same}/{n} positions, max |logit diff| {diff:.2e} ({diff/scale:.1e} of the logit scale)")
PY
