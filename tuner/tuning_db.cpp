// The tuning database; the file format and the locking protocol are described in tuning_db.hpp.
#include "tuner/tuning_db.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include "tuner/legacy_kernel_key.hpp"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "base/directory.hpp"
#include "base/error.hpp"

namespace qjit {
namespace {

constexpr const char* kHeader = "# qjit tuning database (tuner/tuning_db.hpp): one YAML document per record\n";

// ---- the text format ----

std::string format_number(double value) {
    if (std::isnan(value)) return ".nan";
    if (std::isinf(value)) return value > 0 ? ".inf" : "-.inf";
    char buffer[64];
    auto result = std::to_chars(buffer, buffer + sizeof buffer, value);  // shortest exact form
    return std::string(buffer, result.ptr);
}

std::string emit_record(const TuningRecord& r) {
    YAML::Emitter out;
    out << YAML::BeginMap;
    out << YAML::Key << "schema" << YAML::Value << r.schema_version;
    out << YAML::Key << "qjit_version" << YAML::Value << YAML::DoubleQuoted << r.qjit_version;
    out << YAML::Key << "fingerprint" << YAML::Value << YAML::DoubleQuoted << r.fingerprint;
    out << YAML::Key << "kernel" << YAML::Value << YAML::DoubleQuoted << r.kernel_key;
    out << YAML::Key << "tiling" << YAML::Value << YAML::DoubleQuoted << r.tiling;
    out << YAML::Key << "time_us" << YAML::Value << format_number(r.time_us);
    out << YAML::Key << "gbps" << YAML::Value << format_number(r.gbps);
    out << YAML::Key << "date" << YAML::Value << YAML::DoubleQuoted << r.date;
    out << YAML::EndMap;
    return concat("---\n", out.c_str(), "\n...\n");
}

std::string emit_database(const std::vector<TuningRecord>& records) {
    std::string text = kHeader;
    for (const TuningRecord& r : records) text += emit_record(r);
    return text;
}

// One document's text (without its marker lines) as a record, or nothing when any field is
// missing or malformed.
std::optional<TuningRecord> parse_record(const std::string& document) {
    try {
        YAML::Node node = YAML::Load(document);
        if (!node.IsMap()) return std::nullopt;
        TuningRecord r;
        r.schema_version = node["schema"].as<int>();
        r.qjit_version = node["qjit_version"].as<std::string>();
        r.fingerprint = node["fingerprint"].as<std::string>();
        r.kernel_key = node["kernel"].as<std::string>();
        if (std::optional<std::string> today = migrated_kernel_key(r.kernel_key)) r.kernel_key = *today;
        r.tiling = node["tiling"].as<std::string>();
        r.time_us = node["time_us"].as<double>();
        r.gbps = node["gbps"].as<double>();
        r.date = node["date"].as<std::string>();
        return r;
    } catch (const YAML::Exception&) {
        return std::nullopt;
    }
}

}  // namespace

// Splits on the marker lines "---" and "..." and parses each closed document alone. Outside a
// document only blank lines and comments are expected.
ParsedTuningDb parse_tuning_db(const std::string& text) {
    ParsedTuningDb parsed;
    std::optional<std::string> document;  // set while inside "---" ... "..."
    for (size_t begin = 0; begin < text.size();) {
        size_t end = std::min(text.find('\n', begin), text.size());
        std::string line = text.substr(begin, end - begin);
        begin = end + 1;
        if (line == "---") {
            if (document) ++parsed.damaged;  // the previous one was never closed
            document.emplace();
        } else if (document && line == "...") {
            if (auto record = parse_record(*document)) parsed.records.push_back(std::move(*record));
            else ++parsed.damaged;
            document.reset();
        } else if (document) {
            *document += line + "\n";
        } else if (line.find_first_not_of(" \t\r") != std::string::npos && line[0] != '#') {
            ++parsed.damaged;
        }
    }
    if (document) ++parsed.damaged;  // truncated inside the last document
    return parsed;
}

namespace {

// ---- files ----

// The whole file, or nothing when it does not exist.
std::optional<std::string> read_text(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) return std::nullopt;
        fail(QJIT_ERROR_IO, "cannot open tuning database ", path, ": ", std::strerror(errno));
    }
    std::string text;
    char buffer[65536];
    for (;;) {
        ssize_t n = ::read(fd, buffer, sizeof buffer);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            int error = errno;
            ::close(fd);
            fail(QJIT_ERROR_IO, "cannot read tuning database ", path, ": ", std::strerror(error));
        }
        if (n == 0) break;
        text.append(buffer, size_t(n));
    }
    ::close(fd);
    return text;
}

// Removes PATH.tmp-<pid> files that writers killed mid-write left. Called under the database's
// lock, which every writer holds while its temporary file exists, so any such file is stale.
void remove_stale_temporaries(const std::string& path) {
    const std::filesystem::path database(path);
    const std::string prefix = database.filename().string() + ".tmp-";
    const std::filesystem::path directory = database.has_parent_path() ? database.parent_path() : ".";
    std::error_code error;
    for (const std::string& name : list_directory(directory.string()).value_or(std::vector<std::string>{}))
        if (name.rfind(prefix, 0) == 0) std::filesystem::remove(directory / name, error);
}

// Writes `text` to a temporary file beside `path`, fsyncs it and renames it over `path`; on any
// failure removes the temporary file and throws, leaving `path` untouched. The caller holds the
// database's lock.
void write_atomically(const std::string& path, const std::string& text) {
    remove_stale_temporaries(path);
    std::string temporary = concat(path, ".tmp-", ::getpid());
    int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) fail(QJIT_ERROR_IO, "cannot write tuning database ", path, ": ", std::strerror(errno));
    int error = 0;
    for (size_t done = 0; done < text.size() && error == 0;) {
        ssize_t n = ::write(fd, text.data() + done, text.size() - done);
        if (n >= 0) done += size_t(n);
        else if (errno != EINTR) error = errno;
    }
    if (error == 0 && ::fsync(fd) != 0) error = errno;
    if (::close(fd) != 0 && error == 0) error = errno;
    if (error == 0 && std::rename(temporary.c_str(), path.c_str()) != 0) error = errno;
    if (error != 0) {
        ::unlink(temporary.c_str());
        fail(QJIT_ERROR_IO, "cannot write tuning database ", path, ": ", std::strerror(error));
    }
    std::string directory = std::filesystem::path(path).parent_path().string();
    int dir_fd = ::open(directory.empty() ? "." : directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd >= 0) {  // make the rename itself durable; best effort
        ::fsync(dir_fd);
        ::close(dir_fd);
    }
}

// An exclusive flock on PATH.lock for the object's lifetime; creates the parent directory.
class FileLock {
public:
    explicit FileLock(const std::string& path) {
        std::filesystem::path parent = std::filesystem::path(path).parent_path();
        try {  // the throwing form: the error_code one is noexcept yet allocates
            if (!parent.empty()) std::filesystem::create_directories(parent);
        } catch (const std::filesystem::filesystem_error&) {
            // opening the lock file below reports the problem
        }
        std::string lock_path = path + ".lock";
        fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd_ < 0) fail(QJIT_ERROR_IO, "cannot create lock file ", lock_path, ": ", std::strerror(errno));
        int result;
        do result = ::flock(fd_, LOCK_EX);
        while (result != 0 && errno == EINTR);
        if (result != 0) {
            int error = errno;
            ::close(fd_);
            fail(QJIT_ERROR_IO, "cannot lock ", lock_path, ": ", std::strerror(error));
        }
    }
    ~FileLock() { ::close(fd_); }  // closing releases the lock
    FileLock(const FileLock&) = delete;
    FileLock& operator=(const FileLock&) = delete;

private:
    int fd_;
};

ParsedTuningDb read_database(const std::string& path) {
    std::optional<std::string> text = read_text(path);
    return text ? parse_tuning_db(*text) : ParsedTuningDb{};
}

}  // namespace

std::string utc_timestamp() {
    std::time_t now = std::time(nullptr);
    std::tm utc{};
    ::gmtime_r(&now, &utc);
    char buffer[32];
    std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", &utc);
    return buffer;
}

TuningDb::TuningDb(std::string path) : path_(std::move(path)) { load(); }

void TuningDb::load() {
    warning_.clear();
    ParsedTuningDb parsed = read_database(path_);
    if (parsed.damaged == 0) return replace_view(parsed.records);
    try {
        FileLock lock(path_);
        replace_view(read_and_set_aside());
    } catch (const Error& e) {  // cannot take the lock (read-only directory): use what was read
        warning_ = concat("tuning database ", path_, " is damaged; ", parsed.records.size(),
                          " record(s) recovered; ", e.what());
        replace_view(parsed.records);
    }
}

std::vector<TuningRecord> TuningDb::read_and_set_aside() {
    ParsedTuningDb parsed = read_database(path_);
    if (parsed.damaged == 0) return parsed.records;
    std::string aside = concat(path_, ".corrupt-", std::time(nullptr));
    bool moved = std::rename(path_.c_str(), aside.c_str()) == 0;
    warning_ = concat("tuning database ", path_, ": ", parsed.damaged, " damaged or truncated part(s) skipped, ",
                      parsed.records.size(), " record(s) recovered; ",
                      moved ? "the file was moved to " + aside : concat("could not move it aside: ", std::strerror(errno)));
    recovered_.insert(recovered_.end(), parsed.records.begin(), parsed.records.end());
    return parsed.records;
}

void TuningDb::replace_view(const std::vector<TuningRecord>& on_disk) {
    records_.clear();
    for (const TuningRecord& r : on_disk) records_.insert_or_assign(Key(r.fingerprint, r.kernel_key), r);
    for (const TuningRecord& r : recovered_) records_.try_emplace(Key(r.fingerprint, r.kernel_key), r);
}

std::optional<TuningRecord> TuningDb::find(const std::string& fingerprint, const std::string& kernel_key) const {
    auto it = records_.find(Key(fingerprint, kernel_key));
    if (it == records_.end()) return std::nullopt;
    const TuningRecord& r = it->second;
    if (r.schema_version != kTuningSchemaVersion || r.qjit_version != qjit_version()) return std::nullopt;
    return r;
}

void TuningDb::store(const TuningRecord& record) { store(std::vector<TuningRecord>{record}); }

void TuningDb::store(const std::vector<TuningRecord>& records) {
    FileLock lock(path_);
    warning_.clear();
    std::vector<TuningRecord> on_disk = read_and_set_aside();
    replace_view(on_disk);  // what other processes wrote, plus recovered records not on disk
    std::map<Key, TuningRecord> merged = records_;
    for (const TuningRecord& r : records) merged.insert_or_assign(Key(r.fingerprint, r.kernel_key), r);
    std::vector<TuningRecord> all;
    for (const auto& entry : merged) all.push_back(entry.second);
    write_atomically(path_, emit_database(all));
    recovered_.clear();
    records_ = std::move(merged);
}

std::string format_listing(const std::vector<TuningRecord>& records, const std::string& this_fingerprint) {
    std::string text;
    char line[512];
    for (const TuningRecord& r : records) {
        std::snprintf(line, sizeof line, "%c %-62s %-36s %10.1f %8.2f  %s  %s  qjit %s%s\n",
                      r.fingerprint == this_fingerprint ? '*' : ' ', r.kernel_key.c_str(), r.tiling.c_str(),
                      r.time_us, r.gbps, r.date.c_str(), r.fingerprint.c_str(), r.qjit_version.c_str(),
                      r.schema_version == kTuningSchemaVersion ? "" : " (other schema)");
        text += line;
    }
    return text;
}

std::vector<TuningRecord> TuningDb::records() const {
    std::vector<TuningRecord> all;
    for (const auto& entry : records_) all.push_back(entry.second);
    return all;
}

void TuningDb::export_to(const std::string& path) const {
    FileLock lock(path);
    write_atomically(path, emit_database(records()));
}

void TuningDb::import_from(const std::string& path) {
    std::optional<std::string> text = read_text(path);
    if (!text) fail(QJIT_ERROR_IO, "cannot open tuning database ", path, ": ", std::strerror(ENOENT));
    ParsedTuningDb parsed = parse_tuning_db(*text);
    if (parsed.damaged > 0)
        fail(QJIT_ERROR_CORRUPT_DATA, "tuning database ", path, " is damaged (", parsed.damaged,
             " bad or truncated part(s)); nothing imported");
    store(parsed.records);
}

}  // namespace qjit
