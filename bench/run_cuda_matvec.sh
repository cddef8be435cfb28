#!/usr/bin/env bash
# One call on the GPU machine: the CUDA device tests, the matvec microbenchmark and its PyTorch
# baseline, with everything written under $OUT (test log and gtest JSON, the receipt, SASS
# instruction counts of the kernels, nvidia-smi's view of the card). Prints the summaries last.
#
#   BIN=DIR COMMIT=HASH OUT=DIR bash bench/run_cuda_matvec.sh
#
# BIN holds test_cuda_matvec and bench_cuda_matvec (default build-cuda). They can be built on a
# development machine (static C++ runtime; cuBLAS 13 is taken from the GPU machine) and carried.
set -uo pipefail
BIN=${BIN:-build-cuda}
OUT=${OUT:?set OUT to the folder for the results}
COMMIT=${COMMIT:-unknown}
mkdir -p "$OUT"

# cuBLAS: the toolkit's copy, else the one PyTorch's wheels bring.
cublas_dir=/usr/local/cuda/lib64
if [ ! -e "$cublas_dir/libcublas.so.13" ]; then
    lib=$(find / -name 'libcublas.so.13' -not -path '/proc/*' 2>/dev/null | head -n 1)
    [ -n "$lib" ] && cublas_dir=$(dirname "$lib")
fi
export LD_LIBRARY_PATH="$cublas_dir:${LD_LIBRARY_PATH:-}"

{
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw,memory.used \
        --format=csv
    echo "os: $(. /etc/os-release 2>/dev/null; echo "$PRETTY_NAME")"
    echo "cublas from: $cublas_dir"
    echo "project C++ deps on this image (for building here):"
    ls -d /usr/include/nlohmann /usr/include/gtest /usr/include/CLI 2>&1
} > "$OUT/machine.txt" 2>&1

timeout 45 "$BIN/test_cuda_matvec" --gtest_output="json:$OUT/test_cuda_matvec.json" > "$OUT/test.log" 2>&1
test_rc=$?

timeout 75 "$BIN/bench_cuda_matvec" --out "$OUT/receipt.json" --commit "$COMMIT" \
    --command "BIN=$BIN COMMIT=$COMMIT OUT=\$OUT bash bench/run_cuda_matvec.sh" > "$OUT/bench.log" 2>&1
bench_rc=$?

torch_rc=skipped
if [ "$bench_rc" = 0 ]; then
    PYTHONUNBUFFERED=1 timeout 45 python3 bench/torch_matvec.py "$OUT/receipt.json" > "$OUT/torch.log" 2>&1
    torch_rc=$?
fi

# What the compiler made of the kernels: tensor-core (HMMA), async copy (LDGSTS) and shared
# load instructions per kernel, and any local-memory traffic (LDL/STL would mean spills).
if command -v cuobjdump > /dev/null; then
    cuobjdump -sass "$BIN/bench_cuda_matvec" 2> /dev/null | awk '
        /Function :/ { if (name) print name, counts(); name = $3; delete c; next }
        { for (i = 1; i <= NF; i++) if ($i ~ /^(HMMA|LDGSTS|LDS|LDG|STG|LDL|STL|BAR|PRMT|HADD2|SHF|I2F|ATOMG|RED)/) { split($i, p, "."); c[p[1]]++ } }
        function counts(  s, k) { s = ""; for (k in c) s = s " " k "=" c[k]; return s }
        END { if (name) print name, counts() }' > "$OUT/sass_counts.txt"
fi

echo "== machine"; cat "$OUT/machine.txt"
echo "== test_cuda_matvec rc=$test_rc"; grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[==========\]|Failure|error' "$OUT/test.log" | tail -n 30
echo "== bench rc=$bench_rc torch rc=$torch_rc"; cat "$OUT/bench.log"; [ -f "$OUT/torch.log" ] && cat "$OUT/torch.log"
echo "== sass (tensor kernels)"; grep -i tc_matvec "$OUT/sass_counts.txt" 2> /dev/null
exit $(( test_rc != 0 || bench_rc != 0 ))
