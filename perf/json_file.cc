// The -J file's PATH.tmp and rename; see json_file.h.
#include "json_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

namespace squeeze::perf {

bool JsonFile::open(const std::string& path, std::string* error) {
  discard();
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    *error = "it is a directory";
    return false;
  }
  path_ = path;
  tmpPath_ = path + ".tmp";
  file_ = std::fopen(tmpPath_.c_str(), "w");
  if (!file_) {
    *error = std::strerror(errno);
    return false;
  }
  return true;
}

bool JsonFile::commit(const std::string& text, std::string* error) {
  if (!file_) {
    *error = "the file was not opened";
    return false;
  }
  bool ok = std::fwrite(text.data(), 1, text.size(), file_) == text.size() &&
            std::fputc('\n', file_) != EOF && std::fflush(file_) == 0;
  int err = ok ? 0 : errno;
  if (std::fclose(file_) != 0 && ok) {
    ok = false;
    err = errno;
  }
  file_ = nullptr;
  if (ok && std::rename(tmpPath_.c_str(), path_.c_str()) != 0) {
    err = errno;
    ok = false;
  }
  if (!ok) {
    *error = std::strerror(err);
    std::remove(tmpPath_.c_str());
  }
  return ok;
}

void JsonFile::discard() {
  if (!file_) return;
  std::fclose(file_);
  file_ = nullptr;
  std::remove(tmpPath_.c_str());
}

}  // namespace squeeze::perf
