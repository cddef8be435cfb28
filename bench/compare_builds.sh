#!/usr/bin/env bash
# Two builds side by side in one GPU call (absolute times drift between machines, so a change is
# judged against its baseline on the same warm device): the matvec microbenchmark, the spec-round
# timings and dsv4 bench (embedded model; 8 synthetic Flash layers) of each, receipts in $OUT.
# Binaries built in another tree look for the embedded model there, hence DSV4_MODEL.
#   A=DIR A_COMMIT=HASH B=DIR B_COMMIT=HASH OUT=DIR bash bench/compare_builds.sh
set -u
: "${A:?}" "${B:?}" "${OUT:?}"
export DSV4_SOURCE_DIR="$PWD" DSV4_MODEL="$PWD/models/dsv4-tiny.gguf"
for side in A B; do
    bin=${!side}
    commit_var=${side}_COMMIT
    c=${!commit_var:-unknown}
    timeout 90 "$bin/bench_cuda_matvec" --out "$OUT/matvec-$c.json" --commit "$c" > "$OUT/matvec-$c.log" 2>&1
    echo "$side matvec rc=$?"
    timeout 60 "$bin/bench_cuda_spec_round" --model models/dsv4-tiny.gguf --prompt 512 --rounds 50 \
        --out "$OUT/spec-$c.json" --commit "$c" > /dev/null 2>&1
    echo "$side spec_round rc=$?"
    DSV4_COMMIT=$c timeout 100 "$bin/dsv4" bench --model models/dsv4-tiny.gguf --filler models/retrieval_filler.txt \
        --a backend=cuda --prompt 512 --gen 128 --repeats 3 --json "$OUT/tiny-$c.json" > /dev/null 2>&1
    echo "$side tiny rc=$?"
    DSV4_COMMIT=$c timeout 150 "$bin/dsv4" bench --synthetic flash --layers 8 --prompt 2048 --gen 32 --repeats 1 \
        --json "$OUT/flash8-$c.json" > /dev/null 2>&1
    echo "$side flash8 rc=$?"
done
