#!/usr/bin/env node
// Writes golden.json: the ids Hugging Face tokenizers (the reference) gives for a set of strings
// with tiny_bpe.json in three pre-tokenizer variants (llama3 = the file as is; qwen2 = single-digit
// regex, ignore_merges off; gpt2 = ByteLevel with its own regex, no template), and with
// add_special_tokens for llama3. test_tokenizer.cpp builds the same variants and compares.
// Usage: npm install tokenizers@0.23.2 (in a scratch dir); NODE_PATH=<dir>/node_modules node make_golden.js
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require('tokenizers');

const base = JSON.parse(fs.readFileSync(path.join(__dirname, 'tiny_bpe.json'), 'utf8'));
const QWEN2 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" +
              "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
function variant(name) {
  const t = JSON.parse(JSON.stringify(base));
  if (name === 'qwen2') {
    t.pre_tokenizer.pretokenizers[0].pattern.Regex = QWEN2;
    t.model.ignore_merges = false;
  } else if (name === 'gpt2') {
    t.pre_tokenizer = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true };
    t.post_processor = { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true };
  }
  return Tokenizer.fromString(JSON.stringify(t));
}

// Deterministic pseudo-random strings (LCG) from pools that exercise each regex alternative.
const pools = [
  'the', 'The', ' quick', 'dog', ' ', '  ', '   ', '\t', '\n', '\n\n', '\r\n', ' \n ', '0', '12', '345', '2024',
  '1234567', '.', ',', ';', '!?', '...', '(', ')', '%', "'", "'s", "'S", "'t", "'re", "'RE", "'ve", "'m", "'ll",
  "'LL", "'d", "'\u017f", 'don\'t', 'I\'m', 'café', 'Ça', 'naïve', 'Straße', 'Привет', 'мир', 'Γειά', '你好',
  '世界', 'こんにちは', '안녕', 'مرحبا', 'नमस्ते', '١٢٣', '²', '½', 'Ⅻ', '\u00a0', '\u2003', '\u3000', '\u0085',
  'e\u0301', '\u200d', '😀', '👍🏽', '👨‍👩‍👧', '🇫🇷', '✨', '—', '“', '<|begin_of_text|>', '<|eot_id|>',
  '<tool>', '[MASK]', ' [MASK] ', '<|', '<|eot', 'def ', 'return', '    ', '#', '=', '+', '\\', '"',
];
let seed = 12345;
const rnd = (n) => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n; };
const strings = ['', ' ', 'Hello world', 'Hello  world  ', '  leading', 'trailing  ', 'a\n\nb', 'x\r\n\r\ny',
                 '12345678', '3.14159', "I'm here; you're not. THEY'LL see.", 'naïve café', '😀😀 😀',
                 'tab\there', '<|begin_of_text|>Hi<|eot_id|>', 'a<tool>b', 'x [MASK] y', 'x[MASK]y'];
for (let i = 0; i < 150; i++) {
  let s = '';
  for (let k = 1 + rnd(10); k > 0; k--) s += pools[rnd(pools.length)];
  strings.push(s);
}

(async () => {
  const out = { generator: 'tokenizers ' + require('tokenizers/package.json').version, strings };
  for (const name of ['llama3', 'qwen2', 'gpt2']) {
    const tok = variant(name);
    out[name] = [];
    for (const s of strings) out[name].push((await tok.encode(s, null, { addSpecialTokens: false })).getIds());
  }
  const tok = variant('llama3');
  out.llama3_add_special = [];
  for (const s of strings.slice(0, 10)) out.llama3_add_special.push((await tok.encode(s)).getIds());
  fs.writeFileSync(path.join(__dirname, 'golden.json'), JSON.stringify(out) + '\n');
  console.log(`${strings.length} strings written to golden.json`);
})();
