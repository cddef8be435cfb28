#!/usr/bin/env bash
# One call on the GPU machine: the tensor GEMM's two precisions (DSV4_GEMM_PRECISION unset =
# float32-grade two limbs, f16 = one limb) side by side on the same card:
#   * bench_cuda_gemm (both precisions of every shape in one run);
#   * dsv4 bench --synthetic flash --layers $LAYERS --prompt $PROMPT, the arms alternated twice;
#   * dsv4 quality, CPU against CUDA in each precision, on each model of $MODELS (teacher-forced
#     KLD / top-1 over the tapes: how far each precision moves the logits from the float32 reference).
# Receipts to $OUT/. Binaries from $BIN (bench/pack_bins.sh); run from the repo root.
#   BIN=DIR OUT=DIR [LAYERS=8] [PROMPT=2048] [MODELS="models/dsv4-tiny.gguf"] bash bench/precision_ab.sh
set -uo pipefail
: "${BIN:?}" "${OUT:?}"
export DSV4_SOURCE_DIR="$PWD"
layers=${LAYERS:-8}
prompt=${PROMPT:-2048}
nvidia-smi -L > "$OUT/gpu.txt" 2>&1
"$BIN/bench_cuda_gemm" --quick --out "$OUT/gemm.json" --command "BIN=... bash bench/precision_ab.sh (bench_cuda_gemm --quick)" \
    > "$OUT/gemm.txt" 2>&1
echo "gemm rc=$?"; cat "$OUT/gemm.txt"
for round in 1 2; do
    for p in f32 f16; do
        DSV4_GEMM_PRECISION=$p "$BIN/dsv4" bench --synthetic flash --layers "$layers" --prompt "$prompt" --gen 32 \
            --repeats 1 --json "$OUT/flash-$p-$round.json" > "$OUT/flash-$p-$round.txt" 2>&1
        echo "flash $p round $round rc=$?"; grep -E '^A ' "$OUT/flash-$p-$round.txt"
    done
done
for m in ${MODELS:-models/dsv4-tiny.gguf}; do
    name=$(basename "$m" .gguf)
    for p in f32 f16; do
        DSV4_GEMM_PRECISION=$p "$BIN/dsv4" quality --model "$m" --a "backend=cpu" --b "backend=cuda" \
            --json "$OUT/quality-$name-$p.json" > "$OUT/quality-$name-$p.txt" 2>&1
        echo "quality $name $p rc=$?"; tail -8 "$OUT/quality-$name-$p.txt"
    done
done
