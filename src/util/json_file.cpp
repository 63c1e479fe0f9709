#include "util/json_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/log.h"

namespace gdn {

bool file_exists(const std::string& path) {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

Result<std::string> read_text_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return Status::error(strprintf("cannot open %s: %s", path.c_str(), std::strerror(errno)));
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::string printable(std::string_view s) {
    std::string r;
    r.reserve(s.size());
    for (unsigned char c : s) {
        if (c >= 0x20 && c < 0x7f)
            r += static_cast<char>(c);
        else
            r += strprintf("\\x%02x", c);
    }
    return r;
}

std::string to_json_text(const Json& j) {
    return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

namespace {

// The byte offset where nesting first exceeds max_depth, or npos. Brackets inside strings do not
// count. The scan needs no validity: a document it passes is parsed by nlohmann, which rejects
// malformed ones, and any partial value it builds is no deeper than the scan allowed.
size_t too_deep_at(const std::string& text, int max_depth) {
    int depth = 0;
    bool in_string = false, escaped = false;
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (in_string) {
            if (escaped)
                escaped = false;
            else if (c == '\\')
                escaped = true;
            else if (c == '"')
                in_string = false;
            continue;
        }
        if (c == '"')
            in_string = true;
        else if (c == '[' || c == '{') {
            if (++depth > max_depth) return i;
        } else if (c == ']' || c == '}') {
            --depth;
        }
    }
    return std::string::npos;
}

}  // namespace

namespace {

// callback: nlohmann's parser callback (null: none); it runs only on documents within max_depth.
template <class J>
Result<J> parse_as(const std::string& text, const std::string& what, int max_depth,
                   typename J::parser_callback_t callback = nullptr) {
    if (const size_t at = too_deep_at(text, max_depth); at != std::string::npos)
        return Status::error(
            strprintf("%s: JSON nested deeper than %d levels (at byte %zu)", what.c_str(), max_depth, at));
    try {
        return J::parse(text, callback);
    } catch (const typename J::parse_error& e) {
        return Status::error(strprintf("%s: malformed JSON at byte %zu: %s", what.c_str(),
                                       static_cast<size_t>(e.byte), printable(e.what()).c_str()));
    } catch (const typename J::exception& e) {  // out_of_range: a number too large for a double (1e400)
        return Status::error(strprintf("%s: invalid JSON: %s", what.c_str(), printable(e.what()).c_str()));
    }
}

}  // namespace

Result<Json> parse_json(const std::string& text, const std::string& what, int max_depth) {
    return parse_as<Json>(text, what, max_depth);
}

Result<Json> parse_json_limited(const std::string& text, const std::string& what,
                                const JsonObjectLimits& limits, int max_depth) {
    // Per nesting level (the parser's depth, bounded by parse_as's depth scan): the key last read there, and
    // the members counted of the object open there with their limit and its key.
    struct Level {
        std::string last_key, name;
        size_t members = 0, limit = 0;
    };
    std::vector<Level> at(static_cast<size_t>(max_depth) + 2);
    std::string error;
    auto callback = [&](int depth, Json::parse_event_t event, Json& parsed) -> bool {
        const size_t d = static_cast<size_t>(depth);
        switch (event) {
            case Json::parse_event_t::object_start: {  // the object's members are at depth + 1
                Level& inner = at[d + 1];
                inner.name = at[d].last_key;
                inner.members = 0;
                inner.limit = limits.max_members;
                for (const auto& [key, limit] : limits.by_key)
                    if (key == inner.name) inner.limit = limit;
                inner.last_key.clear();
                return true;
            }
            case Json::parse_event_t::array_start:  // its elements have no key
                at[d + 1].last_key.clear();
                return true;
            case Json::parse_event_t::key: {
                Level& level = at[d];
                level.last_key = parsed.get<std::string>();
                if (++level.members <= level.limit) return true;
                if (error.empty())
                    error = level.name.empty()
                                ? strprintf("a JSON object has more than %zu members", level.limit)
                                : strprintf("'%s' has more than %zu members", printable(level.name).c_str(),
                                            level.limit);
                return false;  // dropped unread: no insertion, so no quadratic work
            }
            default:
                return true;
        }
    };
    GDN_ASSIGN_OR_RETURN(Json j, parse_as<Json>(text, what, max_depth, callback));
    if (!error.empty()) return Status::error(what + ": " + error);
    return j;
}

Result<SortedJson> parse_json_sorted(const std::string& text, const std::string& what, int max_depth) {
    return parse_as<SortedJson>(text, what, max_depth);
}

Result<Json> read_json_file(const std::string& path) {
    GDN_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
    return parse_json(text, path);
}

Result<SortedJson> read_json_file_sorted(const std::string& path) {
    GDN_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
    return parse_json_sorted(text, path);
}

}  // namespace gdn
