#!/usr/bin/env bash
# One device call (under 10 minutes): reference fixtures for the MTP/DSpark forwards, then the
# drafting heads of the embedded model trained on its frozen trunk.
# Run from the repository root on the GPU machine with .corpus and .tiny_ckpt (the trunk's
# checkpoint parts) carried. Results in $OUT: heads.tar.xz, head_fixture.tar.xz, heads.log.
# TRUNK_CKPT=DIR: the trunk's checkpoint parts elsewhere than .tiny_ckpt; SMOKE=0 skips the smoke run;
# T0=EPOCH: the call's start when another script began it (the heads stop 575 s after it).
# HEADS_ARGS: more train_heads.py flags (e.g. --init-heads DIR --lr 1e-3).
# FIXTURES=0 skips the head fixtures (they hold random heads on tests/fixtures/mini_flash, so a new
# trunk does not change them); REFS=1 first writes the trunk's regression-test numbers
# (make_model_refs.py on the checkpoint's hf/ folder) to $OUT/tiny_refs.tar.xz.
set -u
T0=${T0:-$(date +%s)}
CK=${TRUNK_CKPT:-.tiny_ckpt}
export PYTHONUNBUFFERED=1
rm -rf /tmp/dsv4_heads /tmp/dsv4_heads_smoke /tmp/dsv4_head_fixture /tmp/dsv4_trunk_hf
if [ "${FIXTURES:-1}" != 0 ]; then
  python3 scripts/gpu/make_head_fixtures.py tests/fixtures/mini_flash /tmp/dsv4_head_fixture 2>&1 | tail -5
  (cd /tmp && tar cJf "$OUT/head_fixture.tar.xz" dsv4_head_fixture) || echo "head fixtures failed"
fi
if [ "${REFS:-0}" != 0 ]; then
  mkdir -p /tmp/dsv4_trunk_hf && cat "$CK"/ckpt.tar.xz.* | xz -dc | tar x -C /tmp/dsv4_trunk_hf
  HF=$(dirname "$(find /tmp/dsv4_trunk_hf -name config.json | head -1)")
  python3 scripts/gpu/make_model_refs.py "$HF" tests/data/heldout_sample.txt /tmp/dsv4_trunk_hf/tiny_refs 2>&1 | tail -3
  (cd /tmp/dsv4_trunk_hf && tar cJf "$OUT/tiny_refs.tar.xz" tiny_refs) || echo "refs failed"
fi
if [ "${SMOKE:-1}" != 0 ]; then
  python3 scripts/gpu/train_heads.py --corpus .corpus --trunk "$CK" --out /tmp/dsv4_heads_smoke --smoke \
    --deadline $(( $(date +%s) + 240)) > /tmp/heads_smoke.log 2>&1
  RC=$?
  tail -8 /tmp/heads_smoke.log
  if [ $RC -ne 0 ]; then echo "smoke failed (rc $RC)"; cp /tmp/heads_smoke.log "$OUT/heads.log"; exit 1; fi
fi
python3 scripts/gpu/train_heads.py --corpus .corpus --trunk "$CK" --out /tmp/dsv4_heads \
  --deadline $((T0 + 575)) ${HEADS_ARGS:-} > /tmp/heads.log 2>&1
echo "heads rc $? after $(( $(date +%s) - T0 )) s"
tail -15 /tmp/heads.log
cp /tmp/heads.log "$OUT/heads.log"
cp /tmp/dsv4_heads/heads.tar.xz "$OUT/" 2>/dev/null
ls -la "$OUT"
