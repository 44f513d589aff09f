// The tuning database: round trip, replacement, damaged and truncated files, concurrent writers,
// failed writes, export and import.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "child_process.hpp"
#include "test_support.hpp"
#include "tuner/legacy_kernel_key.hpp"
#include "tuner/tuning_db.hpp"

namespace fs = std::filesystem;

namespace qjit {

void PrintTo(const TuningRecord& r, std::ostream* out) {
    *out << "{" << r.schema_version << ", " << r.qjit_version << ", " << r.fingerprint << ", " << r.kernel_key
         << ", " << r.tiling << ", " << r.time_us << " us, " << r.gbps << " GB/s, " << r.date << "}";
}

namespace {

using test::files_starting;
using test::spawn;
using test::wait_status;
using test::read_file;
using test::write_file;

TuningRecord make_record(const std::string& fingerprint, int n, const std::string& tiling = "tu=3,mb=8,prefetch=4,ku=1,ksplit=1") {
    TuningRecord r;
    r.fingerprint = fingerprint;
    r.kernel_key = concat("q4g128_asym_gemm_i8_avx512vnni K=4096 N=", 1000 + n, " m=1 threads=2");
    r.tiling = tiling;
    r.time_us = 10.25 + n;
    r.gbps = 0.1 * n + 1.0 / 3.0;  // needs every digit to round-trip
    r.date = "2024-05-01T12:00:00Z";
    return r;
}

class TuningDbTest : public ::testing::Test {
protected:
    void SetUp() override {
        char pattern[] = "/tmp/qjit_tuning_db_XXXXXX";
        ASSERT_NE(::mkdtemp(pattern), nullptr);
        dir_ = pattern;
        path_ = (dir_ / "cache" / "qjit" / "tuning.yaml").string();  // parent folders do not exist yet
    }
    void TearDown() override { fs::remove_all(dir_); }

    fs::path dir_;
    std::string path_;
};

TEST_F(TuningDbTest, TuningDbMissingFileIsEmpty) {
    TuningDb db(path_);
    EXPECT_TRUE(db.records().empty());
    EXPECT_TRUE(db.warning().empty());
    EXPECT_FALSE(db.find("cpu-a", "anything"));
}

TEST_F(TuningDbTest, TuningDbRoundTripKeepsOtherHardwareWithoutUsingIt) {
    std::vector<TuningRecord> mine = {make_record("cpu-a", 1), make_record("cpu-a", 2), make_record("cpu-a", 3)};
    TuningRecord foreign = make_record("cpu-b", 4);
    TuningRecord old_version = make_record("cpu-a", 5);
    old_version.qjit_version = "0.0.1";
    {
        TuningDb db(path_);
        db.store(mine);
        db.store(foreign);
        db.store(old_version);
    }
    TuningDb db(path_);
    EXPECT_TRUE(db.warning().empty()) << db.warning();
    EXPECT_EQ(db.records().size(), 5u);
    for (const TuningRecord& r : mine) {
        std::optional<TuningRecord> found = db.find("cpu-a", r.kernel_key);
        ASSERT_TRUE(found) << r.kernel_key;
        EXPECT_EQ(*found, r);  // every field, doubles exactly
    }
    EXPECT_FALSE(db.find("cpu-a", foreign.kernel_key));      // measured elsewhere: kept, not used
    EXPECT_FALSE(db.find("cpu-b", mine[0].kernel_key));
    EXPECT_FALSE(db.find("cpu-a", old_version.kernel_key));  // another qjit version: kept, not used
    EXPECT_EQ(db.records().back(), foreign);  // sorted by fingerprint, then kernel key
}

// Writers killed mid-write leave PATH.tmp-<pid> files; the next writer removes them (it holds the
// lock every writer holds while its temporary exists, so they are stale).
TEST_F(TuningDbTest, TuningDbNextWriterRemovesStaleTemporaryFiles) {
    TuningDb(path_).store(make_record("cpu-a", 1));
    for (const char* pid : {"12345", "999999"}) std::ofstream(path_ + ".tmp-" + pid) << "half a database";
    std::ofstream(path_ + ".unrelated") << "kept";
    TuningDb db(path_);
    db.store(make_record("cpu-a", 2));
    for (const auto& entry : fs::directory_iterator(fs::path(path_).parent_path()))
        EXPECT_EQ(entry.path().filename().string().find(".tmp-"), std::string::npos) << entry.path();
    EXPECT_TRUE(fs::exists(path_ + ".unrelated"));
    EXPECT_EQ(TuningDb(path_).records().size(), 2u);
}

// Writers SIGKILLed mid-write, round after round, while another process stores a record: no record
// that a finished writer stored is lost, the file is never left damaged, and the next writer
// removes the temporaries the killed ones left.
TEST_F(TuningDbTest, TuningDbWritersKilledMidWriteLoseNothingStored) {
    TuningDb(path_).store(make_record("base", 0));
    constexpr int kRounds = 25;
    for (int round = 0; round < kRounds; ++round) {
        const pid_t victim = spawn([&] {
            TuningDb db(path_);
            for (int i = 0;; ++i) db.store(make_record("victim", i % 40));
            return 0;
        });
        const pid_t survivor = spawn([&] {
            TuningDb(path_).store(make_record("survivor", round));
            return 0;
        });
        ::usleep(useconds_t(500 + 200 * round));  // kill at a different point of a write each round
        ::kill(victim, SIGKILL);
        EXPECT_EQ(wait_status(survivor), 0) << "round " << round;
        EXPECT_EQ(wait_status(victim), 128 + SIGKILL) << "round " << round;
    }
    TuningDb db(path_);
    EXPECT_TRUE(db.warning().empty()) << db.warning();
    EXPECT_TRUE(db.find("base", make_record("base", 0).kernel_key));
    for (int round = 0; round < kRounds; ++round)
        EXPECT_TRUE(db.find("survivor", make_record("survivor", round).kernel_key)) << "round " << round;
    db.store(make_record("final", 1));
    for (const auto& entry : fs::directory_iterator(fs::path(path_).parent_path()))
        EXPECT_EQ(entry.path().filename().string().find(".tmp-"), std::string::npos) << entry.path();
}

// A directory is not a database: the context says so when it is created.
TEST_F(TuningDbTest, TuningDbPathThatIsADirectoryIsRefused) {
    fs::create_directories(dir_ / "a_directory");
    qjit_context_options options;
    qjit_context_options_init(&options);
    const std::string directory = (dir_ / "a_directory").string();
    options.tuning_db_path = directory.c_str();
    qjit_context* context = nullptr;
    EXPECT_EQ(qjit_context_create(&options, &context), QJIT_ERROR_IO);
    EXPECT_NE(std::string(qjit_last_error()).find("is a directory"), std::string::npos) << qjit_last_error();
    EXPECT_EQ(context, nullptr);
}

TEST_F(TuningDbTest, TuningDbStoreReplacesTheSameKey) {
    TuningDb db(path_);
    db.store({make_record("cpu-a", 1), make_record("cpu-a", 2)});
    TuningRecord better = make_record("cpu-a", 1, "tu=4,mb=4,prefetch=8,ku=1,ksplit=2");
    better.time_us = 7.5;
    db.store(better);
    EXPECT_EQ(*db.find("cpu-a", better.kernel_key), better);
    TuningDb reloaded(path_);
    EXPECT_EQ(reloaded.records().size(), 2u);
    EXPECT_EQ(*reloaded.find("cpu-a", better.kernel_key), better);
}

TEST_F(TuningDbTest, TuningDbCorruptFileIsSetAsideAndValidRecordsKept) {
    std::vector<TuningRecord> records = {make_record("cpu-a", 1), make_record("cpu-a", 2), make_record("cpu-a", 3)};
    TuningDb(path_).store(records);
    std::string text = read_file(path_);
    // Garbage bytes over the middle of the second record, and a stray line between documents.
    size_t second = text.find("K=4096 N=1002");
    ASSERT_NE(second, std::string::npos);
    text.replace(second, 20, std::string("\x00\xff\x01{[: garbage \"", 16));
    text.insert(text.rfind("---\n"), "\x7f\x80 not yaml at all\n");
    write_file(path_, text);

    TuningDb db(path_);
    EXPECT_NE(db.warning().find(path_), std::string::npos) << db.warning();
    EXPECT_FALSE(fs::exists(path_));
    EXPECT_EQ(files_starting(fs::path(path_).parent_path(), "tuning.yaml.corrupt-").size(), 1u);
    EXPECT_EQ(db.records().size(), 2u);
    EXPECT_TRUE(db.find("cpu-a", records[0].kernel_key));
    EXPECT_FALSE(db.find("cpu-a", records[1].kernel_key));
    EXPECT_TRUE(db.find("cpu-a", records[2].kernel_key));

    db.store(make_record("cpu-a", 9));  // writes the recovered records back
    TuningDb reloaded(path_);
    EXPECT_TRUE(reloaded.warning().empty()) << reloaded.warning();
    EXPECT_EQ(reloaded.records().size(), 3u);
    EXPECT_EQ(*reloaded.find("cpu-a", records[2].kernel_key), records[2]);
}

TEST_F(TuningDbTest, TuningDbTruncatedAtEveryOffsetKeepsCompleteRecords) {
    std::vector<TuningRecord> records = {make_record("cpu-a", 1), make_record("cpu-b", 2), make_record("cpu-a", 3)};
    TuningDb(path_).store(records);
    records = TuningDb(path_).records();  // in file order
    const std::string text = read_file(path_);
    std::vector<size_t> ends;  // offset just past each record's closing "..."
    for (size_t at = text.find("\n...\n"); at != std::string::npos; at = text.find("\n...\n", at + 1))
        ends.push_back(at + 4);
    ASSERT_EQ(ends.size(), records.size());
    const fs::path folder = fs::path(path_).parent_path();

    for (size_t cut = 0; cut <= text.size(); ++cut) {
        write_file(path_, text.substr(0, cut));
        TuningDb db(path_);
        size_t complete = 0;
        while (complete < ends.size() && ends[complete] <= cut) ++complete;
        std::vector<TuningRecord> kept = db.records();
        ASSERT_EQ(kept.size(), complete) << "cut at " << cut;
        for (size_t i = 0; i < complete; ++i)
            EXPECT_NE(std::find(kept.begin(), kept.end(), records[i]), kept.end()) << "cut at " << cut;
        // Damaged exactly when the cut leaves more than blank lines and the header comment after
        // the last complete record; a damaged file is moved aside.
        std::istringstream tail(text.substr(0, cut).substr(complete ? ends[complete - 1] : 0));
        bool damaged = false;
        for (std::string line; std::getline(tail, line);) damaged |= !line.empty() && line[0] != '#';
        EXPECT_EQ(!db.warning().empty(), damaged) << "cut at " << cut << ": " << db.warning();
        EXPECT_EQ(fs::exists(path_), !damaged) << "cut at " << cut;
        for (const fs::path& aside : files_starting(folder, "tuning.yaml.corrupt-")) fs::remove(aside);
    }
}

TEST_F(TuningDbTest, TuningDbConcurrentWritersKeepEveryRecord) {
    constexpr int kPerProcess = 40;
    auto writer = [&](const std::string& fingerprint) {
        return spawn([&, fingerprint] {
            TuningDb db(path_);
            for (int i = 0; i < kPerProcess; ++i) db.store(make_record(fingerprint, i));
            return 0;
        });
    };
    pid_t a = writer("cpu-a");
    pid_t b = writer("cpu-b");
    ASSERT_EQ(wait_status(a), 0);
    ASSERT_EQ(wait_status(b), 0);

    TuningDb db(path_);
    EXPECT_TRUE(db.warning().empty()) << db.warning();
    EXPECT_EQ(db.records().size(), size_t(2 * kPerProcess));
    for (int i = 0; i < kPerProcess; ++i) {
        EXPECT_EQ(*db.find("cpu-a", make_record("cpu-a", i).kernel_key), make_record("cpu-a", i));
        EXPECT_EQ(*db.find("cpu-b", make_record("cpu-b", i).kernel_key), make_record("cpu-b", i));
    }
    EXPECT_TRUE(files_starting(fs::path(path_).parent_path(), "tuning.yaml.tmp").empty());
}

TEST_F(TuningDbTest, TuningDbFailedWriteLeavesTheFileIntact) {
    TuningDb(path_).store({make_record("cpu-a", 1), make_record("cpu-a", 2)});
    const std::string before = read_file(path_);

    pid_t child = spawn([&] {
        ::signal(SIGXFSZ, SIG_IGN);
        rlimit limit{64, 64};  // files may not grow past 64 bytes: the write fails with EFBIG
        ::setrlimit(RLIMIT_FSIZE, &limit);
        TuningDb db(path_);
        try {
            db.store(make_record("cpu-a", 3));
        } catch (const Error& e) {
            bool named = std::string(e.what()).find(path_) != std::string::npos;
            return e.status() == QJIT_ERROR_IO && named ? 0 : 2;
        }
        return 3;  // the write should have failed
    });
    ASSERT_EQ(wait_status(child), 0);

    EXPECT_EQ(read_file(path_), before);
    EXPECT_TRUE(files_starting(fs::path(path_).parent_path(), "tuning.yaml.tmp").empty());
    EXPECT_EQ(TuningDb(path_).records().size(), 2u);
}

// A database in a folder this process may not write: it is still read, a store fails with an I/O
// error naming the file, and the file stays as it was. Twice: with the lock file as its first
// writer left it (not ours to open), and with a lock file anyone may open, so that the temporary
// file is what cannot be made.
TEST_F(TuningDbTest, TuningDbReadOnlyFolderKeepsTheFile) {
    TuningDb(path_).store({make_record("cpu-a", 1), make_record("cpu-a", 2)});
    const std::string before = read_file(path_);
    const fs::path folder = fs::path(path_).parent_path();
    ::chmod(dir_.c_str(), 0755);  // mkdtemp made it 0700
    for (const bool lock_open_to_all : {false, true}) {
        if (lock_open_to_all) ::chmod((path_ + ".lock").c_str(), 0666);
        ::chmod(folder.c_str(), 0555);
        const int status = test::run_unprivileged([&] {
            TuningDb db(path_);
            if (db.records().size() != 2) return 2;
            try {
                db.store(make_record("cpu-a", 3));
            } catch (const Error& e) {
                return e.status() == QJIT_ERROR_IO && std::string(e.what()).find(path_) != std::string::npos ? 0 : 3;
            }
            return 4;  // the store should have failed
        });
        ::chmod(folder.c_str(), 0755);
        if (status == test::kCannotDropRoot) GTEST_SKIP() << "cannot run a child without root's rights";
        EXPECT_EQ(status, 0) << "lock open to all: " << lock_open_to_all;
        EXPECT_EQ(read_file(path_), before);
        EXPECT_TRUE(files_starting(folder, "tuning.yaml.tmp").empty());
    }
}

TEST_F(TuningDbTest, TuningDbExportAndImportMerge) {
    TuningDb source(path_);
    source.store({make_record("cpu-a", 1), make_record("cpu-a", 2)});
    const std::string exported = (dir_ / "exported.yaml").string();
    source.export_to(exported);
    EXPECT_EQ(TuningDb(exported).records(), source.records());

    TuningDb target((dir_ / "other.yaml").string());
    target.store({make_record("cpu-a", 1, "tu=1,mb=1,prefetch=0,ku=1,ksplit=1"), make_record("cpu-b", 3)});
    target.import_from(exported);
    EXPECT_EQ(target.records().size(), 3u);
    EXPECT_EQ(*target.find("cpu-a", make_record("cpu-a", 1).kernel_key), make_record("cpu-a", 1));  // imported wins
    EXPECT_EQ(TuningDb(target.path()).records(), target.records());

    try {
        target.import_from((dir_ / "missing.yaml").string());
        ADD_FAILURE() << "importing a missing file should throw";
    } catch (const Error& e) {
        EXPECT_EQ(e.status(), QJIT_ERROR_IO);
    }
    write_file(dir_ / "bad.yaml", "---\nschema: [\n...\n");
    try {
        target.import_from((dir_ / "bad.yaml").string());
        ADD_FAILURE() << "importing a damaged file should throw";
    } catch (const Error& e) {
        EXPECT_EQ(e.status(), QJIT_ERROR_CORRUPT_DATA);
    }
    EXPECT_EQ(target.records().size(), 3u);
}

// Keys written before names started with the format read in today's form, and hit.
TEST(LegacyKernelKey, OldFormsMapToTodays) {
    EXPECT_EQ(migrated_kernel_key("gemm_q4g128_asym_i8_avx512vnni K=4096 N=11008 m=1 threads=2"),
              "q4g128_asym_gemm_i8_avx512vnni K=4096 N=11008 m=1 threads=2");
    EXPECT_EQ(migrated_kernel_key("gemm_q3g64_sym_f32_avx2_s32 K=172 N=64 m=16 threads=1"),
              "q3g64_sym_s32_gemm_f32_avx2 K=172 N=64 m=16 threads=1");
    // One group over the column was named by its rows rounded up to 32.
    EXPECT_EQ(migrated_kernel_key("gemm_q8g4096_sym_f32_avx512vnni K=4096 N=64 m=1 threads=2"),
              "q8col_sym_gemm_f32_avx512vnni K=4096 N=64 m=1 threads=2");
    EXPECT_EQ(migrated_kernel_key("gemm_q4g192_asym_i8_avx2vnni K=172 N=64 m=1 threads=2"),
              "q4col_asym_gemm_i8_avx2vnni K=172 N=64 m=1 threads=2");
    EXPECT_EQ(migrated_kernel_key("cuda_q4g128_asym_f16_sm90 K=4096 N=11008 m=16"),
              "q4g128_asym_cuda_f16_sm90 K=4096 N=11008 m=16");
    EXPECT_EQ(migrated_kernel_key("cuda_q3col_sym_bf16_s32_sm80 K=4096 N=64 m=1"),
              "q3col_sym_s32_cuda_bf16_sm80 K=4096 N=64 m=1");
    for (const char* today : {"q4g128_asym_gemm_i8_avx512vnni K=4096 N=11008 m=1 threads=2",
                              "q4g128_asym_cuda_f16_sm90 K=4096 N=11008 m=16", "anything"})
        EXPECT_FALSE(migrated_kernel_key(today).has_value()) << today;
}

TEST_F(TuningDbTest, OldKeysInAFileStillHit) {
    fs::create_directories(fs::path(path_).parent_path());
    write_file(path_, "# qjit tuning database (tuner/tuning_db.hpp): one YAML document per record\n"
                      "---\nschema: 1\nqjit_version: \"0.1.0\"\nfingerprint: \"cpu-a\"\n"
                      "kernel: \"gemm_q4g128_asym_i8_avx512vnni K=4096 N=11008 m=1 threads=2\"\n"
                      "tiling: \"tu=3,mb=8,prefetch=4,ku=1,ksplit=1\"\ntime_us: 41.5\ngbps: 20.5\n"
                      "date: \"2026-01-01T00:00:00Z\"\n...\n");
    TuningDb db(path_);
    EXPECT_TRUE(db.warning().empty()) << db.warning();
    const std::optional<TuningRecord> hit = db.find("cpu-a", "q4g128_asym_gemm_i8_avx512vnni K=4096 N=11008 m=1 threads=2");
    ASSERT_TRUE(hit.has_value());
    EXPECT_EQ(hit->tiling, "tu=3,mb=8,prefetch=4,ku=1,ksplit=1");
    db.store(make_record("cpu-a", 1));  // written back in today's form
    EXPECT_EQ(read_file(path_).find("gemm_q4g128"), std::string::npos);
    EXPECT_TRUE(TuningDb(path_).find("cpu-a", "q4g128_asym_gemm_i8_avx512vnni K=4096 N=11008 m=1 threads=2"));
}

}  // namespace
}  // namespace qjit
