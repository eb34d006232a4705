// The stream order of device calls (gradwire.h, "stream order of non-blocking device calls") on
// the stand-in accelerator, whose streams run their work later on threads of their own: a
// call starts after what its caller queued before it (not after what it queues later), a
// stream can wait for a call without the host waiting, and such a wait always ends.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "collectives/comm/communicator_impl.hpp"
#include "tests/device_group.hpp"
#include "tests/test_util.hpp"

namespace gw {
namespace {

using coll::StandInStream;
using test::Comms;
using test::DeviceVector;
using test::make_group;
using test::on_ranks;

constexpr size_t kN = 5003;

// The caller's stream writes x late; a non-blocking all-reduce is made, then the same stream
// waits for it and reads x. With the point on the stream taken when the progress thread
// started the call, the call would wait for the stream's own wait: a deadlock.
TEST(DeviceStreamOrder, ACallStartsAfterWhatItsStreamHeldAndTheStreamWaitsForIt) {
  for (int p : {1, 2, 3}) {
    Comms comms = make_group(p, true);
    on_ranks(comms, [&](Communicator& c, int r) {
      StandInStream s(2000, static_cast<uint64_t>(r) + 1);
      DeviceVector<float> x(kN);
      std::vector<float> seen;
      for (int round = 0; round < 3; ++round) {
        float* d = x.data();
        const float v = static_cast<float>(r + 1 + round);
        s.enqueue([d, v] {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          std::fill(d, d + kN, v);
        });
        auto at = c.mark_stream(&s);
        ASSERT_TRUE(at.is_ok()) << at.status().to_string();
        auto after = at.value();
        auto work = c.submit([=](Communicator& cm) {
          return cm.allreduce_device(d, d, kN, DType::kFloat32, ReduceOp::kSum, nullptr, nullptr, Algo::kAuto, after);
        });
        ASSERT_TRUE(c.stream_wait(*work, &s).is_ok());
        s.enqueue([&seen, d] { seen.assign(d, d + kN); });
        s.synchronize();
        ASSERT_TRUE(Communicator::wait(*work).is_ok());
        float want = 0;
        for (int q = 0; q < p; ++q) want += static_cast<float>(q + 1 + round);
        for (size_t i = 0; i < kN; ++i) ASSERT_EQ(seen[i], want) << "round " << round << " element " << i;
      }
    });
  }
}

// A call that fails (here: a bad argument found on the progress thread) still lets the stream
// that waits for it go on; the error comes back from the request.
TEST(DeviceStreamOrder, AFailedCallReleasesTheStreamThatWaitsForIt) {
  Comms comms = make_group(2, true);
  on_ranks(comms, [&](Communicator& c, int r) {
    StandInStream s(500, static_cast<uint64_t>(r) + 9);
    std::vector<float> host(64, 1.0f);  // host memory: the stand-in refuses it
    auto after = c.mark_stream(&s).value();
    auto work = c.submit([&](Communicator& cm) {
      return cm.allreduce_device(host.data(), host.data(), 64, DType::kFloat32, ReduceOp::kSum, nullptr, nullptr,
                                 Algo::kAuto, after);
    });
    ASSERT_TRUE(c.stream_wait(*work, &s).is_ok());
    bool ran = false;
    s.enqueue([&ran] { ran = true; });
    s.synchronize();
    EXPECT_TRUE(ran);
    const Status st = Communicator::wait(*work);
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.to_string();
    EXPECT_NE(st.message().find("not stand-in device memory"), std::string::npos) << st.message();
  });
}

TEST(DeviceStreamOrder, PointToPointWorkCannotBeWaitedOnAStream) {
  Comms comms = make_group(2, true);
  on_ranks(comms, [&](Communicator& c, int r) {
    uint32_t v = 7;
    auto work = r == 0 ? c.isend(&v, sizeof v, 1, 3) : c.irecv(&v, sizeof v, 0, 3);
    const Status s = c.stream_wait(*work, nullptr);
    EXPECT_EQ(s.code(), Code::kUnsupported) << s.to_string();
    EXPECT_TRUE(Communicator::wait(*work).is_ok());
  });
}

// A stream still waiting when the device backend goes (the communicator is destroyed, or the
// backend replaced) is released: no stream waits forever.
TEST(DeviceStreamOrder, AGoneBackendReleasesTheStreamsThatWaitOnIt) {
  StandInStream s(100, 5);
  {
    coll::StandInBackend b(3);
    ASSERT_TRUE(b.stream_wait(&s, 42).is_ok());  // number 42 never finishes
  }
  bool ran = false;
  s.enqueue([&ran] { ran = true; });
  s.synchronize();
  EXPECT_TRUE(ran);
}

TEST(DeviceStreamOrder, TrimGivesBackScratchAndTheNextCallWorks) {
  std::vector<test::HostDeviceBackend*> backends;
  Comms comms = make_group(2, true, std::chrono::seconds(20), &backends);
  on_ranks(comms, [&](Communicator& c, int r) {
    auto codec = test::make_codec("qsgd:bits=4");
    DeviceVector<float> x(kN);
    for (int round = 0; round < 2; ++round) {
      std::fill(x.data(), x.data() + kN, static_cast<float>(r + 1));
      ASSERT_TRUE(c.allreduce_device(x.data(), x.data(), kN, DType::kFloat32, ReduceOp::kSum, codec.get(), nullptr,
                                     Algo::kScatterReduce, nullptr)
                      .is_ok());
      EXPECT_GT(backends[static_cast<size_t>(r)]->held_bytes(), 0u);
      ASSERT_TRUE(c.trim_device().is_ok());
      EXPECT_EQ(backends[static_cast<size_t>(r)]->held_bytes(), 0u);
      for (size_t i = 0; i < kN; ++i) ASSERT_NEAR(x.data()[i], 3.0f, 0.3f);
    }
  });
}

}  // namespace
}  // namespace gw
