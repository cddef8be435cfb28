#!/usr/bin/env bash
# Device call: reference numbers of the shipped model from the training libraries (carry .tiny_hf).
set -eu
python3 scripts/gpu/make_model_refs.py .tiny_hf tests/data/heldout_sample.txt "$OUT/tiny_refs"
ls -la "$OUT/tiny_refs"
