// Keeps the README true: every SQZ_* parameter in the registry is documented there, and every
// SQZ_* name the README mentions is a parameter (or the build-time macro family SQZ_HAVE_*, or
// the CUDA stand-in's own SQZ_STANDIN_* variables, which its library reads: device/standin/).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "base/params.h"

namespace {

std::string readme() {
  const char* path = std::getenv("README_PATH");
  if (!path) return "";
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Readme, DocumentsEveryParameter) {
  std::string text = readme();
  ASSERT_FALSE(text.empty()) << "README_PATH is not set or README.md is empty";
  for (const auto& p : squeeze::paramTable())
    EXPECT_NE(text.find(std::string("`") + p.key + "`"), std::string::npos)
        << p.key << " is a parameter but README.md does not document it";
}

TEST(Readme, MentionsOnlyRealParameters) {
  std::string text = readme();
  ASSERT_FALSE(text.empty());
  std::set<std::string> keys;
  for (const auto& p : squeeze::paramTable()) keys.insert(p.key);
  std::regex name("SQZ_[A-Z0-9_]+");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), name); it != std::sregex_iterator();
       ++it) {
    std::string n = it->str();
    if (n.rfind("SQZ_HAVE_", 0) == 0 || n.rfind("SQZ_CONFIG_", 0) == 0 ||
        n.rfind("SQZ_STANDIN_", 0) == 0 || n == "SQZ_SPLIT_NOCOLOR")
      continue;
    EXPECT_TRUE(keys.count(n)) << "README.md mentions " << n << ", which is not a parameter";
  }
}

}  // namespace
