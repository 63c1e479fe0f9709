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

Result<Json> parse_json(const std::string& text, const std::string& what) {
    try {
        return Json::parse(text);
    } catch (const Json::parse_error& e) {
        return Status::error(strprintf("%s: malformed JSON at byte %zu: %s", what.c_str(),
                                       static_cast<size_t>(e.byte), e.what()));
    }
}

Result<Json> read_json_file(const std::string& path) {
    GDN_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
    return parse_json(text, path);
}

}  // namespace gdn
