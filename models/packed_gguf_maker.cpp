#include "models/packed_gguf_maker.hpp"

#include <sys/stat.h>

#include <filesystem>
#include <stdexcept>

namespace qjit_models::llama {

std::string gguf_pack_source(const std::string& gguf_path) {
    struct stat info {};
    if (::stat(gguf_path.c_str(), &info) != 0) throw std::runtime_error("cannot stat '" + gguf_path + "'");
    const long long modified_ns = (long long)info.st_mtim.tv_sec * 1000000000LL + info.st_mtim.tv_nsec;
    return "GGUF " + std::filesystem::path(gguf_path).filename().string() + " of " +
           std::to_string((long long)info.st_size) + " bytes modified at " + std::to_string(modified_ns) + " ns";
}

PackedGgufMaker::PackedGgufMaker(std::string pack_path, const std::string& gguf_path,
                                 const qjit_context_options* options)
    : importer_(options), pack_path_(std::move(pack_path)) {
    const std::string source = gguf_pack_source(gguf_path);
    if (!std::filesystem::exists(pack_path_)) {
        rebuild_reason_ = "no pack file yet";
    } else {
        const qjit_status status = qjit_pack_open(context().get(), pack_path_.c_str(), source.c_str(), &pack_);
        if (status == QJIT_OK) return;
        if (status != QJIT_ERROR_STALE && status != QJIT_ERROR_CORRUPT_DATA && status != QJIT_ERROR_UNSUPPORTED)
            check_qjit(status, "qjit_pack_open");
        rebuild_reason_ = std::string(qjit_status_string(status)) + ": " + qjit_last_error();
    }
    check_qjit(qjit_pack_writer_create(pack_path_.c_str(), source.c_str(), &writer_), "qjit_pack_writer_create");
}

PackedGgufMaker::~PackedGgufMaker() {
    qjit_pack_destroy(pack_);
    qjit_pack_writer_destroy(writer_);
}

std::unique_ptr<Linear> PackedGgufMaker::make_linear(const LoadedMatrix& matrix) {
    if (!pack_) {
        std::unique_ptr<Linear> linear = importer_.make_linear(matrix);
        check_qjit(qjit_pack_writer_add(writer_, matrix.name().c_str(), linear->qjit_layer()), "qjit_pack_writer_add");
        return linear;
    }
    qjit_linear* layer = nullptr;
    const qjit_status status = qjit_linear_create_from_pack(pack_, matrix.name().c_str(), &layer);
    if (status != QJIT_OK)
        throw std::runtime_error("qjit_linear_create_from_pack failed on " + matrix.name() + ": " +
                                 qjit_status_string(status) + ": " + qjit_last_error());
    return own_qjit_layer(context(), layer, matrix.n(), matrix.k());
}

void PackedGgufMaker::finish() {
    if (writer_) check_qjit(qjit_pack_writer_commit(writer_), "qjit_pack_writer_commit");
}

}  // namespace qjit_models::llama
