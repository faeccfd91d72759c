// The datatypes and reduction ops as the sqz-*-perf binaries name and store them: nccl-tests'
// names and order (-d, -o and the type and redop columns), element sizes, and float32 to and
// from the 16-bit formats (half, bfloat16) the inputs and expected values are written in.
#pragma once

#include <squeeze/squeeze.h>

#include <cstddef>
#include <cstdint>

namespace squeeze::perf {

struct TypeName {
  sqzDataType_t type;
  const char* name;
};
/// nccl-tests' names and order (used by -d all).
inline constexpr TypeName kTypes[] = {
    {sqzInt8, "int8"},      {sqzUint8, "uint8"},       {sqzInt32, "int32"},  {sqzUint32, "uint32"},
    {sqzInt64, "int64"},    {sqzUint64, "uint64"},     {sqzFloat16, "half"}, {sqzFloat32, "float"},
    {sqzFloat64, "double"}, {sqzBfloat16, "bfloat16"},
};
/// Other spellings accepted by -d.
inline constexpr TypeName kTypeAliases[] = {
    {sqzInt8, "char"},       {sqzInt32, "int"},       {sqzFloat16, "fp16"},
    {sqzFloat16, "float16"}, {sqzFloat32, "fp32"},    {sqzFloat32, "float32"},
    {sqzFloat64, "fp64"},    {sqzFloat64, "float64"}, {sqzBfloat16, "bf16"},
};

struct OpName {
  sqzRedOp_t op;
  const char* name;
};
inline constexpr OpName kOps[] = {
    {sqzSum, "sum"}, {sqzProd, "prod"}, {sqzMax, "max"}, {sqzMin, "min"}, {sqzAvg, "avg"},
};

/// The type column's name of `t` ("?" for an unknown type).
const char* typeName(sqzDataType_t t);
/// The redop column's name of `op` ("?" for an unknown op).
const char* opName(sqzRedOp_t op);

bool isFloating(sqzDataType_t t);
bool isUnsigned(sqzDataType_t t);

/// Size in bytes of one element of `type` (0 for an unknown type).
size_t typeSize(sqzDataType_t type);

// ---- 16-bit floating point (round to nearest even; NaN stays NaN) -------------------------
uint16_t floatToHalf(float f);
float halfToFloat(uint16_t h);
uint16_t floatToBfloat16(float f);
float bfloat16ToFloat(uint16_t b);

}  // namespace squeeze::perf
