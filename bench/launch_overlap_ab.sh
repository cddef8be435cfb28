#!/usr/bin/env bash
# One device call for the launch-overlap work (docs/CUDA.md, "Launch overlap"): the device tests
# of this build, then 8-layer synthetic Flash decode of main (H) against this build (P) with
# DSV4_CUDA_PDL / DSV4_CUDA_SIDE / DSV4_CUDA_PACK_ONCE off and on, the embedded model, 43 Flash layers where the card
# holds them, and the ncu decode profile. H and P: tarballs of bench/pack_bins.sh (P with dsv4,
# test_cuda_model, test_cuda_matvec) in .devbin/, the commit of P in .devbin/commit, of H in
# .devbin/commit_H (the receipts' commit field).
#   run: bash bench/launch_overlap_ab.sh   (carry .devbin)
set -u
H=/tmp/H; P=/tmp/P
mkdir -p $H $P; tar -xJf .devbin/H.tar.xz -C $H; tar -xJf .devbin/P.tar.xz -C $P
export LD_LIBRARY_PATH=$P/lib DSV4_SOURCE_DIR=$PWD
C=$(cat .devbin/commit)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > $OUT/gpu.txt 2>&1
cat $OUT/gpu.txt
t0=$(date +%s)
( export DSV4_CUDA_PDL=1 DSV4_CUDA_PACK_ONCE=1; for t in test_cuda_model test_cuda_matvec; do
    echo "=== $t"; timeout 150 $P/$t --gtest_color=no 2>&1 | grep -v "^\[ *\(RUN\|OK\) " ; echo "=== $t rc=${PIPESTATUS[0]}"; done ) > $OUT/tests.txt 2>&1
grep "rc=\|FAILED\|Failure" $OUT/tests.txt | head -20
echo "tests $(( $(date +%s) - t0 ))s"
bench() {  # bench NAME BIN PDL SIDE PACK_ONCE ARGS...
    local name=$1 bin=$2 pdl=$3 side=$4 pack=$5 commit=$C; shift 5
    [ "$bin" = "$H" ] && commit=$(cat .devbin/commit_H 2>/dev/null || echo unknown)
    DSV4_COMMIT=$commit DSV4_CUDA_PDL=$pdl DSV4_CUDA_SIDE=$side DSV4_CUDA_PACK_ONCE=$pack timeout 150 $bin/dsv4 bench "$@" --json $OUT/$name.json > $OUT/$name.log 2>&1
    echo "$name rc=$? $(grep -h 'warm:' $OUT/$name.log | tail -2 | tr '\n' ' ')"
}
F8="--synthetic flash --layers 8 --prompt 2048 --gen 64 --repeats 2"
for r in 1 2; do
  bench f8-H-$r $H 0 0 0 $F8
  bench f8-P000-$r $P 0 0 0 $F8
  bench f8-P100-$r $P 1 0 0 $F8
  bench f8-P010-$r $P 0 1 0 $F8
  bench f8-P001-$r $P 0 0 1 $F8
  bench f8-P111-$r $P 1 1 1 $F8
done
bench tiny-P000 $P 0 0 0 --model models/dsv4-tiny.gguf --filler models/retrieval_filler.txt --a backend=cuda --prompt 512 --gen 128 --repeats 3
bench tiny-P111 $P 1 1 1 --model models/dsv4-tiny.gguf --filler models/retrieval_filler.txt --a backend=cuda --prompt 512 --gen 128 --repeats 3
echo "benches $(( $(date +%s) - t0 ))s"
# The full 43-layer synthetic Flash where the card holds it (about 104 GB): PDL off and on.
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "${mem:-0}" -gt 120000 ] && [ $(( $(date +%s) - t0 )) -lt 200 ]; then
  for pdl in 0 1; do
    DSV4_COMMIT=$C DSV4_CUDA_PDL=$pdl DSV4_CUDA_SIDE=$pdl DSV4_CUDA_PACK_ONCE=$pdl timeout 100 $P/dsv4 bench --synthetic flash --prompt 2048 --gen 32 --repeats 1 \
      --json $OUT/flash43-pdl$pdl.json --trace /tmp/flash43-pdl$pdl.trace > $OUT/flash43-pdl$pdl.log 2>&1
    echo "flash43 pdl=$pdl rc=$? $(grep -h 'warm:' $OUT/flash43-pdl$pdl.log | tail -1)"
  done
fi
# The ncu decode profile of the PDL build (graphs off; serialised, so PDL does not show in it).
if [ $(( $(date +%s) - t0 )) -lt 290 ]; then mkdir -p /tmp/prof; DSV4_CUDA_PACK_ONCE=1 BIN=$P OUT=/tmp/prof LAYERS=8 PROMPT=2048 DETAIL="q2k_matvec_t1|hc_kernel|q8_matvec" DETAIL_COUNT=6 \
  timeout 170 bash bench/profile_decode.sh > /dev/null 2>&1
cp /tmp/prof/profile_step.txt $OUT/ 2>/dev/null; cp /tmp/prof/detail.txt $OUT/f8-detail.txt 2>/dev/null; cp /tmp/prof/torch_layers.txt $OUT/f8-torch.txt 2>/dev/null; head -45 $OUT/profile_step.txt
fi; echo "profile $(( $(date +%s) - t0 ))s"
echo "all $(( $(date +%s) - t0 ))s"
cd $OUT && tar -cJf runs.tar.xz f8-* tiny-* flash43-* 2>/dev/null; rm -f f8-* tiny-* flash43-*; ls
