// The C API of pack files (qjit.h: qjit_pack_*): a model's layers mapped instead of rebuilt
// (runtime/layer_pack.hpp).
#include <memory>
#include <string>

#include "base/error.hpp"
#include "qjit/qjit.h"
#include "runtime/layer_pack.hpp"

using namespace qjit;

struct qjit_pack_writer {
    std::unique_ptr<PackWriter> writer;  // null once committed
};

struct qjit_pack {
    qjit_context* context = nullptr;
    std::shared_ptr<const PackFile> file;
};

extern "C" {

qjit_status qjit_pack_writer_create(const char* path, const char* source, qjit_pack_writer** writer) {
    return guarded([&] {
        require(writer != nullptr, "writer (the output pointer) is NULL");
        *writer = nullptr;
        require(path != nullptr, "path is NULL");
        require(source != nullptr, "source is NULL");
        auto made = std::make_unique<qjit_pack_writer>();
        made->writer = std::make_unique<PackWriter>(path, source);
        *writer = made.release();
    });
}

qjit_status qjit_pack_writer_add(qjit_pack_writer* writer, const char* name, const qjit_linear* layer) {
    return guarded([&] {
        require(writer != nullptr, "writer is NULL");
        require(writer->writer != nullptr, "the writer has committed its pack already");
        require(name != nullptr, "name is NULL");
        require(layer != nullptr, "layer is NULL");
        write_pack_entry(*writer->writer, name, *layer);
    });
}

qjit_status qjit_pack_writer_commit(qjit_pack_writer* writer) {
    return guarded([&] {
        require(writer != nullptr, "writer is NULL");
        require(writer->writer != nullptr, "the writer has committed its pack already");
        std::unique_ptr<PackWriter> committing = std::move(writer->writer);
        committing->commit();
    });
}

void qjit_pack_writer_destroy(qjit_pack_writer* writer) { delete writer; }

qjit_status qjit_pack_open(qjit_context* context, const char* path, const char* source, qjit_pack** pack) {
    return guarded([&] {
        require(pack != nullptr, "pack (the output pointer) is NULL");
        *pack = nullptr;
        require(context != nullptr, "context is NULL");
        require(path != nullptr, "path is NULL");
        require(source != nullptr, "source is NULL");
        auto made = std::make_unique<qjit_pack>();
        made->context = context;
        made->file = open_pack(*context, path, source);
        *pack = made.release();
    });
}

qjit_status qjit_pack_entries(const qjit_pack* pack, int64_t* count) {
    return guarded([&] {
        require(pack != nullptr, "pack is NULL");
        require(count != nullptr, "count is NULL");
        *count = int64_t(pack->file->entries().size());
    });
}

qjit_status qjit_pack_entry_name(const qjit_pack* pack, int64_t i, const char** name) {
    return guarded([&] {
        require(pack != nullptr, "pack is NULL");
        require(name != nullptr, "name is NULL");
        const auto count = int64_t(pack->file->entries().size());
        require(i >= 0 && i < count, "entry ", i, " of a pack of ", count);
        *name = pack->file->entries()[size_t(i)].name.c_str();
    });
}

qjit_status qjit_linear_create_from_pack(const qjit_pack* pack, const char* name, qjit_linear** layer) {
    return guarded([&] {
        require(layer != nullptr, "layer (the output pointer) is NULL");
        *layer = nullptr;
        require(pack != nullptr, "pack is NULL");
        require(name != nullptr, "name is NULL");
        const PackEntry* entry = pack->file->find(name);
        require(entry != nullptr, "'", pack->file->path(), "' has no layer named '", name, "'");
        *layer = layer_from_pack(pack->context, *pack->file, *entry).release();
    });
}

void qjit_pack_destroy(qjit_pack* pack) { delete pack; }

}  // extern "C"
