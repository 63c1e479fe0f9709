// Safetensors checkpoint reader: single file or sharded (model.safetensors.index.json), mmapped.
// Every header is validated before any tensor is touched, so a truncated, corrupt or mismatched
// file is an error message, never a crash or an out-of-bounds read.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/mapped_file.h"
#include "core/status.h"
#include "core/tensor.h"

namespace gdn {

// One mmapped .safetensors file.
class SafetensorsFile {
  public:
    struct Entry {
        std::string name;             // as stored in the file
        TensorView view;              // points into the mapping
        uint64_t begin = 0, end = 0;  // byte span inside the data section
    };

    static Result<std::unique_ptr<SafetensorsFile>> open(const std::string& path);
    ~SafetensorsFile();
    SafetensorsFile(const SafetensorsFile&) = delete;
    SafetensorsFile& operator=(const SafetensorsFile&) = delete;

    const std::string& path() const { return path_; }
    bool maps(const void* p) const { return map_.contains(p); }
    const std::vector<Entry>& entries() const { return entries_; }
    size_t file_size() const { return map_.size(); }
    // The header's __metadata__ (strings only; "format": "pt" in files written by torch).
    const std::map<std::string, std::string>& metadata() const { return metadata_; }

  private:
    SafetensorsFile() = default;
    std::string path_;
    MappedFile map_;
    std::vector<Entry> entries_;
    std::map<std::string, std::string> metadata_;
    // Copies of tensors whose bytes in the file are not aligned to their element size (a header length
    // that is not a multiple of 8, odd data offsets): every view is read through aligned memory.
    std::vector<Buffer> realigned_;
};

// Parses and validates a safetensors header against a file of `file_size` bytes whose bytes are at
// `base` (the data pointers of the entries point into it). Exposed for tests.
Result<std::vector<SafetensorsFile::Entry>> parse_safetensors_header(
    const uint8_t* base, size_t file_size, const std::string& path,
    std::map<std::string, std::string>* metadata = nullptr);

class GgufFile;

// All tensors of a checkpoint folder under canonical names: the prefixes `model.language_model.` or
// `model.` stripped, `model.visual.*` skipped, `mtp.*` and `lm_head.weight` kept as they are. Or a GGUF
// file's tensors under the same names (model/gguf_checkpoint.h), with the file's conventions.
class Checkpoint {
  public:
    // How the stored tensors relate to the model (model/weights.cpp applies the difference):
    //   HF    as model_spec.md names them: zero-centred norm weights w, A_log, conv1d [C, 1, K], Qwen3-Next's
    //         interleaved in_proj_qkvz / in_proj_ba, experts per expert or gate_up_proj [E, 2I, H]
    //   GGUF  as llama.cpp's converter writes them: norms hold 1 + w, `neg_exp_A` = -exp(A_log), conv1d
    //         [C, K], Qwen3-Next's in_proj_qkv | in_proj_z de-interleaved (in_proj_ba as HF), experts
    //         stacked gate_proj / up_proj [E, I, H] or gate_up_proj, Qwen3.5's value heads tiled
    //         (config.h gdn_v_tiled); matrices in ggml block types (DType::GGML)
    enum class Layout { HF, GGUF };

    static Result<Checkpoint> open(const std::string& dir);
    // A GGUF file's tensors under canonical names (built by model/gguf_checkpoint.cpp); the file stays
    // mapped while the checkpoint lives.
    static Checkpoint from_gguf(std::vector<std::shared_ptr<const GgufFile>> parts,
                                std::map<std::string, TensorView> tensors);
    Layout layout() const { return layout_; }

    const TensorView* find(const std::string& canonical_name) const;
    const std::map<std::string, TensorView>& tensors() const { return tensors_; }
    // Every shard's __metadata__ merged (shards that disagree on a key are an error at open).
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    const std::string& dir() const { return dir_; }
    size_t total_bytes() const;
    // Gives the resident pages inside rows [r0, r1) of t (all rows by default) back to the kernel
    // (madvise DONTNEED) when t lies in a file mapping, which re-reads them if they are touched again;
    // a realigned heap copy is left alone. For loads that keep only a transformed copy (quantization).
    void release(const TensorView& t, int64_t r0 = 0, int64_t r1 = -1) const;

  private:
    std::string dir_;
    Layout layout_ = Layout::HF;
    std::vector<std::shared_ptr<SafetensorsFile>> files_;
    std::vector<std::shared_ptr<const GgufFile>> gguf_;
    std::map<std::string, TensorView> tensors_;
    std::map<std::string, std::string> metadata_;
};

// Maps a stored name to its canonical name; returns false for tensors a text engine ignores.
bool canonical_tensor_name(const std::string& stored, std::string* canonical);

}  // namespace gdn
