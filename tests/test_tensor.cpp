// The tensor core: views share storage and clone() does not (the seed's copy / deepcopy
// example), reshape returns a view when strides allow, dtype and device checks, bad shapes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "grux/tensor.h"

namespace grux::test_tensor {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

Tensor arange(const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::f32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = float(i);
  return t;
}

TEST(Tensor, ViewsShareStorageCloneDoesNot) {
  Tensor a = arange({3, 4});
  Tensor row = a.select(0, 1);  // shallow: a view
  Tensor deep = a.clone();      // deep copy
  row.set({2}, 100.0);
  EXPECT_EQ(a.item({1, 2}), 100.0);   // the write is visible through the base
  EXPECT_EQ(deep.item({1, 2}), 6.0);  // but not in the clone
  EXPECT_TRUE(row.shares_storage(a));
  EXPECT_FALSE(deep.shares_storage(a));
  Tensor tr = a.transpose(0, 1);
  tr.set({3, 0}, -1.0);
  EXPECT_EQ(a.item({0, 3}), -1.0);
  EXPECT_FALSE(tr.is_contiguous());
  Tensor sl = a.slice(1, 1, 4, 2);  // columns 1 and 3
  EXPECT_EQ(sl.shape(), (Shape{3, 2}));
  EXPECT_EQ(sl.item({2, 1}), 11.0);
  sl.fill(7.0);
  EXPECT_EQ(a.item({2, 3}), 7.0);
  EXPECT_EQ(a.item({2, 2}), 10.0);
}

TEST(Tensor, FromBlobViewsTheCallersMemoryAndHoldsItsOwner) {
  std::vector<double> mem(12);
  for (int i = 0; i < 12; ++i) mem[i] = i;
  auto owner = std::make_shared<int>(0);
  std::weak_ptr<int> watch = owner;
  {
    // A (3, 2) view of every other element: strides (4, 2).
    Tensor t = Tensor::from_blob(mem.data(), {3, 2}, {4, 2}, DType::f64, std::move(owner));
    EXPECT_EQ(t.item({2, 1}), 10.0);
    EXPECT_FALSE(t.is_contiguous());
    Tensor row = t.select(0, 1);
    t.set({1, 0}, -5.0);  // writes the caller's memory
    EXPECT_EQ(mem[4], -5.0);
    EXPECT_EQ(row.item({0}), -5.0);
    EXPECT_EQ(t.contiguous().at_flat(5), 10.0);
    EXPECT_FALSE(watch.expired());  // held while a tensor views it
  }
  EXPECT_TRUE(watch.expired());  // released with the last view
  EXPECT_THAT([&] { Tensor::from_blob(mem.data(), {2}, {-1}, DType::f64, nullptr); },
              ThrowsMessage<Error>(HasSubstr("negative stride")));
  EXPECT_THAT(
      [&] {
        Tensor::from_blob(reinterpret_cast<char*>(mem.data()) + 1, {2}, {1}, DType::f64, nullptr);
      },
      ThrowsMessage<Error>(HasSubstr("not aligned")));
  EXPECT_THAT(
      [&] {
        Tensor::from_blob(mem.data(), {2, 3}, {1}, DType::f64, nullptr);
      },
      ThrowsMessage<Error>(HasSubstr("1 strides given for shape (2, 3)")));
  EXPECT_THAT([&] { Tensor::from_blob(nullptr, {2}, {1}, DType::f64, nullptr); },
              ThrowsMessage<Error>(HasSubstr("null data")));
  EXPECT_THAT(
      [&] {
        Tensor::from_blob(mem.data(), {3, 3}, {int64_t{1} << 62, 1}, DType::f64, nullptr);
      },
      ThrowsMessage<Error>(HasSubstr("too large")));
}

// With no owner the memory stays the caller's: the tensor never frees it or hands it on (to
// grux's cache of freed blocks, from which a new tensor would get it).
TEST(Tensor, FromBlobWithoutOwnerLeavesTheMemoryToTheCaller) {
  alignas(64) static float mem[64];
  { Tensor t = Tensor::from_blob(mem, {64}, {1}, DType::f32, nullptr); }
  std::vector<Tensor> fresh;
  for (int i = 0; i < 4; ++i) {
    fresh.push_back(Tensor::empty({64}, DType::f32));
    EXPECT_NE(fresh.back().raw_data(), static_cast<void*>(mem));
  }
}

TEST(Tensor, ReshapeIsAViewWhenStridesAllowOtherwiseACopy) {
  Tensor a = arange({2, 3, 4});
  Tensor v = a.reshape({6, 4});
  EXPECT_TRUE(v.shares_storage(a));
  Tensor t = a.transpose(1, 2);  // (2, 4, 3), not contiguous
  Tensor merged_outer = t.reshape({2, 12});
  EXPECT_FALSE(merged_outer.shares_storage(a));  // merging transposed dims needs a copy
  EXPECT_EQ(merged_outer.item({1, 1}), a.item({1, 1, 0}));
  Tensor split = t.reshape({2, 2, 2, 3});  // splitting a dim is still a view
  EXPECT_TRUE(split.shares_storage(a));
  EXPECT_EQ(split.item({1, 1, 0, 2}), a.item({1, 2, 2}));
  EXPECT_THROW(t.view({2, 12}), Error);
  EXPECT_EQ(a.reshape({-1, 4}).shape(), (Shape{6, 4}));
  EXPECT_THROW(a.reshape({5, -1}), Error);
  EXPECT_THROW(a.reshape({-1, -1}), Error);
}

TEST(Tensor, UnsqueezeSqueezeContiguous) {
  Tensor a = arange({2, 3});
  Tensor u = a.unsqueeze(1);
  EXPECT_EQ(u.shape(), (Shape{2, 1, 3}));
  EXPECT_EQ(u.squeeze(1).shape(), (Shape{2, 3}));
  EXPECT_THROW(a.squeeze(0), Error);
  Tensor c = a.transpose(0, 1).contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.item({2, 1}), 5.0);
}

TEST(Tensor, DtypesAndConversion) {
  Tensor a = arange({4});
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  Tensor d = a.to(DType::f64);
  EXPECT_EQ(d.dtype(), DType::f64);
  EXPECT_EQ(d.data<double>()[3], 3.0);
  EXPECT_THROW(a.data<double>(), Error);
  Tensor i = Tensor::from_vector<int64_t>({2}, {7, -3});
  EXPECT_EQ(i.item({1}), -3.0);
  EXPECT_THROW(Tensor::from_vector<float>({3}, {1.f, 2.f}), Error);
}

TEST(Tensor, ChecksNameOpArgumentAndBothValues) {
  Tensor a = Tensor::zeros({2}, DType::f32), b = Tensor::zeros({2}, DType::f64);
  try {
    check_same_dtype("myop", "x", a, "y", b);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("myop"));
    EXPECT_THAT(e.what(), HasSubstr("y has dtype f64"));
    EXPECT_THAT(e.what(), HasSubstr("x has dtype f32"));
  }
  EXPECT_NO_THROW(check_same_device("myop", "x", a, "y", b));
  try {
    check_shape("myop", "x", a, {3});
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("x has shape (2,), expected (3,)"));
  }
}

TEST(Tensor, DevicesOtherThanCpuAreRejectedInThisBuild) {
  Device cuda{Device::Kind::cuda, 0};
  EXPECT_EQ(cuda.str(), "cuda:0");
  try {
    Tensor::empty({2}, DType::f32, cuda);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("cuda:0"));
  }
  EXPECT_THROW(Tensor::zeros({2}, DType::f32).to(cuda), Error);
}

TEST(Tensor, BadShapesAreErrorsNotAllocations) {
  EXPECT_THROW(Tensor::empty({-1, 3}, DType::f32), Error);
  EXPECT_THROW(Tensor::empty({int64_t(1) << 40, int64_t(1) << 40}, DType::f32), Error);
  EXPECT_THROW(Tensor::empty({int64_t(1) << 62}, DType::f64), Error);
  Tensor z = Tensor::zeros({0, 5}, DType::f32);
  EXPECT_EQ(z.numel(), 0);
  EXPECT_EQ(z.clone().numel(), 0);
}

TEST(Tensor, IndexErrors) {
  Tensor a = arange({2, 3});
  EXPECT_THROW(a.item({2, 0}), Error);
  EXPECT_THROW(a.item({0}), Error);
  EXPECT_THROW(a.select(2, 0), Error);
  EXPECT_THROW(a.select(0, 5), Error);
  EXPECT_THROW(a.transpose(0, 3), Error);
  EXPECT_THROW(a.slice(0, 0, 1, 0), Error);
}

}  // namespace
}  // namespace grux::test_tensor
