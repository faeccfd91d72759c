// JsonFile: how a perf driver's -J file reaches the disk. PATH.tmp is opened when the flags are
// read, so a path that cannot be written stops the run before any collective, and the text is
// renamed into PATH only once it is complete, so a run that dies leaves no half-written PATH.
#pragma once

#include <cstdio>
#include <string>

namespace squeeze::perf {

class JsonFile {
 public:
  JsonFile() = default;
  JsonFile(const JsonFile&) = delete;
  JsonFile& operator=(const JsonFile&) = delete;
  ~JsonFile() { discard(); }

  /// Opens PATH.tmp for writing. On failure returns false with *error saying why (the errno
  /// text, or that PATH is a directory).
  bool open(const std::string& path, std::string* error);
  bool isOpen() const { return file_ != nullptr; }
  /// Writes text and a final newline to PATH.tmp and renames it to PATH.
  bool commit(const std::string& text, std::string* error);
  /// Closes and removes PATH.tmp, if open (a run that stops early writes no file).
  void discard();

 private:
  std::string path_, tmpPath_;
  FILE* file_ = nullptr;
};

}  // namespace squeeze::perf
