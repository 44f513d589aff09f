// The exact GGUF import through a pack file (qjit.h's qjit_pack_*): when the pack was made from the
// same GGUF file for the kernels this context makes, each layer is mapped from it, with nothing
// unpacked, copied or zeroed; otherwise (no pack yet, or a stale or damaged one) each layer is
// imported from the file as GgufImportMaker does and written to a new pack, which finish() commits
// over the old one.
#pragma once

#include <memory>
#include <string>

#include "models/gguf_import_maker.hpp"

namespace qjit_models::llama {

class PackedGgufMaker final : public LayerMaker {
public:
    // pack_path: the pack file; gguf_path: the model file its layers come from.
    PackedGgufMaker(std::string pack_path, const std::string& gguf_path, const qjit_context_options* options = nullptr);
    ~PackedGgufMaker() override;

    std::unique_ptr<Linear> make_linear(const LoadedMatrix& matrix) override;
    std::string name() const override { return importer_.name(); }
    std::shared_ptr<qjit_context> context() const override { return importer_.context(); }

    // Commits the pack being written (nothing when the layers were mapped).
    void finish();
    bool mapped() const { return pack_ != nullptr; }
    // Why the pack is being written: "no pack file yet", or the stale or corrupt pack's message.
    const std::string& rebuild_reason() const { return rebuild_reason_; }

private:
    GgufImportMaker importer_;
    std::string pack_path_;
    qjit_pack* pack_ = nullptr;             // mapped: the layers come from here
    qjit_pack_writer* writer_ = nullptr;    // else: they go here
    std::string rebuild_reason_;
};

// What a pack's layers are made from: the GGUF file's name, size and modification time.
std::string gguf_pack_source(const std::string& gguf_path);

}  // namespace qjit_models::llama
