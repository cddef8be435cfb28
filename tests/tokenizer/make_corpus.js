#!/usr/bin/env node
// Writes the systematic part of the equality corpus: corpus/numbers.txt, corpus/whitespace.txt
// and corpus/unicode_edge.txt (the hand-written files beside them are code, prose, emoji and
// chat markup). Deterministic; run it again only to change the corpus, then commit the output.
// No line contains U+0085 or U+FEFF: there JavaScript's \s differs from the \s of Hugging Face
// tokenizers (Oniguruma), which dsv4 follows (docs/TOKENIZER.md), so the JS reference is not
// the truth for them.
// Usage: node tests/tokenizer/make_corpus.js
'use strict';
const fs = require('fs');
const path = require('path');

const dir = path.join(__dirname, 'corpus');
const cp = (c) => String.fromCodePoint(c);
const range = (a, b) => { let s = ''; for (let c = a; c <= b; ++c) s += cp(c); return s; };
const excluded = (c) => c === 0x85 || c === 0xfeff || c === 0x0a || c === 0x00 || (c >= 0xd800 && c <= 0xdfff);

function write(name, lines) {
    for (const l of lines) if (l.includes('\n') || /[\u0085\ufeff\u0000]/u.test(l)) throw new Error(`${name}: bad line ${JSON.stringify(l)}`);
    fs.writeFileSync(path.join(dir, name), lines.join('\n') + '\n');
    console.log(`${name}: ${lines.length} lines`);
}

// ---- numbers ----
function numbers() {
    const L = [];
    const digits = (n) => { let s = ''; for (let i = 0; i < n; ++i) s += '1234567890'[i % 10]; return s; };
    for (let n = 1; n <= 40; ++n) {
        const d = digits(n);
        L.push(d, 'x' + d, d + 'x', ' ' + d, '-' + d, d + '%', '$' + d + '.99', d + ' ' + d, d + '.' + d, '(' + d + ')');
    }
    for (let i = 0; i <= 120; ++i) L.push(String(i));
    for (let e = 0n, p = 1n; e <= 100n; e += 5n, p = 1n << e) L.push(`2^${e} = ${p}`);
    L.push(
        '1,234,567', '1 234 567', '1_000_000', '1.234.567,89', '12.5', '0.000001', '.5', '5.', '6.022e23', '6.022E+23', '1e-9',
        '-0', '+7', '−7 (minus sign)', '0x1F 0XdeadBEEF', '0b1010_1010', '0o755', '3.14159265358979323846264338327950288',
        '2024-05-01', '01/05/2024', '05.01.2024', '2024-05-01T12:34:56.789+02:00', '12:34:56', '9:05pm', '1999–2024',
        '+1 (555) 123-4567', '+44 20 7946 0958', '192.168.0.1', '2001:0db8:85a3:0000:0000:8a2e:0370:7334', 'v1.2.3-rc.1+build.42',
        '4111 1111 1111 1111', 'ISBN 978-3-16-148410-0', '48.8566° N, 2.3522° E', '$1,234.56', '€ 99,90', '¥10000', '₹1,00,000',
        '100km', '100 km', '3x4', '3×4=12', '10^6', '2**10', '7/8', '50%', '99.9%', '1st 2nd 3rd 4th 11th 21st 101st',
        'Q3 2024', 'A4', 'B-52', 'F-16', 'R2-D2', 'C-3PO', '404 Not Found', 'HTTP/1.1 200 OK', 'port 8080', 'pid 31337',
        'SHA256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855', 'uuid 123e4567-e89b-12d3-a456-426614174000',
        '0000000000', '0001', '007', '1234567890123456789012345678901234567890123456789012345678901234567890',
        '9'.repeat(100), '1 2 3 4 5 6 7 8 9 10', '1,2,3,4,5', '1-2-3', '1.2.3.4.5.6.7.8.9', '12 345 678 901',
    );
    const scripts = [[0x660, 'Arabic-Indic'], [0x6f0, 'Extended Arabic-Indic'], [0x966, 'Devanagari'], [0x9e6, 'Bengali'],
        [0xa66, 'Gurmukhi'], [0xae6, 'Gujarati'], [0xbe6, 'Tamil'], [0xc66, 'Telugu'], [0xe50, 'Thai'], [0xed0, 'Lao'],
        [0xf20, 'Tibetan'], [0x1040, 'Myanmar'], [0x17e0, 'Khmer'], [0x1810, 'Mongolian'], [0xff10, 'Fullwidth'],
        [0x1d7ce, 'Math bold'], [0x1d7f6, 'Math monospace'], [0x104a0, 'Osmanya'], [0x1e950, 'Adlam']];
    for (const [base, name] of scripts) {
        const ds = range(base, base + 9);
        L.push(`${name}: ${ds}`, ds + ds, 'x' + ds.slice(0, 6) + 'y', ds[0] + '.' + ds.slice(1, 3));
    }
    L.push('Superscripts ⁰¹²³⁴⁵⁶⁷⁸⁹ and subscripts ₀₁₂₃₄₅₆₇₈₉', 'x²+y²=z²', 'E=mc²', 'H₂SO₄', '10⁻¹²',
        'Vulgar fractions ¼½¾⅐⅑⅒⅓⅔⅕⅖⅗⅘⅙⅚⅛⅜⅝⅞↉', 'Roman ⅠⅡⅢⅣⅤⅥⅦⅧⅨⅩⅪⅫⅬⅭⅮⅯ ⅰⅱⅲⅳⅴ ↀↁↂↃↅↆↇↈ',
        'Circled ①②③④⑤⑥⑦⑧⑨⑩⑪⑫⑬⑭⑮⑯⑰⑱⑲⑳ ⓪ ⓿ ❶❷❸ ➀➁➂ ㉑㉒㊱㊿', 'Parenthesized ⑴⑵⑶ ⒈⒉⒊ ㈠㈡㈢ ㊀㊁㊂',
        'CJK numerals 一二三四五六七八九十百千万亿 〇 零 壹贰叁', 'Aegean 𐄇𐄈𐄉 Counting rods 𝍠𝍡𝍢', 'Hangzhou 〡〢〣〤〥〦〧〨〩',
        '1²³', '٣٫١٤', '۱۴۰۳/۰۲/۱۲', '१२३४५', '๑๒๓ บาท', '２０２４年', '１２３ａｂｃ', '₁₂₃₄₅₆₇', '¹²³⁴⁵⁶⁷⁸⁹⁰');
    return L;
}

// ---- whitespace ----
function whitespace() {
    const L = [];
    const sp = (ch, n) => ch.repeat(n);
    const kinds = [[' ', 'space'], ['\t', 'tab'], [' \t', 'space-tab'], ['\t ', 'tab-space'], ['\u00a0', 'nbsp'], ['\u3000', 'ideographic']];
    for (const [ch] of kinds) {
        for (let n = 1; n <= 12; ++n) {
            const w = sp(ch, n);
            L.push('a' + w + 'b', w + 'a', 'a' + w, w, w + '!', 'a' + w + '1', 'a' + w + '中', '.' + w + '.', w + "'s", '(' + w + ')');
        }
    }
    const others = [0x0b, 0x0c, 0x1680, 0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200a,
        0x2028, 0x2029, 0x202f, 0x205f, 0x180e, 0x200b, 0x2060];
    for (const c of others) {
        const w = cp(c);
        L.push('a' + w + 'b', w + 'a', 'a' + w, w, w + w + w, ' ' + w + ' ', 'a ' + w + 'b', 'a' + w + ' b', w + '!', 'x' + w + '\t' + w + 'y');
    }
    // Lines that end in CR (CRLF files), lone CRs and CR runs.
    const crs = ['abc\r', '\r', '\r\r', ' \r', '\t\r', 'a\rb', 'a \rb', 'a\r b', 'a\r\rb', '  \r  ', '.\r', '!\r\r', 'x\u3000\r',
        '\r a', '\ra', 'word.\r', 'end of line   \r', '\r\r\r\r\r', '1\r2', '中\r文', '😀\r', '\u00a0\r', '\u2028\r', 'a\r\u2029b'];
    for (const s of crs) L.push(s, s + s, ' ' + s, s + 'z');
    // Indentation as in source code and prose.
    for (let n = 0; n <= 16; ++n) {
        L.push(sp(' ', n) + 'return x;', sp('\t', n >> 1) + 'if (y) {', sp(' ', n) + '- item', sp(' ', n) + '# comment   ', sp(' ', n) + '}');
    }
    L.push('a b  c   d    e     f      g', 'trailing spaces      ', '      leading spaces', ' ', '  ', '\t', '\t\t\t',
        ' \t \t \t ', 'mixed \t \u00a0 \u3000 \u2003 run', 'x  ', '  x', 'x \t', ' !', '  !', '   !!!', ' ?!', '  ...', '!  ',
        'a  .b', 'a .  b', 'a. b', 'a .b', '1  2', ' 1', '  12', '   123', '1 ', '12  ', ' 中文', '  中文  ', ' 😀', '  😀');
    return L;
}

// ---- unicode edge cases ----
function unicodeEdge() {
    const L = [];
    // Every combining diacritic after letters, digits, punctuation, spaces and at the start.
    for (let c = 0x300; c <= 0x36f; c += 4) {
        const m = range(c, c + 3);
        L.push('a' + m + 'b', m, ' ' + m[0] + 'x', '1' + m[0] + '2', '.' + m[0] + '.', 'e' + m + m, '\t' + m[0], 'ŉ' + m[1] + 'ő');
    }
    L.push('Z̴̡̢̛̗̘̙̜̝̞̟̠̀́̂̃̄̅̆̇̉̊̋̌̍̎̏̐̑̒̓̔̽̾̿͐͑͒͗͛ͅà̵̡̢̧̨̛̖̗̘̙̜̝̞̟̠̣̤̥̦̩̪̫̬̭̮̯̰̱̲̳̹̺̻̼͇͈͉͍͎́̂̃̄̅̆̇̈̉̊̋̌̍̎̏̐̑̒̓̔̽̾̿̀́͂̓̈́͆͊͋͌͐͑͒͗͛ͣͤͥͦͧͨͩͪͫͬͭͮͯ͘͜͟͢͝͞͠͡lgo',
        'é (NFC) vs é (NFD)', 'Å Å Å (three encodings)', 'ﬁ vs fi', 'ᄒ ᅡ ᆫ (jamo) 한 (syllable) 한 (decomposed)',
        'क्षत्रिय', 'ज़', 'ไม้', 'ឡើង', 'ॐ', 'ﷺ ﷽', 'a\u20dd b\u20e3 c\u20e0', '\u3099\u309a か\u3099', 'ｶﾞ ｶ\uff9e',
        'मनुष्य', 'ثُمَّ', 'ﻻ ﻼ', 'יִשְׂרָאֵל', 'ᾅ ᾇ ῷ', 'Ǖ ǖ ǘ ǚ ǜ', 'ḝ ḯ ṏ ṓ ṑ ẫ ậ ẵ ặ ễ ệ ổ ộ ở ợ ữ ự');
    // Controls (no LF, NUL or NEL), format characters, private use, noncharacters, specials.
    for (let c = 0x01; c <= 0x1f; ++c) if (!excluded(c)) L.push('a' + cp(c) + 'b', cp(c) + ' x', 'y ' + cp(c));
    for (let c = 0x7f; c <= 0x9f; ++c) if (!excluded(c)) L.push('a' + cp(c) + 'b', ' ' + cp(c) + 'é');
    const fmt = [0xad, 0x600, 0x61c, 0x6dd, 0x70f, 0x180e, 0x200b, 0x200c, 0x200d, 0x200e, 0x200f, 0x202a, 0x202b, 0x202c,
        0x202d, 0x202e, 0x2060, 0x2061, 0x2062, 0x2063, 0x2064, 0x2066, 0x2067, 0x2068, 0x2069, 0x206a, 0x206f, 0xfff9,
        0xfffa, 0xfffb, 0x110bd, 0x1d173, 0xe0001, 0xe0020, 0xe007f];
    for (const c of fmt) L.push('a' + cp(c) + 'b', ' ' + cp(c) + 'x', cp(c) + cp(c), '1' + cp(c) + '2', '.' + cp(c) + ' ');
    for (const c of [0xe000, 0xe001, 0xf8ff, 0xf0000, 0xffffd, 0x100000, 0x10fffd, 0xfdd0, 0xfdef, 0xfffe, 0xffff, 0x1fffe,
        0x10ffff, 0xfffc, 0xfffd, 0x378, 0x2fffe, 0x3ffff, 0xe0080, 0x30000, 0x31350, 0x323b0])
        L.push('a' + cp(c) + 'b', ' ' + cp(c), cp(c) + cp(c) + cp(c), 'x ' + cp(c) + ' y');
    // Text that looks broken or escaped but is valid UTF-8.
    L.push('\\xff\\xfe\\x00', '%C3%28 %E2%82 %F0%9F%98', '\\uD800\\uDC00 \\u{1F600}', '&#xD800; &#55357; &amp;&lt;&gt;&quot;',
        'Ã©tÃ© â€™ â€œquotedâ€\u009d Ã¼ber', 'ï»¿ BOM as mojibake', '���� replacement runs', '\uFFFD\uFFFDabc\uFFFD',
        'æ–‡å­—åŒ–ã\u0081‘', 'Ð\u009fÑ\u0080Ð¸Ð²ÐµÑ\u0082', '\\0 \\n \\r \\t \\\\ \\"', '0x00 0xFF 0xC0 0xC1 0xF5',
        'C0 80 (overlong NUL) ED A0 80 (surrogate) F4 90 80 80 (too large)', '\u00c3\u0083\u00c2\u00a9 double-encoded é',
        '�', '�a', 'a�', '  �  ');
    // A sweep over the assigned planes: six consecutive code points every 211, so the category table
    // is compared with the reference's all along.
    for (let c = 0xa0; c < 0x32000; c += 211) {
        if (c >= 0xd800 && c <= 0xdfff) continue;
        let s = '';
        for (let k = 0; k < 6; ++k) if (!excluded(c + k)) s += cp(c + k);
        L.push((c % 3 === 0 ? ' ' : c % 3 === 1 ? 'a' : '') + s);
    }
    for (let c = 0xe0000; c < 0xe0200; c += 37) L.push('x' + range(c, c + 3) + 'y');
    return L;
}

write('numbers.txt', numbers());
write('whitespace.txt', whitespace());
write('unicode_edge.txt', unicodeEdge());
