#!/usr/bin/env bash
# The CLI contract of DESIGN.md: exit 0 on success, 1 on a runtime failure, 2 on bad
# arguments, errors as one line on stderr naming the problem.
set -u
bin=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
expect() {  # expect STATUS PATTERN -- command...
    local want=$1 pattern=$2
    shift 3
    "$@" >"$tmp/out" 2>"$tmp/err"
    local got=$?
    if [ "$got" != "$want" ] || { [ -n "$pattern" ] && ! grep -q -- "$pattern" "$tmp/err"; }; then
        echo "FAIL: $* -> exit $got (want $want), stderr: $(head -c 300 "$tmp/err")"
        failures=$((failures + 1))
    elif [ "$(wc -l <"$tmp/err")" -gt 1 ] && [ "$want" != 0 ]; then
        echo "FAIL: $* -> error is not one line: $(cat "$tmp/err")"
        failures=$((failures + 1))
    fi
}
fx=$src/tests/fixtures/mini_flash
expect 2 "" -- "$bin"
expect 2 "unknown command 'frobnicate'" -- "$bin" frobnicate
expect 2 "--out" -- "$bin" logits --model x.gguf --tokens "1 2"
expect 2 "dtype" -- "$bin" convert --hf "$fx" --out "$tmp/m.gguf" --dtype q3
expect 1 "no-such-dir" -- "$bin" convert --hf "$tmp/no-such-dir" --out "$tmp/m.gguf"
expect 0 "wrote" -- "$bin" convert --hf "$fx" --out "$tmp/m.gguf"
expect 2 "'x7' is not a token id" -- "$bin" logits --model "$tmp/m.gguf" --tokens "1 x7" --out "$tmp/l.f32"
expect 2 "outside the vocabulary" -- "$bin" logits --model "$tmp/m.gguf" --tokens "1 99999" --out "$tmp/l.f32"
expect 1 "not a GGUF file" -- "$bin" logits --model "$fx/config.json" --tokens "1 2" --out "$tmp/l.f32"
expect 0 "" -- "$bin" logits --model "$tmp/m.gguf" --tokens "5 6 7" --out "$tmp/l.f32" --chunk 2
expect 2 "--gpus 2: the CPU backend runs on no GPU" -- "$bin" logits --model "$tmp/m.gguf" --tokens "5 6" --out "$tmp/g.f32" --gpus 2
expect 2 "--gpus" -- "$bin" logits --model "$tmp/m.gguf" --tokens "5 6" --out "$tmp/g.f32" --gpus 0
size=$(stat -c %s "$tmp/l.f32")
if [ "$size" != $((3 * 384 * 4)) ]; then echo "FAIL: logits file has $size bytes, want $((3 * 384 * 4))"; failures=$((failures + 1)); fi
# dsv4 run: text on stdout, one stats line on stderr; bad input is a usage error.
tokjson=$src/tests/fixtures/byte_tokenizer/tokenizer.json
expect 0 "with the tokenizer" -- "$bin" convert --hf "$fx" --tokenizer "$tokjson" --out "$tmp/t.gguf"
expect 0 "prompt 6 tokens, prefill .* tok/s .* generated 7 tokens, decode .* tok/s" -- \
    "$bin" run --model "$tmp/t.gguf" -p "hello" -n 7 --ignore-eos
expect 1 "has no tokenizer" -- "$bin" run --model "$tmp/m.gguf" -p "hello"
expect 2 "needs a prompt" -- "$bin" run --model "$tmp/t.gguf"
expect 2 "temperature" -- "$bin" run --model "$tmp/t.gguf" -p "x" --temp -1
expect 2 "DSV4_MODEL=/no/such.gguf" -- env DSV4_MODEL=/no/such.gguf "$bin" run -p "x"
expect 1 "more than the model's vocabulary" -- "$bin" convert --hf "$src/tests/fixtures/odd_order" --tokenizer "$tokjson" --out "$tmp/x.gguf"
# dsv4 eval retrieval (embedded model): a prompt too short for its keys is the caller's to fix.
expect 2 "--tokens 72: could not size a prompt of 1 key" -- "$bin" eval retrieval --keys 1 --tokens 72 --trials 40
expect 2 "--tokens: Value 10 not in range 64" -- "$bin" eval retrieval --tokens 10
if [ $failures -ne 0 ]; then echo "$failures CLI contract check(s) failed"; exit 1; fi
echo "CLI contract: all checks passed"
