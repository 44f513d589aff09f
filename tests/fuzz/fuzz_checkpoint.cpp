// libFuzzer target: a whole GPTQ checkpoint directory (io/gptq_checkpoint.cpp): a config, an
// optional shard index and safetensors files, each cut from the input, written to a scratch
// directory and opened; every layer that lists is then imported (metadata and codes). Failures
// must be qjit::Errors.
#include <fuzzer/FuzzedDataProvider.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "base/error.hpp"
#include "io/gptq_checkpoint.hpp"
#include "format/gptq_import.hpp"

namespace {

void write(const std::filesystem::path& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::filesystem::path dir = "/tmp/qjit_fuzz_checkpoint_" + std::to_string(getpid());
    static const struct Cleanup {
        ~Cleanup() { std::filesystem::remove_all(dir); }  // when the fuzzer exits
    } cleanup;
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    FuzzedDataProvider input(data, size);
    const bool nested = input.ConsumeBool();  // config.json with quantization_config, or quantize_config.json
    write(dir / (nested ? "config.json" : "quantize_config.json"), input.ConsumeRandomLengthString(2048));
    const int shards = input.ConsumeIntegralInRange(0, 2);  // 0: model.safetensors alone
    if (shards == 0) {
        write(dir / "model.safetensors", input.ConsumeRandomLengthString(size));
    } else {
        write(dir / "model.safetensors.index.json", input.ConsumeRandomLengthString(2048));
        for (int shard = 1; shard <= shards; ++shard)
            write(dir / ("model-0000" + std::to_string(shard) + "-of-0000" + std::to_string(shards) + ".safetensors"),
                  shard == shards ? input.ConsumeRandomLengthString(size) : input.ConsumeRandomLengthString(1 << 16));
    }
    try {
        const qjit::GptqCheckpoint checkpoint(dir.string());
        for (const qjit::CheckpointLayer& layer : checkpoint.layers()) {
            if (layer.k * layer.n > (int64_t(1) << 22)) continue;  // a shape too big to import in a fuzz run
            const qjit::CheckpointTensors tensors = checkpoint.tensors(layer);
            try {
                (void)qjit::import_gptq(layer.k, layer.n, tensors.view);
            } catch (const qjit::Error&) {
            }
        }
    } catch (const qjit::Error&) {
    }
    return 0;
}
