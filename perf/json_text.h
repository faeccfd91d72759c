// The text of a -J file: an nlohmann::ordered_json document laid out as the squeeze-perf/1 and
// squeeze-train-sim/1 files have always been, so files written before and after the move to
// nlohmann/json compare byte for byte (tests/perf/json_golden_test.cc holds it to that).
//
// nlohmann builds the document (keys in insertion order) and escapes every string and key; what
// is ours is only the layout and the number text, where nlohmann's dump differs from the format:
// members of objects and arrays nested at most `lineDepth` deep each start a line indented two
// spaces per level, deeper ones stay on their parent's line (so each table row is one line),
// ": " after a key and ", " between inline members; doubles are the shortest text that reads
// back as the same double (std::to_chars: 100, 1e-07, 1e+21, where nlohmann writes 100.0,
// 1e-07, 1e+21) and non-finite ones are null, as nlohmann writes them.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace squeeze::perf {

/// A -J document: nlohmann's JSON with members in the order they were added.
using Json = nlohmann::ordered_json;

/// `doc` as the text of a -J file (without the final newline, which JsonFile::commit adds).
/// Strings that are not UTF-8 are written with U+FFFD for the bad bytes.
std::string jsonText(const Json& doc, int lineDepth = 2);

/// null for nullptr, else the string: the optional strings of the formats.
inline Json stringOrNull(const char* s) { return s ? Json(s) : Json(nullptr); }

}  // namespace squeeze::perf
