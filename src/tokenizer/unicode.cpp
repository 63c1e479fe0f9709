#include "tokenizer/unicode.h"

#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <array>
#include <vector>

#include "core/log.h"

namespace gdn {

namespace {

// Length and validity of the sequence starting at s[i], per the well-formed table (Unicode Table 3-7).
// Returns the number of bytes consumed: a full valid sequence (ok = true), or the maximal subpart of
// an ill-formed one (ok = false, at least 1 byte).
size_t utf8_scan(std::string_view s, size_t i, bool* ok, bool* truncated) {
    const auto b = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
    const uint8_t c = b(i);
    *truncated = false;
    if (c < 0x80) {
        *ok = true;
        return 1;
    }
    int need;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        need = 1;
    else if (c == 0xE0) {
        need = 2;
        lo = 0xA0;
    } else if (c >= 0xE1 && c <= 0xEC)
        need = 2;
    else if (c == 0xED) {
        need = 2;
        hi = 0x9F;
    } else if (c >= 0xEE && c <= 0xEF)
        need = 2;
    else if (c == 0xF0) {
        need = 3;
        lo = 0x90;
    } else if (c >= 0xF1 && c <= 0xF3)
        need = 3;
    else if (c == 0xF4) {
        need = 3;
        hi = 0x8F;
    } else {
        *ok = false;
        return 1;
    }
    size_t k = 1;
    for (int j = 0; j < need; ++j, ++k) {
        if (i + k >= s.size()) {
            *ok = false;
            *truncated = true;
            return k;
        }
        const uint8_t x = b(i + k);
        const uint8_t l = j == 0 ? lo : 0x80, h = j == 0 ? hi : 0xBF;
        if (x < l || x > h) {
            *ok = false;
            return k;
        }
    }
    *ok = true;
    return k;
}

}  // namespace

std::string utf8_lossy(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    size_t i = 0;
    while (i < s.size()) {
        bool ok, trunc;
        size_t n = utf8_scan(s, i, &ok, &trunc);
        if (ok)
            out.append(s.substr(i, n));
        else
            out.append("\xEF\xBF\xBD");
        i += n;
    }
    return out;
}

bool utf8_valid(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
        bool ok, trunc;
        i += utf8_scan(s, i, &ok, &trunc);
        if (!ok) return false;
    }
    return true;
}

size_t utf8_incomplete_tail(std::string_view s) {
    const size_t n = s.size();
    for (size_t back = 1; back <= 3 && back <= n; ++back) {
        const uint8_t c = static_cast<uint8_t>(s[n - back]);
        if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
        bool ok, trunc;
        utf8_scan(s, n - back, &ok, &trunc);
        return (!ok && trunc) ? back : 0;
    }
    return 0;
}

void utf8_append(std::string* out, uint32_t cp) {
    if (cp < 0x80) {
        out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

uint32_t utf8_next(std::string_view s, size_t* i) {
    const uint8_t c = static_cast<uint8_t>(s[*i]);
    if (c < 0x80) {
        ++*i;
        return c;
    }
    int n = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : 1;
    uint32_t cp = c & (0x3F >> n);
    for (int k = 1; k <= n; ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[*i + k]) & 0x3F);
    *i += n + 1;
    return cp;
}

std::string nfc(std::string_view text) {
    bool ascii = true;
    for (char ch : text) ascii &= static_cast<uint8_t>(ch) < 0x80;
    if (ascii) return std::string(text);  // ASCII is always NFC
    UErrorCode err = U_ZERO_ERROR;
    const UNormalizer2* n2 = unorm2_getNFCInstance(&err);
    GDN_CHECK(U_SUCCESS(err), "ICU NFC unavailable: %s", u_errorName(err));
    // UTF-8 -> UTF-16
    int32_t len16 = 0;
    err = U_ZERO_ERROR;
    u_strFromUTF8(nullptr, 0, &len16, text.data(), static_cast<int32_t>(text.size()), &err);
    std::vector<UChar> src(len16 + 1);
    err = U_ZERO_ERROR;
    u_strFromUTF8(src.data(), len16 + 1, nullptr, text.data(), static_cast<int32_t>(text.size()), &err);
    GDN_CHECK(U_SUCCESS(err));
    err = U_ZERO_ERROR;
    if (unorm2_isNormalized(n2, src.data(), len16, &err) && U_SUCCESS(err)) return std::string(text);
    err = U_ZERO_ERROR;
    int32_t need = unorm2_normalize(n2, src.data(), len16, nullptr, 0, &err);
    std::vector<UChar> dst(need + 1);
    err = U_ZERO_ERROR;
    unorm2_normalize(n2, src.data(), len16, dst.data(), need + 1, &err);
    GDN_CHECK(U_SUCCESS(err), "NFC failed: %s", u_errorName(err));
    int32_t len8 = 0;
    err = U_ZERO_ERROR;
    u_strToUTF8(nullptr, 0, &len8, dst.data(), need, &err);
    std::string out(len8, '\0');
    err = U_ZERO_ERROR;
    u_strToUTF8(out.data(), len8 + 1, nullptr, dst.data(), need, &err);
    return out;
}

namespace {
struct ByteTables {
    std::array<uint32_t, 256> to_cp{};
    std::array<std::string, 256> symbol;
    std::vector<int> from_cp = std::vector<int>(324, -1);  // code points used are < 324
    ByteTables() {
        // Printable bytes map to themselves; the rest to 256, 257, ... in byte order (GPT-2).
        uint32_t next = 256;
        for (int b = 0; b < 256; ++b) {
            const bool printable =
                (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            to_cp[b] = printable ? b : next++;
            from_cp[to_cp[b]] = b;
            utf8_append(&symbol[b], to_cp[b]);
        }
    }
};
const ByteTables& tables() {
    static const ByteTables t;
    return t;
}
}  // namespace

uint32_t byte_to_codepoint(uint8_t b) {
    return tables().to_cp[b];
}
int codepoint_to_byte(uint32_t cp) {
    return cp < tables().from_cp.size() ? tables().from_cp[cp] : -1;
}
const std::string& byte_symbol(uint8_t b) {
    return tables().symbol[b];
}

}  // namespace gdn
