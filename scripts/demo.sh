#!/usr/bin/env bash
# The demonstration: text from the embedded model (models/dsv4-tiny.gguf, a 16 M-parameter
# DeepSeek-V4 trained for this project; models/README.md), then the engine's agreement with
# transformers on a reference fixture.
set -euo pipefail
build=${1:-build}
dsv4="$build/dsv4"
# Sampling with a mild repetition penalty reads best on a model this small; seeded, so the
# demo prints the same text every time.
sample=(-n 80 --temp 0.7 --top-p 0.9 --repeat-penalty 1.2 --seed 2)
echo "== dsv4 run: the embedded model continues a King James Bible opening"
"$dsv4" run -p "And it came to pass" "${sample[@]}"
echo
echo "== dsv4 run: ... and a State of the Union address"
"$dsv4" run -p "Fellow-Citizens of the Senate and House of Representatives:" "${sample[@]}"
echo
echo "== dsv4 run --chat: the chat template (the model has learnt the shape of an answer, not arithmetic)"
"$dsv4" run --chat -p "What is 12 + 30?" -n 40
echo

fx=tests/fixtures/mini_flash
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "== the CPU engine against transformers on the mini_flash fixture"
"$dsv4" convert --hf "$fx" --out "$tmp/mini_flash.gguf"
"$dsv4" logits --model "$tmp/mini_flash.gguf" --tokens-file "$fx/tokens.txt" --out "$tmp/logits.f32"
n=$(wc -w <"$fx/tokens.txt")
python3 - "$fx/logits.f32" "$tmp/logits.f32" "$n" <<'PY'
import array, sys
ref, got = array.array('f'), array.array('f')
ref.frombytes(open(sys.argv[1], 'rb').read()); got.frombytes(open(sys.argv[2], 'rb').read())
n = int(sys.argv[3]); V = len(ref) // n
same = sum(max(range(V), key=ref[t*V:(t+1)*V].__getitem__) == max(range(V), key=got[t*V:(t+1)*V].__getitem__) for t in range(n))
diff = max(abs(a - b) for a, b in zip(ref, got)); scale = max(abs(a) for a in ref)
print(f"demo: same next token as transformers at {same}/{n} positions, max |logit diff| {diff:.2e} ({diff/scale:.1e} of the logit scale)")
PY
