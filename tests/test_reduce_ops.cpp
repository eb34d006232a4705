// The element-wise reductions of the dense collectives (collectives/common/reduce.cpp), for every
// dtype and op: exact values, integer wraparound, NaN through min and max, integer averages
// rounding toward zero, half types through float.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "collectives/common/reduce.hpp"
#include "compressors/half.hpp"

namespace gw {
namespace {

using coll::divide;
using coll::reduce_into;

template <class T>
std::vector<T> reduced(std::vector<T> d, const std::vector<T>& s, DType dtype, ReduceOp op) {
  reduce_into(d.data(), s.data(), d.size(), dtype, op);
  return d;
}

template <class T>
void check_integers(DType dtype) {
  using L = std::numeric_limits<T>;
  const std::vector<T> a = {1, 5, L::max(), L::min(), T(-3 * L::is_signed), 0, 7};
  const std::vector<T> b = {2, 3, 1, T(L::is_signed ? -1 : 1), 2, 0, 7};
  std::vector<T> sum, prod, mn, mx;
  for (size_t i = 0; i < a.size(); ++i) {
    using U = std::make_unsigned_t<T>;
    using W = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, U>;
    sum.push_back(static_cast<T>(static_cast<U>(static_cast<W>(a[i]) + static_cast<W>(b[i]))));
    prod.push_back(static_cast<T>(static_cast<U>(static_cast<W>(a[i]) * static_cast<W>(b[i]))));
    mn.push_back(a[i] < b[i] ? a[i] : b[i]);
    mx.push_back(a[i] > b[i] ? a[i] : b[i]);
  }
  EXPECT_EQ(reduced(a, b, dtype, ReduceOp::kSum), sum) << dtype_name(dtype);
  EXPECT_EQ(reduced(a, b, dtype, ReduceOp::kAvg), sum) << dtype_name(dtype) << ": avg reduces as sum";
  EXPECT_EQ(reduced(a, b, dtype, ReduceOp::kProd), prod) << dtype_name(dtype);
  EXPECT_EQ(reduced(a, b, dtype, ReduceOp::kMin), mn) << dtype_name(dtype);
  EXPECT_EQ(reduced(a, b, dtype, ReduceOp::kMax), mx) << dtype_name(dtype);
  // Wraparound at the top.
  EXPECT_EQ(reduced(std::vector<T>{L::max()}, std::vector<T>{1}, dtype, ReduceOp::kSum)[0], L::min());
}

TEST(ReduceOps, IntegersWrapAndCompareExactly) {
  check_integers<int8_t>(DType::kInt8);
  check_integers<uint8_t>(DType::kUInt8);
  check_integers<int32_t>(DType::kInt32);
  check_integers<int64_t>(DType::kInt64);
  // Products that overflow: 100 * 3 in int8 is 300 mod 256 = 44; 2^62 * 4 wraps to 0.
  EXPECT_EQ(reduced(std::vector<int8_t>{100}, {3}, DType::kInt8, ReduceOp::kProd)[0], 44);
  EXPECT_EQ(reduced(std::vector<uint8_t>{200}, {200}, DType::kUInt8, ReduceOp::kProd)[0], (200 * 200) % 256);
  EXPECT_EQ(reduced(std::vector<int64_t>{int64_t{1} << 62}, {4}, DType::kInt64, ReduceOp::kProd)[0], 0);
  EXPECT_EQ(reduced(std::vector<int32_t>{-2147483647 - 1}, {-1}, DType::kInt32, ReduceOp::kProd)[0], -2147483647 - 1);
}

TEST(ReduceOps, IntegerAverageRoundsTowardZero) {
  std::vector<int32_t> v = {7, -7, 8, -8, 0, 2147483647, -2147483647 - 1};
  divide(v.data(), v.size(), DType::kInt32, 3);
  EXPECT_EQ(v, (std::vector<int32_t>{2, -2, 2, -2, 0, 715827882, -715827882}));
  std::vector<int8_t> w = {-128, 127, -5};
  divide(w.data(), w.size(), DType::kInt8, 2);
  EXPECT_EQ(w, (std::vector<int8_t>{-64, 63, -2}));
  std::vector<uint8_t> u = {255, 5};
  divide(u.data(), u.size(), DType::kUInt8, 4);
  EXPECT_EQ(u, (std::vector<uint8_t>{63, 1}));
  std::vector<int64_t> l = {std::numeric_limits<int64_t>::min(), -9};
  divide(l.data(), l.size(), DType::kInt64, 4);
  EXPECT_EQ(l, (std::vector<int64_t>{std::numeric_limits<int64_t>::min() / 4, -2}));
}

template <class T>
void check_floats(DType dtype) {
  const T nan = std::numeric_limits<T>::quiet_NaN();
  const std::vector<T> a = {1.5, -2, 3, nan, 4, -0.0, std::numeric_limits<T>::max() / 4};
  const std::vector<T> b = {2.25, 5, nan, 1, nan, 0.0, 10};
  const auto sum = reduced(a, b, dtype, ReduceOp::kSum);
  EXPECT_EQ(sum[0], T(3.75));
  EXPECT_EQ(sum[1], T(3));
  EXPECT_TRUE(std::isnan(sum[2]));
  const auto prod = reduced(a, b, dtype, ReduceOp::kProd);
  EXPECT_EQ(prod[0], T(1.5) * T(2.25));
  EXPECT_EQ(prod[1], T(-10));
  EXPECT_TRUE(std::isinf(prod[6])) << "overflow gives inf";
  for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax}) {
    const auto r = reduced(a, b, dtype, op);
    const auto r2 = reduced(b, a, dtype, op);
    EXPECT_EQ(r[0], op == ReduceOp::kMin ? T(1.5) : T(2.25));
    EXPECT_EQ(r[1], op == ReduceOp::kMin ? T(-2) : T(5));
    for (size_t i : {size_t{2}, size_t{3}, size_t{4}}) {
      EXPECT_TRUE(std::isnan(r[i])) << red_op_name(op) << " element " << i;
      EXPECT_TRUE(std::isnan(r2[i])) << red_op_name(op) << " element " << i << ", sides swapped";
    }
    EXPECT_EQ(r[5], T(0));
  }
  std::vector<T> v = {3, -9, 1};
  divide(v.data(), v.size(), dtype, 2);
  EXPECT_EQ(v, (std::vector<T>{1.5, -4.5, 0.5}));
}

TEST(ReduceOps, FloatsAndDoubles) {
  check_floats<float>(DType::kFloat32);
  check_floats<double>(DType::kFloat64);
  // float64 really computes in double: 1 + 2^-40 survives.
  const double tiny = std::ldexp(1.0, -40);
  EXPECT_EQ(reduced(std::vector<double>{1.0}, {tiny}, DType::kFloat64, ReduceOp::kSum)[0], 1.0 + tiny);
}

TEST(ReduceOps, HalfTypesComputeThroughFloat) {
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    auto enc = [&](float f) { return dtype == DType::kFloat16 ? hd::float_to_half(f) : hd::float_to_bf16(f); };
    auto dec = [&](uint16_t h) { return dtype == DType::kFloat16 ? hd::half_to_float(h) : hd::bf16_to_float(h); };
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const std::vector<uint16_t> a = {enc(1.5f), enc(-2), enc(3), enc(nan)};
    const std::vector<uint16_t> b = {enc(2.5f), enc(4), enc(nan), enc(1)};
    auto at = [&](ReduceOp op, size_t i) { return dec(reduced(a, b, dtype, op)[i]); };
    EXPECT_EQ(at(ReduceOp::kSum, 0), 4.0f);
    EXPECT_EQ(at(ReduceOp::kProd, 1), -8.0f);
    EXPECT_EQ(at(ReduceOp::kMin, 1), -2.0f);
    EXPECT_EQ(at(ReduceOp::kMax, 0), 2.5f);
    EXPECT_TRUE(std::isnan(at(ReduceOp::kMax, 2)));
    EXPECT_TRUE(std::isnan(at(ReduceOp::kMin, 3)));
    std::vector<uint16_t> v = {enc(3), enc(-1)};
    divide(v.data(), v.size(), dtype, 2);
    EXPECT_EQ(dec(v[0]), 1.5f);
    EXPECT_EQ(dec(v[1]), -0.5f);
  }
}

TEST(ReduceOps, ZeroElementsTouchNothing) {
  for (int d = 1; d <= 8; ++d) {
    for (int op = 0; op <= 4; ++op) reduce_into(nullptr, nullptr, 0, static_cast<DType>(d), static_cast<ReduceOp>(op));
    divide(nullptr, 0, static_cast<DType>(d), 3);
  }
}

TEST(ReduceOps, Float32SumMatchesThePlainLoop) {
  const size_t n = 100003;
  std::vector<float> d(n), s(n), want(n);
  for (size_t i = 0; i < n; ++i) {
    d[i] = static_cast<float>(i) * 0.37f - 11.f;
    s[i] = 1.0f / static_cast<float>(i + 1);
    want[i] = d[i] + s[i];
  }
  reduce_into(d.data(), s.data(), n, DType::kFloat32, ReduceOp::kSum);
  EXPECT_EQ(std::memcmp(d.data(), want.data(), n * sizeof(float)), 0);
}

}  // namespace
}  // namespace gw
