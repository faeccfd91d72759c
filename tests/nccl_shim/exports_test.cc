// The shim exports every host-callable function NCCL's headers declare: nccl.h's (with their
// pnccl* profiling twins) and nccl_device.h's __host__ ones. A program linked against that NCCL
// (torch 2.x's libtorch_cuda.so links the device API's) otherwise fails to load with the shim in
// NCCL's place ("undefined symbol: ncclDevCommDestroy"). So the next NCCL header that adds a
// function fails here, naming it, instead of in a user's import. The headers are the toolkit's
// (SQZ_TEST_NCCL_INCLUDE); the shim (SQZ_TEST_NCCL_SHIM) is opened as the loader opens it, and
// each name looked up in its dynamic symbols.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

namespace {

std::string readFile(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The names in `text` of the functions `pattern` declares (its first group).
void collect(const std::string& text, const std::regex& pattern, std::set<std::string>& names) {
  for (std::sregex_iterator it(text.begin(), text.end(), pattern), end; it != end; ++it)
    names.insert((*it)[1]);
}

TEST(NcclShimExports, EveryHostFunctionOfTheToolkitsHeaders) {
  const char* include = std::getenv("SQZ_TEST_NCCL_INCLUDE");
  const char* shim = std::getenv("SQZ_TEST_NCCL_SHIM");
  ASSERT_TRUE(include && shim) << "set SQZ_TEST_NCCL_INCLUDE and SQZ_TEST_NCCL_SHIM (meson does)";
  const std::filesystem::path dir(include);
  std::set<std::string> declared;
  const std::string ncclH = readFile(dir / "nccl.h");
  collect(ncclH,
          std::regex(R"((?:^|\n)[ \t]*(?:ncclResult_t|const char[ \t]*\*|int|void)[ \t]+)"
                     R"((p?nccl[A-Za-z0-9_]+)[ \t]*\()"),
          declared);
  ASSERT_FALSE(declared.empty()) << dir / "nccl.h"
                                 << " declares no nccl* function";
  if (std::filesystem::is_directory(dir / "nccl_device"))
    for (const auto& f : std::filesystem::recursive_directory_iterator(dir / "nccl_device"))
      if (f.is_regular_file())
        collect(readFile(f.path()),
                std::regex(R"(NCCL_EXTERN_C[ \t]+__host__[ \t]+[A-Za-z_]+[ \t]*\*?[ \t]*)"
                           R"((nccl[A-Za-z0-9_]+)[ \t]*\()"),
                declared);
  std::smatch m;
  std::string version = "?";
  if (std::regex_search(ncclH, m,
                        std::regex(R"(NCCL_MAJOR (\d+)\s+#define NCCL_MINOR (\d+)\s+)"
                                   R"(#define NCCL_PATCH (\d+))")))
    version = m.str(1) + "." + m.str(2) + "." + m.str(3);

  void* lib = dlopen(shim, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  std::string missing;
  size_t count = 0;
  for (const std::string& name : declared)
    if (!dlsym(lib, name.c_str())) {
      missing += "\n  " + name;
      ++count;
    }
  dlclose(lib);
  EXPECT_EQ(count, 0u) << shim << " does not export " << count << " of the " << declared.size()
                       << " host functions NCCL " << version << "'s headers in " << include
                       << " declare:" << missing
                       << "\nDefine each in src/nccl_shim/ (an unsupported one returns "
                          "ncclInvalidUsage, saying what to call instead).";
  std::printf("  NCCL %s: %zu host functions declared, %zu exported\n", version.c_str(),
              declared.size(), declared.size() - count);
}

}  // namespace
