// The tuning database: for each (hardware fingerprint, kernel key), the best tiling found, how
// fast it ran and when it was measured. One YAML file shared by every process on the machine.
//
// File format: a comment line, then one YAML document per record, each opened by a line "---"
// and closed by a line "..." (the YAML document-end marker):
//
//     # qjit tuning database (tuner/tuning_db.hpp): one YAML document per record
//     ---
//     schema: 1
//     qjit_version: "0.1.0"
//     fingerprint: "x86_64 GenuineIntel ... avx512vnni L1d=48K L2=2M L3=105M cores=56"
//     kernel: "q4g128_asym_gemm_i8_avx512vnni K=4096 N=11008 m=1 threads=2"
//     tiling: "tu=3,mb=8,prefetch=4,ku=1,ksplit=1"
//     time_us: 41.5
//     gbps: 612.25
//     date: "2024-05-01T12:00:00Z"
//     ...
//
// Strings are always double-quoted (escaped on one line), so no line inside a record reads "---"
// or "...". The reader splits the text on those marker lines itself and parses each document
// alone: a record counts only when its closing "..." is present and every field parses, so a
// truncated or partly corrupt file still yields every complete, valid record. Anything else
// (garbage, an unclosed document, a bad field) marks the file damaged: it is renamed to
// PATH.corrupt-<unix time>, warning() says so, and the records recovered from it are written back
// by the next store().
//
// Locking protocol: writers take flock(LOCK_EX) on PATH.lock (created beside the database and
// never removed), re-read the database under the lock, merge (a new record replaces the one with
// the same fingerprint and kernel key), write PATH.tmp-<pid> in the same directory, fsync it and
// rename it over PATH. Readers need no lock: rename makes every version of PATH complete. Only
// setting a damaged file aside takes the lock (and re-reads first, in case a writer fixed it).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "qjit/qjit.h"

namespace qjit {

// Bumped when the record layout changes; records of another schema are kept but never used.
inline constexpr int kTuningSchemaVersion = 1;

struct TuningRecord {
    int schema_version = kTuningSchemaVersion;
    std::string qjit_version = ::qjit_version();  // the build that measured it
    std::string fingerprint;   // hardware fingerprint of the machine it was measured on
    std::string kernel_key;    // kernel, shape, batch and threads
    std::string tiling;        // e.g. "tu=3,mb=8,prefetch=4,ku=1,ksplit=1"
    double time_us = 0.0;      // measured time of one call, microseconds
    double gbps = 0.0;         // weight bytes streamed per second, GB/s
    std::string date;          // ISO 8601 UTC, e.g. utc_timestamp()

    bool operator==(const TuningRecord&) const = default;
};

// A table of `records`, one line each, those measured on `this_fingerprint` marked with '*'.
std::string format_listing(const std::vector<TuningRecord>& records, const std::string& this_fingerprint);

// A database file's text as records: every complete, valid document in file order, and the number
// of damaged parts (unclosed or invalid documents, stray lines). Never throws.
struct ParsedTuningDb {
    std::vector<TuningRecord> records;
    int damaged = 0;
};
ParsedTuningDb parse_tuning_db(const std::string& text);

// The current time as ISO 8601 UTC ("2024-05-01T12:00:00Z").
std::string utc_timestamp();

class TuningDb {
public:
    // Loads `path` (a missing file is an empty database). Never throws for a damaged file.
    explicit TuningDb(std::string path);

    // Re-reads the file. A damaged file is set aside and reported through warning().
    // Throws QJIT_ERROR_IO when the file exists but cannot be read.
    void load();

    // The record for this machine and kernel, measured by this qjit version and schema.
    std::optional<TuningRecord> find(const std::string& fingerprint, const std::string& kernel_key) const;

    // Merges the records into the file under the lock (see above) and refreshes the in-memory view
    // with what other processes wrote meanwhile. Creates the parent directory if missing. Throws
    // QJIT_ERROR_IO naming the path when the write fails; the file is then left as it was.
    void store(const TuningRecord& record);
    void store(const std::vector<TuningRecord>& records);

    // Every record as of the last load() or store(), other machines' included, sorted by
    // fingerprint then kernel key.
    std::vector<TuningRecord> records() const;

    // Writes records() to `path`, replacing that file (atomically, under its lock).
    void export_to(const std::string& path) const;
    // Merges the records of the database at `path` into this one (theirs win on equal keys).
    // Throws QJIT_ERROR_IO when it cannot be read, QJIT_ERROR_CORRUPT_DATA when it is damaged.
    void import_from(const std::string& path);

    // What went wrong with the file at the last load() or store(), or empty.
    const std::string& warning() const { return warning_; }
    const std::string& path() const { return path_; }

private:
    using Key = std::pair<std::string, std::string>;  // fingerprint, kernel key

    std::vector<TuningRecord> read_and_set_aside();  // the lock is held
    void replace_view(const std::vector<TuningRecord>& on_disk);

    std::string path_;
    std::map<Key, TuningRecord> records_;
    std::vector<TuningRecord> recovered_;  // from a file set aside, not yet written back
    std::string warning_;
};

}  // namespace qjit
