#include "base/directory.hpp"

#include <dirent.h>

#include <cstring>
#include <memory>

namespace qjit {

std::optional<std::vector<std::string>> list_directory(const std::string& directory) {
    const std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(directory.c_str()), ::closedir);
    if (!dir) return std::nullopt;
    std::vector<std::string> names;
    while (const dirent* entry = ::readdir(dir.get()))
        if (std::strcmp(entry->d_name, ".") != 0 && std::strcmp(entry->d_name, "..") != 0) names.emplace_back(entry->d_name);
    return names;
}

}  // namespace qjit
