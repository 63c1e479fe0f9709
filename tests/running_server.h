// An OpenAIServer serving on its own thread for a test (any free loopback port), stopped and joined
// when destroyed.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "server/openai_server.h"
#include "test_util.h"

namespace gdn::test {

class RunningServer {
  public:
    RunningServer(std::unique_ptr<Engine> engine, std::shared_ptr<const Tokenizer> tok, ServerConfig cfg) {
        cfg.port = 0;
        server_ = std::make_unique<OpenAIServer>(std::move(engine), std::move(tok), cfg);
        thread_ = std::thread([this] { server_->run(); });
        for (int i = 0; i < 500 && server_->bound_port() == 0; ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
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

// The demo model (models/demo) served on a free loopback port: an engine sized by `ec`, the model loaded
// with `lo`, the tokenizer with `chat_template` when one is given (*tok gets it when asked for); null after
// a test failure.
inline std::unique_ptr<RunningServer> demo_server(const EngineConfig& ec, ServerConfig sc,
                                                  const LoadOptions& lo = {},
                                                  const std::string& chat_template = "",
                                                  std::shared_ptr<const Tokenizer>* tok = nullptr) {
    auto m = Model::load(ExecContext::process(), demo_model_dir(), nullptr, lo);
    EXPECT_TRUE(m.is_ok()) << m.message();
    auto t = Tokenizer::load(demo_model_dir(), chat_template);
    EXPECT_TRUE(t.is_ok()) << t.message();
    if (!m.is_ok() || !t.is_ok()) return nullptr;
    auto e = Engine::create(std::shared_ptr<const Model>(std::move(*m)), *t, ec);
    EXPECT_TRUE(e.is_ok()) << e.message();
    if (!e.is_ok()) return nullptr;
    if (tok) *tok = *t;
    if (sc.served_model_name.empty()) sc.served_model_name = "demo";
    return std::make_unique<RunningServer>(std::move(*e), *t, sc);
}

// The value of one line of the server's /metrics (Prometheus text: "name value"); -1 when absent.
inline double scrape_metric(int port, const std::string& name) {
    httplib::Client c("127.0.0.1", port);
    auto r = c.Get("/metrics");
    const auto p = r ? r->body.find("\n" + name + " ") : std::string::npos;
    return p == std::string::npos ? -1.0 : std::stod(r->body.substr(p + name.size() + 2));
}

}  // namespace gdn::test
