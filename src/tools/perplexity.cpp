#include "tools/perplexity.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "core/log.h"

namespace gdn::perplexity {

namespace {
constexpr char kMagic[8] = {'G', 'D', 'N', 'K', 'L', 'D', '0', '1'};
}

int64_t log_softmax(const float* x, int64_t V, float* out) {
    int64_t best = 0;
    for (int64_t v = 1; v < V; ++v)
        if (x[v] > x[best]) best = v;
    const double mx = x[best];
    double s = 0.0;
    for (int64_t v = 0; v < V; ++v) s += std::exp(static_cast<double>(x[v]) - mx);
    const double lse = mx + std::log(s);
    for (int64_t v = 0; v < V; ++v) out[v] = static_cast<float>(static_cast<double>(x[v]) - lse);
    return best;
}

double kl_divergence(const float* logp, const float* logq, int64_t V) {
    double kl = 0.0;
    for (int64_t v = 0; v < V; ++v) {
        const double lp = logp[v];
        kl += std::exp(lp) * (lp - static_cast<double>(logq[v]));
    }
    return std::max(kl, 0.0);  // >= 0 mathematically; f32 log-probs can round it a hair below
}

Summary Accumulator::summary() const {
    Summary s;
    s.n = static_cast<int64_t>(nll_.size());
    if (s.n == 0) return s;
    auto mean_err = [](const std::vector<double>& v, double* err) {
        double sum = 0, sq = 0;
        for (double x : v) {
            sum += x;
            sq += x * x;
        }
        const double n = static_cast<double>(v.size()), m = sum / n;
        *err = n > 1 ? std::sqrt(std::max(sq / n - m * m, 0.0) / (n - 1)) : 0.0;
        return m;
    };
    double nll_err = 0;
    const double nll = mean_err(nll_, &nll_err);
    s.ppl = std::exp(nll);
    s.ppl_err = s.ppl * nll_err;
    if (!kld_.empty()) {
        s.has_base = true;
        double e = 0;
        s.base_ppl = std::exp(mean_err(base_nll_, &e));
        s.kld_mean = mean_err(kld_, &s.kld_err);
        std::vector<double> k = kld_;
        const size_t i = std::min(k.size() - 1, static_cast<size_t>(std::ceil(0.99 * k.size())) - 1);
        std::nth_element(k.begin(), k.begin() + static_cast<std::ptrdiff_t>(i), k.end());
        s.kld_p99 = k[i];
        const double n = static_cast<double>(kld_.size());
        s.same_top = same_ / n;
        s.same_top_err = n > 1 ? std::sqrt(s.same_top * (1 - s.same_top) / (n - 1)) : 0.0;
    }
    return s;
}

Result<std::unique_ptr<BaseWriter>> BaseWriter::create(const std::string& path, uint32_t vocab, uint32_t ctx,
                                                       const std::vector<int32_t>& tokens) {
    auto w = std::unique_ptr<BaseWriter>(new BaseWriter());
    w->path_ = path;
    w->vocab_ = vocab;
    w->f_ = std::fopen(path.c_str(), "wb");
    if (!w->f_) return Status::error(strprintf("cannot create %s: %s", path.c_str(), std::strerror(errno)));
    const uint64_t n = tokens.size();
    bool ok = std::fwrite(kMagic, 1, 8, w->f_) == 8 && std::fwrite(&vocab, 4, 1, w->f_) == 1 &&
              std::fwrite(&ctx, 4, 1, w->f_) == 1 && std::fwrite(&n, 8, 1, w->f_) == 1 &&
              std::fwrite(tokens.data(), 4, n, w->f_) == n;
    if (!ok) return Status::error(strprintf("writing %s failed: %s", path.c_str(), std::strerror(errno)));
    return w;
}

Status BaseWriter::write_row(const float* logp) {
    if (std::fwrite(logp, 4, vocab_, f_) != vocab_)
        return Status::error(strprintf("writing %s failed: %s", path_.c_str(), std::strerror(errno)));
    return Status::ok();
}

Status BaseWriter::close() {
    FILE* f = f_;
    f_ = nullptr;
    if (f && std::fclose(f) != 0)
        return Status::error(strprintf("writing %s failed: %s", path_.c_str(), std::strerror(errno)));
    return Status::ok();
}

BaseWriter::~BaseWriter() {
    if (f_) {  // not closed: an error path; leave no truncated base behind
        std::fclose(f_);
        std::remove(path_.c_str());
    }
}

Result<std::unique_ptr<BaseReader>> BaseReader::open(const std::string& path, uint32_t vocab, uint32_t ctx,
                                                     const std::vector<int32_t>& tokens, int64_t scored) {
    auto r = std::unique_ptr<BaseReader>(new BaseReader());
    r->path_ = path;
    r->vocab_ = vocab;
    r->f_ = std::fopen(path.c_str(), "rb");
    if (!r->f_) return Status::error(strprintf("cannot open %s: %s", path.c_str(), std::strerror(errno)));
    char magic[8];
    uint32_t v = 0, c = 0;
    uint64_t n = 0;
    if (std::fread(magic, 1, 8, r->f_) != 8 || std::memcmp(magic, kMagic, 8) != 0)
        return Status::error(path + ": not a gdn perplexity base file (written by --kl-divergence-base)");
    if (std::fread(&v, 4, 1, r->f_) != 1 || std::fread(&c, 4, 1, r->f_) != 1 ||
        std::fread(&n, 8, 1, r->f_) != 1)
        return Status::error(path + ": truncated header");
    if (v != vocab)
        return Status::error(strprintf("%s: vocabulary %u, this model has %u", path.c_str(), v, vocab));
    if (c != ctx)
        return Status::error(strprintf("%s: written with --ctx %u, this run uses %u", path.c_str(), c, ctx));
    if (n != tokens.size())
        return Status::error(strprintf("%s: %llu tokens, this text has %zu (another file or tokenizer)",
                                       path.c_str(), (unsigned long long)n, tokens.size()));
    std::vector<int32_t> t(n);
    if (std::fread(t.data(), 4, n, r->f_) != n) return Status::error(path + ": truncated token list");
    if (t != tokens)
        return Status::error(path +
                             ": its token stream differs from this text's (another file or tokenizer)");
    const long here = std::ftell(r->f_);
    std::fseek(r->f_, 0, SEEK_END);
    const long end = std::ftell(r->f_);
    std::fseek(r->f_, here, SEEK_SET);
    if (end - here != static_cast<long>(scored * vocab * 4))
        return Status::error(
            strprintf("%s: holds %ld bytes of log-probabilities, expected %lld (%lld rows of %u)",
                      path.c_str(), end - here, (long long)(scored * vocab * 4), (long long)scored, vocab));
    return r;
}

Status BaseReader::read_row(float* logp) {
    if (std::fread(logp, 4, vocab_, f_) != vocab_) return Status::error(path_ + ": truncated");
    return Status::ok();
}

BaseReader::~BaseReader() {
    if (f_) std::fclose(f_);
}

}  // namespace gdn::perplexity
