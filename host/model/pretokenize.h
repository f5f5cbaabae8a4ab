// Pre-tokenization for byte-level BPE: the regex splits of GPT-2, Llama 3 and Qwen2, written by hand
// (std::regex has no \p{L}), and GPT-2's byte <-> unicode mapping.
//
// Each split_pattern reproduces one regex exactly as Oniguruma (leftmost-first alternation, greedy
// quantifiers with backtracking) matches it, alternatives tried in order:
//   gpt2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   llama3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//           \s*[\r\n]+|\s+(?!\S)|\s+
//   qwen2:  as llama3 with \p{N} (single digits) instead of \p{N}{1,3}
// with Split behavior "Isolated": every match is a piece (these patterns match at every position, so
// there is no text between matches). Character classes come from unicode.h (Unicode 14.0). Invalid
// UTF-8 bytes, which Hugging Face never sees (Rust strings are valid), are each one "other" char.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvcomp::host {

enum class split_pattern { gpt2, llama3, qwen2 };
const char * split_pattern_name(split_pattern p);
// Recognizes the regex text of a tokenizer.json Split pre-tokenizer; false for any other regex.
bool split_pattern_from_regex(const std::string & regex, split_pattern & out);

// Splits `text` and appends the pieces (as byte ranges [first, second) into text) to `out`.
void split_text(split_pattern p, std::string_view text, std::vector<std::pair<size_t, size_t>> & out);

// GPT-2 byte-level alphabet: printable Latin-1 bytes ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF)
// stand for themselves, the other 68 bytes map to U+0100.. in byte order (so ' ' -> 'Ġ' U+0120,
// '\n' -> 'Ċ' U+010A). byte_to_unicode()[b] is the UTF-8 encoding of b's character.
const std::array<std::string, 256> & byte_to_unicode();
// The byte a code point stands for, or -1 when the code point is not in the alphabet.
int unicode_to_byte(uint32_t cp);
// Maps each byte of `bytes` to its alphabet character (UTF-8 out).
std::string bytes_to_byte_level(std::string_view bytes);

}  // namespace kvcomp::host
