#!/usr/bin/env bash
# Packs the GPU-side binaries of a CUDA build (dsv4, the device tests, the kernel benchmarks),
# stripped, with the shared libraries the GPU machine may lack, into one xz tarball small enough
# to travel with the working tree to the device (its carry limit is 64 MiB in all). On the
# device: mkdir -p /tmp/NAME && tar -xJf TARBALL -C /tmp/NAME && export LD_LIBRARY_PATH=/tmp/NAME/lib
# NAMES picks binaries (default: all of them; about 20 MB packed, so two builds' worth need two calls).
#   BUILD=build-cuda OUT=.devbin/NAME.tar.xz [NAMES="dsv4 bench_cuda_matvec"] bash bench/pack_bins.sh
set -euo pipefail
: "${BUILD:?BUILD: the CUDA build folder}" "${OUT:?OUT: the tarball to write}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/lib" "$(dirname "$OUT")"
names=${NAMES:-"dsv4 $(cd "$BUILD" && ls -d test_cuda_* bench_cuda_* 2>/dev/null | grep -v '\.cmake$' | tr '\n' ' ')"}
for n in $names; do
    b="$BUILD/$n"
    [ -x "$b" ] && [ -f "$b" ] || { echo "pack_bins: no binary $b" >&2; exit 1; }
    strip -o "$tmp/$n" "$b"
done
# The libraries dsv4 links from Debian that a CUDA image may not have (cpp-httplib and its own).
for l in libcpp-httplib.so.0.11 libssl.so.3 libcrypto.so.3 libz.so.1 libbrotlidec.so.1 libbrotlienc.so.1 \
         libbrotlicommon.so.1; do
    [ -e "/usr/lib/x86_64-linux-gnu/$l" ] && cp -L "/usr/lib/x86_64-linux-gnu/$l" "$tmp/lib/"
done
tar -cJf "$OUT" -C "$tmp" .
ls -l "$OUT"
