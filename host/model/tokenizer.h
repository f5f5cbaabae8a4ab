// Tokenizers: the abstract interface, the byte tokenizer of kvcomp's default model, a streaming
// decoder for byte-level tokens, and UTF-8 helpers. The Hugging Face byte-level BPE tokenizer is in
// bpe_tokenizer.h; tokenizer_factory.h picks one for a model directory.
//
// Text is UTF-8 in std::string. Token ids are int32. Decoding is lossless: decode() returns the raw
// bytes of the tokens, which may be invalid UTF-8 when the ids are (e.g. a lone continuation byte);
// utf8_sanitize() turns such bytes into U+FFFD the way Hugging Face's decode does.
// Thread safety: a loaded tokenizer is immutable; encode/decode may run concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvcomp::host {

struct encode_options {
    // Add the tokenizer's template tokens (bos for the byte tokenizer; the post_processor's
    // TemplateProcessing "single" template for tokenizer.json, e.g. <|begin_of_text|> for Llama 3).
    bool add_special = false;
    // Recognize special tokens written in the text ("<eos>", "<|im_end|>") as their ids. When false
    // they are encoded as plain text (Hugging Face's split_special_tokens=True).
    bool parse_special = true;
};

class tokenizer {
  public:
    virtual ~tokenizer() = default;

    virtual std::vector<int32_t> encode(std::string_view text, const encode_options & opt = {}) const = 0;
    // The bytes one token stands for; may be part of a multi-byte UTF-8 character. Throws
    // invalid_argument naming the id when it is outside [0, vocab_size()) or unassigned.
    virtual std::string token_bytes(int32_t id) const = 0;
    virtual bool is_special(int32_t id) const = 0;
    // One past the largest id the tokenizer knows. A model's vocab_size may be larger (padded for
    // alignment); such ids have no text and the engine must not sample them.
    virtual int32_t vocab_size() const = 0;
    virtual const char * kind() const = 0;  // "byte" or "bpe", for messages

    // Concatenated token bytes; special tokens are dropped when skip_special.
    std::string decode(const std::vector<int32_t> & ids, bool skip_special = false) const;

    int32_t bos_id() const { return bos_id_; }  // -1 when none
    int32_t pad_id() const { return pad_id_; }  // -1 when none
    // End-of-sequence ids (Llama 3 instruct has several); generation stops at any of them.
    const std::vector<int32_t> & eos_ids() const { return eos_ids_; }
    int32_t eos_id() const { return eos_ids_.empty() ? -1 : eos_ids_[0]; }
    bool is_eos(int32_t id) const;
    // For loaders that learn the ids from other files (tokenizer_config.json, config.json).
    void set_special_ids(int32_t bos, std::vector<int32_t> eos, int32_t pad);

  protected:
    int32_t bos_id_ = -1;
    int32_t pad_id_ = -1;
    std::vector<int32_t> eos_ids_;
};

// kvcomp's default model: ids 0..255 are the bytes themselves, then three specials (default
// 256 = <bos>, 257 = <eos>, 258 = <pad>; vocab_size 259). Selected by kvcomp_tokenizer.json
// {"type": "byte", "bos_token_id": 256, "eos_token_id": 257, "pad_token_id": 258}.
class byte_tokenizer : public tokenizer {
  public:
    // Special ids must be distinct and >= 256; vocab_size() is the largest + 1 and ids between 256
    // and it that are none of the three are unassigned.
    explicit byte_tokenizer(int32_t bos = 256, int32_t eos = 257, int32_t pad = 258);

    std::vector<int32_t> encode(std::string_view text, const encode_options & opt = {}) const override;
    std::string token_bytes(int32_t id) const override;
    bool is_special(int32_t id) const override;
    int32_t vocab_size() const override { return vocab_size_; }
    const char * kind() const override { return "byte"; }

  private:
    int32_t vocab_size_;
};

// Turns a stream of token ids into text pieces that never split a UTF-8 character: bytes of an
// incomplete trailing sequence are held until the tokens that complete it arrive. Bytes that cannot
// start or continue a valid sequence are passed through at once (callers printing to a terminal may
// utf8_sanitize them). Not thread-safe; one per generation stream.
class stream_decoder {
  public:
    explicit stream_decoder(const tokenizer & tok, bool skip_special = false)
        : tok_(tok), skip_special_(skip_special) {}
    // Text that became complete with this token (possibly empty).
    std::string push(int32_t id);
    // Whatever is still held (an incomplete sequence at the end of generation); resets the state.
    std::string finish();
    size_t pending_bytes() const { return pending_.size(); }

  private:
    const tokenizer & tok_;
    bool skip_special_;
    std::string pending_;
};

// Length of the trailing bytes of s that form an incomplete but so far valid UTF-8 sequence
// (0..3): a lead byte followed by fewer continuation bytes than it announces.
size_t utf8_incomplete_tail(std::string_view s);
// Copy of s with every invalid UTF-8 byte sequence replaced by U+FFFD (one per maximal invalid
// subpart, as Rust's from_utf8_lossy and Python's errors="replace" do).
std::string utf8_sanitize(std::string_view s);
bool utf8_is_valid(std::string_view s);

}  // namespace kvcomp::host
