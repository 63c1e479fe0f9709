// The HTTP request parser on arbitrary bytes, fed in two pieces split where the first byte says, with
// pipelined requests parsed one after another: no crash, no read past the input, and every request it
// accepts respects the limits.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "server/http_parser.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    gdn::HttpLimits lim;
    lim.max_header_bytes = 512;
    lim.max_body_bytes = 1024;
    lim.max_headers = 16;
    gdn::HttpParser p(lim);
    const std::string all(reinterpret_cast<const char*>(data) + 1, size - 1);
    const size_t split = all.empty() ? 0 : data[0] % (all.size() + 1);
    std::string buf;
    for (const std::string& piece : {all.substr(0, split), all.substr(split)}) {
        buf += piece;
        while (true) {
            size_t used = 0;
            const auto st = p.feed(buf, &used);
            if (used > buf.size()) std::abort();
            buf.erase(0, used);
            if (st == gdn::HttpParser::State::DONE) {
                if (p.request().body.size() > lim.max_body_bytes || p.request().path.empty()) std::abort();
                p.reset();
                continue;
            }
            if (st == gdn::HttpParser::State::ERROR) {
                if (p.error_status() < 400 || p.error_message().empty()) std::abort();
                return 0;
            }
            if (st == gdn::HttpParser::State::HEAD_DONE) continue;
            break;  // NEED_MORE
        }
    }
    return 0;
}
