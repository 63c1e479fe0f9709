// Client side of a text/event-stream body: splits the bytes as they arrive into the payloads of its
// `data: ` events. `gdn bench` and the server tests read the server's streams with it.
#pragma once

#include <cstddef>
#include <string>

namespace gdn {

class SseReader {
  public:
    // Appends n bytes, then calls on_data(payload) (payload without "data: ") for each event completed
    // by them; other events are skipped. on_data returns false to stop reading: feed then returns false.
    template <class OnData>
    bool feed(const char* bytes, size_t n, OnData&& on_data) {
        buf_.append(bytes, n);
        size_t end;
        while ((end = buf_.find("\n\n")) != std::string::npos) {
            std::string event = buf_.substr(0, end);
            buf_.erase(0, end + 2);
            if (event.rfind("data: ", 0) != 0) continue;
            if (!on_data(event.substr(6))) return false;
        }
        return true;
    }

  private:
    std::string buf_;  // the bytes of an event not yet completed
};

}  // namespace gdn
