#!/usr/bin/env bash
# One device call (under 10 minutes): tokenizer, then the trunk (embedded default model) and
# the separate draft model trained side by side on the one GPU, from scratch.
# Run from the repository root on the GPU machine with .corpus carried; results in $OUT:
#   trunk/ckpt.tar.xz.NN, draft/ckpt.tar.xz.NN (resumable checkpoints holding hf/ folders),
#   meta.tar.xz (receipts, logs, loss plots).
set -u
T0=$(date +%s)
export PYTHONUNBUFFERED=1
S=scripts/gpu/train_tiny.py
W=/tmp/dsv4_call
rm -rf "$W"; mkdir -p "$W"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 "$S" --corpus .corpus --out "$W/tok" --tokenizer-only --deadline $((T0 + 150)) > "$W/tok.out" 2>&1 \
  || { tail -20 "$W/tok.out"; exit 1; }
TOK="$W/tok/tokenizer.json"
python3 "$S" --corpus .corpus --tokenizer "$TOK" --size draft --seed 4321 --out "$W/draft" \
  --deadline $((T0 + 420)) > "$W/draft.out" 2>&1 &
DRAFT=$!
python3 "$S" --corpus .corpus --tokenizer "$TOK" --out "$W/trunk" --deadline $((T0 + 565)) \
  --synth-frac 0.4 --recall-share 0.6 --short-recall 0.7 > "$W/trunk.out" 2>&1
RC=$?
if [ $RC -ne 0 ] && [ $(( $(date +%s) - T0 )) -lt 200 ]; then
  echo "trunk failed early (rc $RC); retrying without the recall curriculum"; tail -30 "$W/trunk.out"
  mv "$W/trunk.out" "$W/trunk_failed.out"
  python3 "$S" --corpus .corpus --tokenizer "$TOK" --out "$W/trunk" --deadline $((T0 + 565)) \
    --synth-frac 0.4 --recall-share 0.6 > "$W/trunk.out" 2>&1
  RC=$?
fi
wait $DRAFT; DRC=$?
echo "trunk rc $RC, draft rc $DRC, $(( $(date +%s) - T0 )) s"
tail -12 "$W/trunk.out"; tail -6 "$W/draft.out"
mkdir -p "$OUT/trunk" "$OUT/draft"
cp "$W"/trunk/ckpt.tar.xz.* "$OUT/trunk/" 2>/dev/null
cp "$W"/draft/ckpt.tar.xz.* "$OUT/draft/" 2>/dev/null
(cd "$W" && tar cJf "$OUT/meta.tar.xz" *.out tok/tokenizer.json trunk/receipt.json trunk/loss.png trunk/train.log \
   draft/receipt.json draft/loss.png draft/train.log 2>/dev/null)
ls -la "$OUT" "$OUT"/*
