#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/log.h"

namespace gdn {

Result<MappedFile> MappedFile::open(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Status::error(strprintf("cannot open %s: %s", path.c_str(), std::strerror(errno)));
    struct stat st;
    if (::fstat(fd, &st) != 0) {
        const int err = errno;
        ::close(fd);
        return Status::error(strprintf("cannot stat %s: %s", path.c_str(), std::strerror(err)));
    }
    MappedFile f;
    f.size_ = static_cast<size_t>(st.st_size);
    if (f.size_ > 0) {
        void* p = ::mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            const int err = errno;
            ::close(fd);
            return Status::error(strprintf("cannot mmap %s: %s", path.c_str(), std::strerror(err)));
        }
        f.map_ = p;
    }
    ::close(fd);
    return f;
}

MappedFile::~MappedFile() {
    if (map_) ::munmap(map_, size_);
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : map_(std::exchange(o.map_, nullptr)), size_(std::exchange(o.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
    if (this != &o) {
        if (map_) ::munmap(map_, size_);
        map_ = std::exchange(o.map_, nullptr);
        size_ = std::exchange(o.size_, 0);
    }
    return *this;
}

const uint8_t* MappedFile::data() const {
    static const uint8_t kEmpty[1] = {0};
    return map_ ? static_cast<const uint8_t*>(map_) : kEmpty;
}

}  // namespace gdn
