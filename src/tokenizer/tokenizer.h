// Byte-level BPE tokenizer loaded from a Hugging Face tokenizer.json (+ tokenizer_config.json), exact to
// the reference implementation for the Qwen2/Qwen3/Qwen3.5 family:
//   added tokens (leftmost-longest, in the raw text) -> NFC -> Split(regex, Isolated) -> ByteLevel -> BPE.
// The split regex is taken from the file and compiled with PCRE2 (UTF, Unicode properties, JIT); `\s`
// is widened to Oniguruma's definition (it adds U+0085), the engine the reference patterns are written for.
//
// Input text that is not valid UTF-8 is first made valid by replacing each ill-formed subsequence with
// U+FFFD (the WHATWG / Unicode "maximal subpart" rule) — what the reference sees when such bytes reach
// it through TextDecoder or Python's errors="replace". Encoding never fails.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace gdn {

struct AddedToken {
    int32_t id;
    std::string content;
    bool special = false;
    bool lstrip = false, rstrip = false, normalized = false;
};

// A byte-level BPE vocabulary as a GGUF file holds it (tokenizer.ggml.*): tokens by id with their types
// (llama.cpp's: 1 normal, 3 control = a special added token, 4 user-defined = a non-special added token,
// 5 unused = padding rows), the merges ("a b" by rank), the pre-tokenizer's name ("qwen2", "qwen35"), the
// eos id (-1: none) and the chat template.
struct BpeArrays {
    std::vector<std::string_view> tokens;
    std::vector<int64_t> types;
    std::vector<std::string_view> merges;
    std::string pre;
    int64_t eos_id = -1;
    std::string chat_template;
};

class Tokenizer {
  public:
    // Loads DIR/tokenizer.json and, when present, DIR/tokenizer_config.json and DIR/chat_template.jinja.
    // A non-empty chat_template replaces the checkpoint's (serve --chat-template).
    static Result<std::shared_ptr<const Tokenizer>> load(const std::string& dir,
                                                         const std::string& chat_template = "");
    // From file contents; config_json may be empty. `origin` names the source in error messages.
    static Result<std::shared_ptr<const Tokenizer>> from_json(const std::string& tokenizer_json,
                                                              const std::string& config_json,
                                                              const std::string& origin);
    // From a GGUF file's vocabulary (tokenizer/bpe_arrays.cpp): the same tokenizer as the tokenizer.json
    // it was converted from. Padding rows (unused) are left out; an unknown pre-tokenizer or token type is
    // an error that names it.
    static Result<std::shared_ptr<const Tokenizer>> from_bpe_arrays(const BpeArrays& a,
                                                                    const std::string& origin);
    ~Tokenizer();

    std::vector<int32_t> encode(std::string_view text) const;
    // Ids to text. An id outside [0, vocab_size) is an error. With skip_special, special tokens are dropped.
    Result<std::string> decode(const std::vector<int32_t>& ids, bool skip_special = false) const;

    int32_t vocab_size() const { return static_cast<int32_t>(id_to_token_.size()); }
    std::optional<int32_t> token_id(std::string_view token) const;
    // The token's text as stored (byte-level symbols for BPE tokens).
    const std::string& token_text(int32_t id) const { return id_to_token_[id]; }
    bool is_special(int32_t id) const;
    // The raw bytes a token stands for (byte-level BPE symbols mapped back; an added token's text).
    std::string token_bytes(int32_t id) const {
        std::string b;
        append_token_bytes(id, &b);
        return b;
    }
    bool is_added(int32_t id) const;

    // From tokenizer_config.json: eos token id (-1 if none), the chat template (empty if none).
    int32_t eos_token_id() const { return eos_id_; }
    const std::string& chat_template() const { return chat_template_; }
    const std::string& bos_token() const { return bos_token_; }
    const std::string& eos_token() const { return eos_token_; }

    struct Impl;

  private:
    static Result<std::shared_ptr<const Tokenizer>> parse(const std::string& tokenizer_json,
                                                          const std::string& config_json,
                                                          const std::string& origin);
    Tokenizer();
    friend class StreamDecoder;
    // Bytes of a BPE token (inverse byte mapping); for added tokens returns nullopt.
    void append_token_bytes(int32_t id, std::string* bytes) const;

    std::unique_ptr<Impl> impl_;
    std::vector<std::string> id_to_token_;
    std::vector<uint8_t> kind_;  // per id: 0 BPE, 1 added, 2 added+special
    int32_t eos_id_ = -1;
    std::string bos_token_, eos_token_;
    std::string chat_template_;
};

// Incremental detokenizer: feed ids one at a time; it never emits half a UTF-8 character, and the
// concatenation of everything it returns equals Tokenizer::decode of all ids at once.
class StreamDecoder {
  public:
    StreamDecoder(std::shared_ptr<const Tokenizer> tok, bool skip_special);
    // Text that became final with this token (may be empty).
    Result<std::string> add(int32_t id);
    // Flushes held-back bytes (an incomplete character becomes U+FFFD, as in one-shot decoding).
    std::string finish();

  private:
    std::shared_ptr<const Tokenizer> tok_;
    bool skip_special_;
    std::string pending_;  // bytes of the current run of BPE tokens not yet emitted
};

}  // namespace gdn
