// Keeps docs/errors.md true: every row of its table names at least one test, and every test it
// names exists: a GoogleTest TEST/TEST_F/TEST_P in a source file that its meson.build builds, or
// a test name registered in a meson.build.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::string sourceRoot() {
  const char* root = std::getenv("SOURCE_ROOT");
  return root ? root : "";
}

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> cells(const std::string& row) {
  std::vector<std::string> out;
  size_t start = row.find('|');
  while (start != std::string::npos) {
    size_t end = row.find('|', start + 1);
    if (end == std::string::npos) break;
    out.push_back(row.substr(start + 1, end - start - 1));
    start = end;
  }
  return out;
}

// Why the reference `file::name` does not name a test, or "" when it does.
std::string checkReference(const std::string& ref) {
  const size_t sep = ref.find("::");
  if (sep == std::string::npos) return "not of the form file::name";
  const std::string file = ref.substr(0, sep), name = ref.substr(sep + 2);
  const std::string text = readFile(sourceRoot() + "/" + file);
  if (text.empty()) return file + " does not exist";
  const size_t slash = file.rfind('/');
  const std::string dir = file.substr(0, slash), base = file.substr(slash + 1);
  if (base == "meson.build")
    return text.find("'" + name + "'") != std::string::npos ? ""
                                                             : "no test '" + name + "' in " + file;
  const std::string build = readFile(sourceRoot() + "/" + dir + "/meson.build");
  const std::string stem = base.substr(0, base.rfind('.'));  // lists name tests by stem
  if (build.find("'" + base + "'") == std::string::npos &&
      build.find("'" + stem + "'") == std::string::npos)
    return dir + "/meson.build does not build " + base;
  const size_t dot = name.find('.');
  if (dot == std::string::npos) return "'" + name + "' is not Suite.Name";
  const std::regex test("TEST(_F|_P)?\\(\\s*" + name.substr(0, dot) + "\\s*,\\s*" +
                        name.substr(dot + 1) + "\\s*\\)");
  return std::regex_search(text, test) ? "" : "no test " + name + " in " + file;
}

TEST(ErrorsDoc, EveryRowNamesTestsThatExist) {
  ASSERT_FALSE(sourceRoot().empty()) << "SOURCE_ROOT is not set";
  std::istringstream doc(readFile(sourceRoot() + "/docs/errors.md"));
  std::string line;
  int rows = 0;
  bool inTable = false;
  while (std::getline(doc, line)) {
    if (line.rfind("| what happened", 0) == 0) {
      inTable = true;
      continue;
    }
    if (!inTable || line.rfind("| ---", 0) == 0) continue;
    if (line.rfind("|", 0) != 0) break;
    ++rows;
    std::vector<std::string> c = cells(line);
    ASSERT_EQ(c.size(), 4u) << "a row without four cells: " << line;
    std::regex ref("`([^`]+)`");
    int refs = 0;
    for (auto it = std::sregex_iterator(c[3].begin(), c[3].end(), ref);
         it != std::sregex_iterator(); ++it, ++refs) {
      const std::string why = checkReference((*it)[1]);
      EXPECT_TRUE(why.empty()) << "docs/errors.md, row '" << c[0] << "': " << (*it)[1] << ": "
                               << why;
    }
    EXPECT_GT(refs, 0) << "docs/errors.md, row '" << c[0] << "' names no test";
  }
  EXPECT_GE(rows, 20) << "the table of docs/errors.md was not found (header '| what happened')";
}

TEST(ErrorsDoc, TheCheckerRejectsWhatIsMissing) {
  EXPECT_FALSE(checkReference("tests/collective/api_errors_test.cc::ApiErrors.NoSuchTest").empty());
  EXPECT_FALSE(checkReference("tests/nowhere.cc::A.B").empty());
  EXPECT_FALSE(checkReference("tests/fault/meson.build::no-such-case").empty());
  EXPECT_TRUE(checkReference("tests/collective/api_errors_test.cc::ApiErrors.NullComm").empty());
}

}  // namespace
