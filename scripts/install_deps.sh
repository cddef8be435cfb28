#!/usr/bin/env bash
# Installs the Debian packages dsv4 needs to build and test, only those that are missing.
set -euo pipefail
# python3-numpy: tests/gguf_to_hf_roundtrip.sh runs scripts/gpu/gguf_to_hf.py with Debian's python3.
packages=(g++ make cmake pkg-config python3 python3-numpy nlohmann-json3-dev libcli11-dev libgtest-dev libpcre2-dev libcpp-httplib-dev)
# The tokenizer test compares with the reference JavaScript tokenizer from npm.
command -v node >/dev/null 2>&1 || packages+=(nodejs)
command -v npm >/dev/null 2>&1 || packages+=(npm)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "install_deps: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
