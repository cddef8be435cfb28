#!/usr/bin/env bash
# Runs every CUDA device test binary in $BIN (built anywhere with nvcc: test_cuda_*) on the GPU
# machine, from the repository root, and writes one report: $OUT/cuda_tests.txt (gtest output of
# each, then a summary line per binary). Exit status: 0 when every binary passed.
#   BIN=.devbin OUT=/some/dir bash bench/run_cuda_tests.sh
set -uo pipefail
: "${BIN:?BIN: the folder of the test binaries}" "${OUT:?OUT: where the report goes}"
export DSV4_SOURCE_DIR="$PWD"
report="$OUT/cuda_tests.txt"
{ nvidia-smi -L; date -u; } > "$report" 2>&1
status=0
summary=""
for t in "$BIN"/test_cuda_*; do
    name=$(basename "$t")
    echo "=== $name" >> "$report"
    start=$(date +%s)
    timeout "${TEST_TIMEOUT:-400}" "$t" --gtest_color=no >> "$report" 2>&1
    rc=$?
    summary+="$name rc=$rc $(( $(date +%s) - start ))s"$'\n'
    [ $rc -eq 0 ] || status=1
done
printf '=== summary\n%s' "$summary" >> "$report"
printf '%s' "$summary"
exit $status
