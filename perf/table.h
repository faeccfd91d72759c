// The text every nccl-tests-style perf driver prints, in one place: the sqz-*-perf binaries
// (bench.cc), the peer drivers in perf/compare/ (compare_common.cc) and sqz-train-sim share it,
// so their tables line up column for column: nccl-tests' header, rank, column, row and summary
// lines, as strings each driver prints on its rank 0. The -J files are perf_json.h's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "sweep_flags.h"

namespace squeeze::perf {

// ---- nccl-tests' table ---------------------------------------------------------------------
// Each returns the text for the caller to print (on rank 0): the drivers interleave it with
// lines of their own.

/// printf on stdout on the rank that prints the table (0); the others print nothing.
void printOnRoot(int rank, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

/// "# nThread 1 ..." and "# Using devices", before the rank lines.
std::string headerLines(const SweepOptions& o);

/// One "#  Rank ..." line (with its newline).
std::string rankLine(int rank, const char* pid, const char* host);

/// The line above the columns that says which are out of place and which in place.
std::string columnGroupLine();

/// The column names up to and including the in-place "#wrong" and the two spaces after it; the
/// caller ends the line (algo, and codec columns for -z).
std::string columnNames();

/// The units under columnNames(), up to the in-place "#wrong" column, without the line's end.
std::string columnUnits();

/// A row's first columns: size, count, type, redop, root.
std::string rowStart(size_t bytes, size_t count, const char* type, const char* redop, int root);

/// One measured half of a row (out of place or in place): time, algbw, busbw, #wrong (N/A when
/// `wrong` < 0, that is, not checked).
std::string timedCells(double timeUs, double algBw, double busBw, int64_t wrong);

/// A half the collective cannot run: N/A in every column.
std::string naCells();

/// The lines after the table: wrong-result count and average bus bandwidth.
std::string summaryLines(int errors, double bwSum, int bwCount);

}  // namespace squeeze::perf
