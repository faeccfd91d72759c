// The main() a fuzz target gets when it is built without libFuzzer (g++, the normal test suite):
// runs LLVMFuzzerInitialize when the target defines it, then LLVMFuzzerTestOneInput once on
// every file of the directories (or files) given, and prints how many inputs ran. A target that
// breaks its contract aborts (tests/fuzz/fuzz_util.h), so a corpus input that finds a bug fails
// the test. An argument that holds no input fails too: a test that ran nothing proves nothing.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace fs = std::filesystem;

namespace {

std::vector<uint8_t> readFile(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s CORPUS_DIR_OR_FILE...\n"
                 "Runs the fuzz target once on every input (what libFuzzer would, without "
                 "fuzzing).\n",
                 argv[0]);
    return 2;
  }
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  size_t total = 0;
  for (int a = 1; a < argc; ++a) {
    const fs::path arg = argv[a];
    std::vector<fs::path> inputs;
    std::error_code ec;
    if (fs::is_directory(arg, ec)) {
      for (const auto& entry : fs::directory_iterator(arg))
        if (entry.is_regular_file()) inputs.push_back(entry.path());
    } else if (fs::is_regular_file(arg, ec)) {
      inputs.push_back(arg);
    }
    if (inputs.empty()) {
      std::fprintf(stderr, "%s: no inputs in %s (a missing or empty corpus)\n", argv[0], argv[a]);
      return 1;
    }
    std::sort(inputs.begin(), inputs.end());  // the same order on every run
    for (const fs::path& p : inputs) {
      const std::vector<uint8_t> bytes = readFile(p);
      // An exact-size heap copy, as libFuzzer passes it: ASan builds see a read past the end.
      std::vector<uint8_t> copy(bytes);
      static const uint8_t kNone = 0;  // libFuzzer never passes null, even for an empty input
      LLVMFuzzerTestOneInput(copy.empty() ? &kNone : copy.data(), copy.size());
      ++total;
    }
    std::printf("%s: %zu inputs\n", argv[a], inputs.size());
  }
  std::printf("ran %zu inputs, no contract broken\n", total);
  return 0;
}
