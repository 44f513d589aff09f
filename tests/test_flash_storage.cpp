// Storage for the flash FFN: file storage on both read engines (direct and buffered), memory
// storage, the request contract, page-cache eviction, and the faulty storage other tests use.
#include <gtest/gtest.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "faulty_storage.hpp"
#include "runtime/flash/storage.hpp"
#include "test_support.hpp"

namespace fs = std::filesystem;

namespace qjit {
namespace {

using test::write_file;

// Expects `body` to throw qjit::Error with `status` and a message containing every word.
void expect_error(const std::function<void()>& body, qjit_status status, std::initializer_list<std::string> words) {
    try {
        body();
        ADD_FAILURE() << "no error, expected status " << status;
    } catch (const Error& e) {
        EXPECT_EQ(e.status(), status) << e.what();
        for (const std::string& word : words)
            EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << "'" << e.what() << "' does not name '" << word << "'";
    }
}

std::string random_bytes(size_t count, uint32_t seed) {
    std::mt19937 rng(seed);
    std::string bytes(count, '\0');
    for (char& c : bytes) c = char(rng());
    return bytes;
}

// Random block-aligned requests of 1 to 16 blocks, each with its own part of `buffer`.
std::vector<ReadRequest> random_requests(const Storage& storage, int count, uint32_t seed,
                                         std::unique_ptr<uint8_t[], AlignedFree>& buffer) {
    std::mt19937 rng(seed);
    const int64_t block = storage.block_size();
    const int64_t blocks = storage.size() / block;
    std::vector<ReadRequest> requests(static_cast<size_t>(count));
    int64_t total = 0;
    for (ReadRequest& r : requests) {
        const int64_t length = std::min<int64_t>(blocks, 1 + int64_t(rng() % 16));
        r.offset = int64_t(rng() % uint64_t(blocks - length + 1)) * block;
        r.length = length * block;
        total += r.length;
    }
    buffer = aligned_buffer(total, block);
    int64_t at = 0;
    for (ReadRequest& r : requests) {
        r.buffer = buffer.get() + at;
        at += r.length;
    }
    return requests;
}

void expect_reads_match(Storage& storage, const std::string& bytes, int queue_depth, uint32_t seed) {
    std::unique_ptr<uint8_t[], AlignedFree> buffer;
    const std::vector<ReadRequest> requests = random_requests(storage, 300, seed, buffer);
    const StorageCounters before = storage.counters();
    storage.read(requests, queue_depth);
    int64_t total = 0;
    for (const ReadRequest& r : requests) {
        ASSERT_EQ(std::memcmp(r.buffer, bytes.data() + r.offset, size_t(r.length)), 0)
            << storage.describe() << ": read at offset " << r.offset << " length " << r.length << " depth " << queue_depth;
        total += r.length;
    }
    EXPECT_EQ(storage.counters().reads - before.reads, int64_t(requests.size()));
    EXPECT_EQ(storage.counters().bytes_read - before.bytes_read, total);
}

class FlashStorageTest : public ::testing::Test {
protected:
    void SetUp() override {
        // Under the build tree, on the disk O_DIRECT is meant for (/tmp may be a tmpfs).
        std::string pattern = (fs::read_symlink("/proc/self/exe").parent_path() / "flash_storage_XXXXXX").string();
        ASSERT_NE(::mkdtemp(pattern.data()), nullptr) << std::strerror(errno);
        dir_ = pattern;
        path_ = (dir_ / "weights.bin").string();
    }
    void TearDown() override { fs::remove_all(dir_); }

    // Writes `size` random bytes to path_ and returns them.
    std::string write_weights(size_t size, uint32_t seed = 1) {
        std::string bytes = random_bytes(size, seed);
        write_file(path_, bytes);
        return bytes;
    }

    // The file storage, or null after GTEST_SKIP when this machine refuses the engine or O_DIRECT.
    std::unique_ptr<Storage> open_or_skip(ReadEngine engine, bool direct = true) {
        try {
            return open_file_storage(path_, {direct, engine});
        } catch (const Error& e) {
            if (e.status() == QJIT_ERROR_UNSUPPORTED || std::string(e.what()).find("O_DIRECT") != std::string::npos) {
                skip_reason_ = e.what();
                return nullptr;
            }
            throw;
        }
    }

    fs::path dir_;
    std::string path_;
    std::string skip_reason_;
};

#define OPEN_OR_SKIP(storage, ...)                                  \
    auto storage = open_or_skip(__VA_ARGS__);                       \
    if (!storage) GTEST_SKIP() << "not available here: " << skip_reason_

TEST_F(FlashStorageTest, PreadReadsEqualTheFileAtDepths1And64) {
    const std::string bytes = write_weights(3 << 20);
    OPEN_OR_SKIP(storage, ReadEngine::Pread);
    EXPECT_EQ(storage->size(), int64_t(bytes.size()));
    EXPECT_NE(storage->describe().find("pread"), std::string::npos) << storage->describe();
    expect_reads_match(*storage, bytes, 1, 1);
    expect_reads_match(*storage, bytes, 64, 2);
    expect_reads_match(*storage, bytes, 64, 3);  // the pool's threads again
}

TEST_F(FlashStorageTest, IoUringReadsEqualTheFileAtDepths1And64) {
    const std::string bytes = write_weights(3 << 20);
    OPEN_OR_SKIP(storage, ReadEngine::IoUring);
    EXPECT_NE(storage->describe().find("io_uring"), std::string::npos) << storage->describe();
    expect_reads_match(*storage, bytes, 1, 4);
    expect_reads_match(*storage, bytes, 64, 5);
    expect_reads_match(*storage, bytes, 300, 6);  // deeper than the ring: capped
}

TEST_F(FlashStorageTest, BufferedReadsEqualTheFile) {
    const std::string bytes = write_weights((1 << 20) + 4096);
    for (ReadEngine engine : {ReadEngine::Pread, ReadEngine::Auto}) {
        OPEN_OR_SKIP(storage, engine, false);
        EXPECT_EQ(storage->block_size(), 512);
        EXPECT_EQ(storage->describe().find("O_DIRECT"), std::string::npos) << storage->describe();
        expect_reads_match(*storage, bytes, 16, 7);
    }
}

TEST_F(FlashStorageTest, DescribeNamesPathEngineAndBlock) {
    write_weights(1 << 16);
    OPEN_OR_SKIP(storage, ReadEngine::Auto);
    const std::string text = storage->describe();
    EXPECT_EQ(text.rfind("file " + path_ + " (", 0), 0u) << text;
    EXPECT_NE(text.find("O_DIRECT, block " + std::to_string(storage->block_size()) + ")"), std::string::npos) << text;
    EXPECT_GE(storage->block_size(), 512);
    EXPECT_EQ(storage->block_size() & (storage->block_size() - 1), 0);
}

// The request contract every storage keeps.
void expect_request_contract(Storage& storage) {
    const int64_t block = storage.block_size();
    auto buffer = aligned_buffer(4 * block, block);
    auto read_one = [&](int64_t offset, int64_t length, void* into, int depth = 4) {
        const ReadRequest r{offset, length, into};
        return [&storage, r, depth] { storage.read(std::span(&r, 1), depth); };
    };
    expect_error(read_one(block + 1, block, buffer.get()), QJIT_ERROR_INVALID_ARGUMENT, {std::to_string(block + 1)});
    expect_error(read_one(2 * block, block - 1, buffer.get()), QJIT_ERROR_INVALID_ARGUMENT, {std::to_string(2 * block)});
    expect_error(read_one(3 * block, block, buffer.get() + 1), QJIT_ERROR_INVALID_ARGUMENT, {std::to_string(3 * block), "aligned"});
    expect_error(read_one(block, 0, buffer.get()), QJIT_ERROR_INVALID_ARGUMENT, {std::to_string(block)});
    expect_error(read_one(-block, block, buffer.get()), QJIT_ERROR_INVALID_ARGUMENT, {std::to_string(-block)});
    expect_error(read_one(0, block, buffer.get(), 0), QJIT_ERROR_INVALID_ARGUMENT, {"queue depth"});
    const int64_t end = storage.size() / block * block;
    expect_error(read_one(end, block, buffer.get()), QJIT_ERROR_IO, {"read past end of file", std::to_string(end)});
    expect_error(read_one(end - block, 2 * block, buffer.get()), QJIT_ERROR_IO,
                 {"read past end of file", std::to_string(end - block)});
    EXPECT_EQ(storage.counters().reads, 0);  // nothing was read
    storage.read({}, 1);                     // no requests: nothing to do
}

TEST_F(FlashStorageTest, BadRequestsGiveStatusesNamingTheOffset) {
    write_weights(1 << 16);
    for (ReadEngine engine : {ReadEngine::Pread, ReadEngine::IoUring}) {
        OPEN_OR_SKIP(storage, engine);
        SCOPED_TRACE(storage->describe());
        expect_request_contract(*storage);
    }
}

TEST_F(FlashStorageTest, FileTruncatedAfterOpeningIsAnIoError) {
    for (ReadEngine engine : {ReadEngine::Pread, ReadEngine::IoUring}) {
        write_weights(1 << 16);
        OPEN_OR_SKIP(storage, engine);
        SCOPED_TRACE(storage->describe());
        ASSERT_EQ(::truncate(path_.c_str(), 1 << 15), 0);
        auto buffer = aligned_buffer(1 << 14, storage->block_size());
        const ReadRequest r{(1 << 15) - 8192, 1 << 14, buffer.get()};  // its second half is gone
        expect_error([&] { storage->read(std::span(&r, 1), 8); }, QJIT_ERROR_IO, {"read past end of file", path_});
    }
}

TEST_F(FlashStorageTest, MissingFileIsAnIoErrorNamingThePath) {
    const std::string missing = (dir_ / "missing.bin").string();
    expect_error([&] { open_file_storage(missing); }, QJIT_ERROR_IO, {missing, std::strerror(ENOENT)});
    expect_error([&] { page_cache_fraction(missing); }, QJIT_ERROR_IO, {missing});
    expect_error([&] { drop_from_page_cache(missing); }, QJIT_ERROR_IO, {missing});
}

TEST(FlashStorage, MemoryStorageKeepsTheSameContract) {
    const std::string bytes = random_bytes((1 << 20) + 1000, 9);
    auto storage = make_memory_storage(bytes, 4096);
    EXPECT_EQ(storage->size(), int64_t(bytes.size()));
    EXPECT_EQ(storage->block_size(), 4096);
    EXPECT_EQ(storage->describe(), "memory (" + std::to_string(bytes.size()) + " bytes)");
    expect_request_contract(*storage);
    expect_reads_match(*storage, bytes, 1, 10);
    expect_reads_match(*storage, bytes, 64, 11);
    auto small_blocks = make_memory_storage(bytes);
    EXPECT_EQ(small_blocks->block_size(), 512);
    expect_reads_match(*small_blocks, bytes, 8, 12);
}

TEST_F(FlashStorageTest, DropFromPageCacheEvictsAWrittenFile) {
    write_weights(4 << 20);
    EXPECT_GT(page_cache_fraction(path_), 0.5);  // just written: cached
    const double left = drop_from_page_cache(path_);
    if (left > 0.05) {
        struct statfs info{};
        ASSERT_EQ(::statfs(path_.c_str(), &info), 0);
        constexpr long kTmpfs = 0x01021994, kOverlay = 0x794c7630;
        if (long(info.f_type) == kTmpfs || long(info.f_type) == kOverlay)
            GTEST_SKIP() << "this file system keeps " << left << " of the file cached (tmpfs or overlay)";
    }
    EXPECT_LE(left, 0.05);
    EXPECT_NEAR(page_cache_fraction(path_), left, 0.05);
    write_file(path_, "");
    EXPECT_EQ(page_cache_fraction(path_), 0.0);
}

TEST(FlashStorage, AlignedBufferIsAlignedAndRoundedUp) {
    for (int64_t alignment : {64, 512, 4096}) {
        auto buffer = aligned_buffer(100, alignment);
        EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.get()) % uint64_t(alignment), 0u);
        std::memset(buffer.get(), 1, size_t(alignment));  // the rounded-up size is usable (ASan checks)
    }
    expect_error([] { aligned_buffer(100, 3000); }, QJIT_ERROR_INVALID_ARGUMENT, {"3000"});
}

TEST(FlashStorage, FaultyStorageFailsAsTold) {
    const std::string bytes = random_bytes(1 << 16, 13);
    test::FaultyStorage storage(make_memory_storage(bytes, 4096));
    auto buffer = aligned_buffer(8192, 4096);
    const ReadRequest r{8192, 8192, buffer.get()};
    auto read = [&] { storage.read(std::span(&r, 1), 1); };

    storage.fail_on_call = 2;
    read();
    expect_error(read, QJIT_ERROR_IO, {"injected", "call 2"});
    read();
    storage.fail_on_call = 0;

    storage.fail_begin = 12000;
    storage.fail_end = 12001;
    expect_error(read, QJIT_ERROR_IO, {"injected", "8192"});
    storage.fail_end = 0;

    storage.truncate_at = 10000;
    expect_error(read, QJIT_ERROR_IO, {"read past end of file", "8192"});
    storage.truncate_at = -1;

    storage.corrupt_begin = 9000;
    storage.corrupt_end = 9001;
    read();
    for (int64_t i = 0; i < r.length; ++i)
        ASSERT_EQ(buffer[size_t(i)], uint8_t(bytes[size_t(r.offset + i)]) ^ (r.offset + i == 9000 ? 0xff : 0)) << i;
    EXPECT_EQ(storage.calls(), 6);
    EXPECT_EQ(storage.counters().reads, 3);
    EXPECT_EQ(storage.describe(), "faulty memory (65536 bytes)");
}

}  // namespace
}  // namespace qjit
