#!/usr/bin/env bash
# One device call (under 10 minutes): tokenizer, then the trunk (embedded default model) and
# the separate draft model trained side by side on the one GPU, from scratch.
# Run from the repository root on the GPU machine with .corpus carried; results in $OUT:
#   trunk/ckpt.tar.xz.NN, draft/ckpt.tar.xz.NN (resumable checkpoints holding hf/ folders),
#   meta.tar.xz (receipts, logs, loss plots).
# TOKENIZER_FROM=models/dsv4-tiny.gguf: keep that model's tokenizer (rebuilt by tokenizer_from_gguf.py
#   and checked against tests/data/tiny_refs/heldout_ids.txt) instead of training one.
# INIT_FROM=models/dsv4-tiny.gguf: that, and start the trunk from its weights (gguf_to_hf.py);
#   with HEADS=1 the heads start from its MTP block and from ${INIT_FROM%.gguf}-dspark.gguf.
# DRAFT=0: the trunk alone (the whole GPU). TRUNK_ARGS: the trunk's flags (curriculum, lr).
# TRUNK_END=N: the trunk's deadline, N s after the start (default 565).
# HEADS=1: then, in the same call, the drafting heads on the new trunk and its regression-test
#   numbers (train_call_heads.sh, REFS=1 FIXTURES=0, until 575 s): for a trunk of a few minutes.
set -u
T0=$(date +%s)
export PYTHONUNBUFFERED=1
S=scripts/gpu/train_tiny.py
W=/tmp/dsv4_call
rm -rf "$W"; mkdir -p "$W"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
INIT=
if [ -n "${INIT_FROM:-}" ]; then
  python3 scripts/gpu/gguf_to_hf.py "$INIT_FROM" "$W/init_hf" || exit 1
  TOKENIZER_FROM=$INIT_FROM INIT="--init-hf $W/init_hf"
  DSPARK_FROM=${INIT_FROM%.gguf}-dspark.gguf
  [ -f "$DSPARK_FROM" ] && python3 scripts/gpu/gguf_to_hf.py "$DSPARK_FROM" "$W/init_hf" &&
    export HEADS_ARGS="--init-heads $W/init_hf ${HEADS_ARGS:-}"
fi
if [ -n "${TOKENIZER_FROM:-}" ]; then
  python3 scripts/gpu/tokenizer_from_gguf.py "$TOKENIZER_FROM" "$W/tok/tokenizer.json" || exit 1
  python3 - "$W/tok/tokenizer.json" <<'PY' || exit 1
import sys
from tokenizers import Tokenizer
tk = Tokenizer.from_file(sys.argv[1])
docs = open("tests/data/heldout_sample.txt", encoding="utf-8").read().rstrip("\n").split("\n\x1e\n")
want = [list(map(int, l.split())) for l in open("tests/data/tiny_refs/heldout_ids.txt")]
got = [tk.encode(d, add_special_tokens=False).ids for d in docs]
bad = [i for i, (g, w) in enumerate(zip(got, want)) if g != w]
print(f"rebuilt tokenizer: {len(docs)} documents, {sum(map(len, want))} tokens, {len(bad)} differ")
sys.exit(1 if bad or len(got) != len(want) else 0)
PY
else
  python3 "$S" --corpus .corpus --out "$W/tok" --tokenizer-only --deadline $((T0 + 150)) > "$W/tok.out" 2>&1 \
    || { tail -20 "$W/tok.out"; exit 1; }
fi
TOK="$W/tok/tokenizer.json"
DRAFT_PID=
if [ "${DRAFT:-1}" != 0 ]; then
  python3 "$S" --corpus .corpus --tokenizer "$TOK" --size draft --seed 4321 --out "$W/draft" \
    --deadline $((T0 + 420)) > "$W/draft.out" 2>&1 &
  DRAFT_PID=$!
fi
TRUNK_ARGS=${TRUNK_ARGS:-"--synth-frac 0.4 --recall-share 0.6 --short-recall 0.7"}
python3 "$S" --corpus .corpus --tokenizer "$TOK" --out "$W/trunk" --deadline $((T0 + ${TRUNK_END:-565})) \
  $INIT $TRUNK_ARGS > "$W/trunk.out" 2>&1
RC=$?
if [ $RC -ne 0 ] && [ -z "$INIT" ] && [ $(( $(date +%s) - T0 )) -lt 200 ]; then
  echo "trunk failed early (rc $RC); retrying with the default curriculum"; tail -30 "$W/trunk.out"
  mv "$W/trunk.out" "$W/trunk_failed.out"
  python3 "$S" --corpus .corpus --tokenizer "$TOK" --out "$W/trunk" --deadline $((T0 + 565)) \
    --synth-frac 0.4 --recall-share 0.6 > "$W/trunk.out" 2>&1
  RC=$?
fi
DRC=none
if [ -n "$DRAFT_PID" ]; then wait $DRAFT_PID; DRC=$?; fi
echo "trunk rc $RC, draft rc $DRC, $(( $(date +%s) - T0 )) s"
tail -14 "$W/trunk.out"; [ -n "$DRAFT_PID" ] && tail -6 "$W/draft.out"
mkdir -p "$OUT/trunk" "$OUT/draft"
cp "$W"/trunk/ckpt.tar.xz.* "$OUT/trunk/" 2>/dev/null
cp "$W"/draft/ckpt.tar.xz.* "$OUT/draft/" 2>/dev/null
(cd "$W" && tar cJf "$OUT/meta.tar.xz" *.out tok/tokenizer.json trunk/receipt.json trunk/loss.png trunk/train.log \
   draft/receipt.json draft/loss.png draft/train.log 2>/dev/null)
if [ "${HEADS:-0}" != 0 ] && [ $RC -eq 0 ]; then
  TRUNK_CKPT="$W/trunk" REFS=1 FIXTURES=0 SMOKE=0 T0=$T0 bash scripts/gpu/train_call_heads.sh
fi
ls -la "$OUT" "$OUT"/*
