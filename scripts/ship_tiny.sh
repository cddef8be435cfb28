#!/usr/bin/env bash
# Ships a newly trained trunk and its drafting heads as the embedded default model, from the files
# one training call brought back (train_call_trunk_draft.sh with HEADS=1; or that call and then
# train_call_heads.sh with REFS=1, their files put in one folder):
#   CALL/trunk/ckpt.tar.xz.NN  CALL/meta.tar.xz  CALL/heads.tar.xz  CALL/tiny_refs.tar.xz
# -> models/dsv4-tiny.gguf (trunk + MTP block, Q8_0), models/dsv4-tiny-dspark.gguf, the receipts and
# loss plots in models/, and tests/data/tiny_refs (the numbers tests/test_default_model.cpp checks).
# The draft model (dsv4-tiny-draft.gguf) is a separate model and stays. What to measure after it is
# printed at the end (models/README.md's tables).
#   DSV4=build/dsv4 bash scripts/ship_tiny.sh CALL
set -euo pipefail
call=${1:?usage: ship_tiny.sh CALL_FOLDER}
dsv4=${DSV4:-build/dsv4}
cd "$(dirname "$0")/.."
for f in meta.tar.xz heads.tar.xz tiny_refs.tar.xz; do
    [ -f "$call/$f" ] || { echo "ship_tiny: $call/$f is missing" >&2; exit 1; }
done
ls "$call"/trunk/ckpt.tar.xz.* > /dev/null 2>&1 || { echo "ship_tiny: no $call/trunk/ckpt.tar.xz.NN" >&2; exit 1; }
w=$(mktemp -d)
trap 'rm -rf "$w" models/dsv4-tiny.gguf.partial models/dsv4-tiny-dspark.gguf.partial' EXIT
cat "$call"/trunk/ckpt.tar.xz.* | xz -dc | tar x -C "$w"  # ckpt/hf/: config.json, model.safetensors, tokenizer.json
tar xJf "$call/meta.tar.xz" -C "$w"                       # trunk/receipt.json, trunk/loss.png, *.out
tar xJf "$call/heads.tar.xz" -C "$w"                      # heads/: mtp.safetensors, dspark.*, receipt.json, loss.png
tar xJf "$call/tiny_refs.tar.xz" -C "$w"                  # tiny_refs/: refs.json, heldout_ids.txt
# The tokenizer must be the shipped one: the token tapes and retrieval data are made with it.
cmp -s "$w/tiny_refs/heldout_ids.txt" tests/data/tiny_refs/heldout_ids.txt ||
    { echo "ship_tiny: the new trunk's tokenizer encodes the held-out sample differently" >&2; exit 1; }
cp "$w/heads/mtp.safetensors" "$w/ckpt/hf/"  # dsv4 convert makes mtp.* the MTP block
"$dsv4" convert --hf "$w/ckpt/hf" --out models/dsv4-tiny.gguf.partial --dtype q8_0
"$dsv4" convert --dspark "$w/heads" --out models/dsv4-tiny-dspark.gguf.partial --dtype q8_0
mv models/dsv4-tiny.gguf.partial models/dsv4-tiny.gguf
mv models/dsv4-tiny-dspark.gguf.partial models/dsv4-tiny-dspark.gguf
cp "$w/trunk/receipt.json" models/tiny_train_receipt.json
cp "$w/trunk/loss.png" models/loss.png
cp "$w/heads/receipt.json" models/heads_train_receipt.json
cp "$w/heads/loss.png" models/heads_loss.png
cp "$w/tiny_refs/refs.json" tests/data/tiny_refs/refs.json
ls -l models/dsv4-tiny.gguf models/dsv4-tiny-dspark.gguf
cat <<'TODO'
ship_tiny: shipped. Now measure and record (models/README.md):
  build/test_default_model; build/test_q2k_model; build/test_spec_heads   (bounds measured on the old model?)
  build/dsv4 eval retrieval                                                (and --tokens 2048 / 8192)
  build/dsv4 bench --a "spec=off" --b "spec=mtp"                           (acceptance; also dspark:, draft:)
  python3 -c 'import json; r=json.load(open("models/tiny_train_receipt.json")); print(r["heldout"], r["recall_teacher_forced"])'
TODO
