// UTF-8 helpers for the tokenizer: lossy validation, NFC, and GPT-2's byte <-> unicode mapping.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace gdn {

// Replaces every ill-formed UTF-8 sequence with U+FFFD using the "maximal subpart" rule of the Unicode
// standard (§3.9) and the WHATWG Encoding spec — what TextDecoder, Rust's from_utf8_lossy and Python's
// bytes.decode(errors="replace") do. Valid input is returned unchanged.
std::string utf8_lossy(std::string_view bytes);
bool utf8_valid(std::string_view bytes);

// Length of a trailing sequence that is a valid but incomplete UTF-8 prefix (0..3): the bytes a
// streaming decoder must hold back until more arrive.
size_t utf8_incomplete_tail(std::string_view bytes);

// Appends the UTF-8 encoding of code point cp.
void utf8_append(std::string* out, uint32_t cp);
// Decodes one code point at s[i] (input must be valid UTF-8); advances i.
uint32_t utf8_next(std::string_view s, size_t* i);

// Unicode NFC normalisation (ICU). Input must be valid UTF-8.
std::string nfc(std::string_view text);

// GPT-2 byte-level alphabet: byte b is shown as the code point byte_to_codepoint(b).
uint32_t byte_to_codepoint(uint8_t b);
// Inverse mapping; returns -1 for code points outside the 256-symbol alphabet.
int codepoint_to_byte(uint32_t cp);
// UTF-8 string of the mapped symbol for byte b.
const std::string& byte_symbol(uint8_t b);

}  // namespace gdn
