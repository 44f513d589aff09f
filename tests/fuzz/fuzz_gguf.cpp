// libFuzzer target: the GGUF reader (io/gguf_file.cpp) on arbitrary bytes, then every metadata
// accessor on every key, ggml's dequantizers (io/gguf_dequantize.cpp) on every accepted tensor of a
// type they handle, and the file's listing as a checkpoint (io/gguf_checkpoint.cpp). A tensor's data
// must lie inside the input (ASan reports a read outside); only QJIT_ERROR_CORRUPT_DATA may come of
// a file's contents, and a qjit::Error of the listing (a shape qjit does not import).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "io/gguf_checkpoint.hpp"
#include "io/gguf_dequantize.hpp"
#include "io/gguf_file.hpp"

namespace {

// Large enough for every seed's tensors; small enough that each input stays fast.
constexpr size_t kMaxDequantizedBytes = size_t(4) << 20;

// Every accessor on a key either returns or refuses with QJIT_ERROR_CORRUPT_DATA.
template <typename Read>
void read_or_refuse(Read&& read) {
    try {
        read();
    } catch (const qjit::Error& e) {
        if (e.status() != QJIT_ERROR_CORRUPT_DATA) std::abort();
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::shared_ptr<const qjit::GgufFile> file;
    try {
        file = qjit::GgufFile::parse(data, size, "fuzz");
    } catch (const qjit::Error& e) {
        if (e.status() != QJIT_ERROR_CORRUPT_DATA) std::abort();
        return 0;
    }
    for (const auto& entry : file->metadata()) {
        const std::string& key = entry.first;
        read_or_refuse([&] { file->get_uint(key); });
        read_or_refuse([&] { file->get_float(key); });
        read_or_refuse([&] { file->get_string(key); });
        read_or_refuse([&] { file->get_string_array(key); });
        read_or_refuse([&] { file->get_float_array(key); });
        read_or_refuse([&] { file->get_int_array(key); });
    }
    float sum = 0.0f;
    for (const qjit::GgufTensor& tensor : file->tensors()) {
        if (file->find(tensor.name) != &tensor) std::abort();
        if (!qjit::gguf_dequantize_supported(tensor.type) || tensor.bytes > kMaxDequantizedBytes) continue;
        const std::vector<float> values = qjit::dequantize_gguf(tensor);
        if (values.size() != size_t(tensor.elements())) std::abort();
        for (const float value : values) sum += value;
    }
    try {
        const qjit::GgufCheckpoint checkpoint(file, "fuzz");
        for (const qjit::GgufCheckpointLayer& layer : checkpoint.layers())
            if (file->find(layer.name) == nullptr || checkpoint.find(layer.name) == nullptr) std::abort();
    } catch (const qjit::Error&) {
    }
    volatile float keep = sum;
    (void)keep;
    return 0;
}
