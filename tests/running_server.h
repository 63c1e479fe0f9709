// An OpenAIServer serving on its own thread for a test (any free loopback port), stopped and joined
// when destroyed.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>

#include "server/openai_server.h"

namespace gdn::test {

class RunningServer {
public:
    RunningServer(std::unique_ptr<Engine> engine, std::shared_ptr<const Tokenizer> tok, ServerConfig cfg) {
        cfg.port = 0;
        server_ = std::make_unique<OpenAIServer>(std::move(engine), std::move(tok), cfg);
        thread_ = std::thread([this] { server_->run(); });
        for (int i = 0; i < 500 && server_->bound_port() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        EXPECT_GT(server_->bound_port(), 0) << "the test server did not start";
    }
    ~RunningServer() {
        server_->stop();
        thread_.join();
    }
    int port() const { return server_->bound_port(); }
    OpenAIServer& server() { return *server_; }

private:
    std::unique_ptr<OpenAIServer> server_;
    std::thread thread_;
};

}  // namespace gdn::test
