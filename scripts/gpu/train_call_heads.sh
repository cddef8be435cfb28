#!/usr/bin/env bash
# One device call (under 10 minutes): reference fixtures for the MTP/DSpark forwards, then the
# drafting heads of the embedded model trained on its frozen trunk.
# Run from the repository root on the GPU machine with .corpus and .tiny_ckpt (the trunk's
# checkpoint parts) carried. Results in $OUT: heads.tar.xz, head_fixture.tar.xz, heads.log.
set -u
T0=$(date +%s)
export PYTHONUNBUFFERED=1
rm -rf /tmp/dsv4_heads /tmp/dsv4_heads_smoke /tmp/dsv4_head_fixture
python3 scripts/gpu/make_head_fixtures.py tests/fixtures/mini_flash /tmp/dsv4_head_fixture 2>&1 | tail -5
(cd /tmp && tar cJf "$OUT/head_fixture.tar.xz" dsv4_head_fixture) || echo "head fixtures failed"
python3 scripts/gpu/train_heads.py --corpus .corpus --trunk .tiny_ckpt --out /tmp/dsv4_heads_smoke --smoke \
  --deadline $((T0 + 240)) > /tmp/heads_smoke.log 2>&1
RC=$?
tail -8 /tmp/heads_smoke.log
if [ $RC -ne 0 ]; then echo "smoke failed (rc $RC)"; cp /tmp/heads_smoke.log "$OUT/heads.log"; exit 1; fi
python3 scripts/gpu/train_heads.py --corpus .corpus --trunk .tiny_ckpt --out /tmp/dsv4_heads \
  --deadline $((T0 + 575)) > /tmp/heads.log 2>&1
echo "heads rc $? after $(( $(date +%s) - T0 )) s"
tail -15 /tmp/heads.log
cp /tmp/heads.log "$OUT/heads.log"
cp /tmp/dsv4_heads/heads.tar.xz "$OUT/" 2>/dev/null
ls -la "$OUT"
