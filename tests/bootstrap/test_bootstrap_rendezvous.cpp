// The unique-id rendezvous between real processes: forked ranks meet at a root thread in the
// test process. Also strays, silent connections, missing and duplicate ranks, malformed replies
// from a fake root, and a root whose process exits. Nothing may hang: every child has an
// alarm(), the parent kills what outlives its deadline, and the test process itself has one.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/bootstrap/fork_util.hpp"
#include "transport/bootstrap/bootstrap.hpp"
#include "transport/bootstrap/frames.hpp"
#include "transport/bootstrap/root_server.hpp"
#include "transport/bootstrap/socket.hpp"
#include "transport/bootstrap/unique_id.hpp"
#include "transport/log.hpp"

namespace gw::bootstrap {
namespace {

using namespace gw::bootstrap::testing;  // NOLINT

class Watchdog : public ::testing::Test {
 protected:
  void SetUp() override { alarm(60); }
  void TearDown() override { alarm(0); }
};

class Rendezvous : public Watchdog {};
class UniqueIdTest : public Watchdog {};

UniqueId local_id(milliseconds root_timeout = seconds(15)) {
  RootOptions o;
  o.address = "127.0.0.1";
  o.timeout = root_timeout;
  auto id = create_unique_id(o);
  EXPECT_TRUE(id.is_ok()) << id.status().to_string();
  return id.is_ok() ? *id : UniqueId{};
}

uint16_t id_port(const UniqueId& id) { return frames::get_u16(id.bytes + id_layout::kPort); }

// Waits until no root thread of this process is running.
bool roots_idle(seconds wait = seconds(10)) {
  const auto until = Clock::now() + wait;
  while (running_root_servers() > 0) {
    if (Clock::now() > until) return false;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return true;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A rendezvous root in a process of its own, so that this process stays single-threaded and
// can fork ranks safely (fork_util.hpp says why). The host exits with 0 once its root thread
// has ended, which is how the tests see that the thread ends.
class RootHost {
 public:
  explicit RootHost(milliseconds timeout = seconds(15), const std::string& address = "127.0.0.1") {
    int fds[2];
    if (pipe(fds) != 0) {
      error_ = "pipe failed";
      return;
    }
    pid_ = spawn(
        [&] {
          close(fds[0]);
          RootOptions o;
          o.address = address;
          o.timeout = timeout;
          auto id = create_unique_id(o);
          const std::string msg = id.is_ok() ? "+" + std::string(reinterpret_cast<const char*>(id->bytes), kUniqueIdBytes)
                                             : "-" + id.status().to_string();
          for (size_t off = 0; off < msg.size();) {
            const ssize_t w = write(fds[1], msg.data() + off, msg.size() - off);
            if (w <= 0) break;
            off += static_cast<size_t>(w);
          }
          close(fds[1]);
          if (!id.is_ok()) return 1;
          while (running_root_servers() > 0) std::this_thread::sleep_for(milliseconds(5));
          return 0;
        },
        60);
    close(fds[1]);
    std::string got;
    char buf[512];
    ssize_t r;
    while ((r = read(fds[0], buf, sizeof buf)) > 0) got.append(buf, static_cast<size_t>(r));
    close(fds[0]);
    if (got.size() == 1 + kUniqueIdBytes && got[0] == '+') {
      std::memcpy(id_.bytes, got.data() + 1, kUniqueIdBytes);
      ok_ = true;
    } else {
      error_ = got.empty() ? "the root host died" : got.substr(1);
    }
  }
  ~RootHost() {
    if (pid_ > 0) wait_child(pid_, Clock::now());
  }
  RootHost(const RootHost&) = delete;
  RootHost& operator=(const RootHost&) = delete;

  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }
  const UniqueId& id() const { return id_; }
  // The host's exit code: 0 once its root has ended, kKilled if that takes longer than `wait`.
  int wait_exit(seconds wait = seconds(10)) {
    const int code = wait_child(pid_, Clock::now() + wait);
    pid_ = -1;
    return code;
  }

 private:
  pid_t pid_ = -1;
  bool ok_ = false;
  std::string error_;
  UniqueId id_{};
};

// A forked rank: joins and checks the whole table. 0 when all is well.
int rank_main(const UniqueId& id, int rank, int nranks, milliseconds timeout = seconds(10)) {
  auto t = rendezvous(id, rank, nranks, blob_for(rank), timeout);
  if (!t.is_ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, t.status().to_string().c_str());
    return 1;
  }
  if (t->size() != static_cast<size_t>(nranks)) return 2;
  for (int r = 0; r < nranks; ++r) {
    if ((*t)[static_cast<size_t>(r)] != blob_for(r)) return 3;
  }
  return 0;
}

// ---- jobs that complete ----------------------------------------------------------------------

class RendezvousJob : public Rendezvous, public ::testing::WithParamInterface<int> {};

TEST_P(RendezvousJob, EveryRankGetsTheWholeTable) {
  const int n = GetParam();
  RootHost host;
  ASSERT_TRUE(host.ok()) << host.error();
  const UniqueId id = host.id();
  const auto start = Clock::now();
  const auto codes = run_forked(n, [&](int r) { return rank_main(id, r, n); });
  for (int r = 0; r < n; ++r) EXPECT_EQ(codes[static_cast<size_t>(r)], 0) << "rank " << r;
  EXPECT_LT(Clock::now() - start, seconds(10));
  EXPECT_EQ(host.wait_exit(), 0) << "the root thread did not end after the job";
}

INSTANTIATE_TEST_SUITE_P(Sizes, RendezvousJob, ::testing::Values(1, 2, 3, 8));

TEST_F(Rendezvous, OneRankInProcess) {
  for (const std::string& blob : {std::string(), std::string(64 * 1024, 'z')}) {
    const UniqueId id = local_id();
    auto t = rendezvous(id, 0, 1, blob, seconds(5));
    ASSERT_TRUE(t.is_ok()) << t.status().to_string();
    ASSERT_EQ(t->size(), 1u);
    EXPECT_EQ((*t)[0], blob);
  }
  EXPECT_TRUE(roots_idle());
}

TEST_F(Rendezvous, RanksThatStartLateStillMeet) {
  RootHost host;
  ASSERT_TRUE(host.ok()) << host.error();
  const UniqueId id = host.id();
  const auto codes = run_forked(3, [&](int r) {
    std::this_thread::sleep_for(milliseconds(300 * r));
    return rank_main(id, r, 3);
  });
  for (int c : codes) EXPECT_EQ(c, 0);
  EXPECT_EQ(host.wait_exit(), 0);
}

// ---- strangers -------------------------------------------------------------------------------

TEST_F(Rendezvous, StrayConnectionsAreRejectedAndLoggedWhileTheJobCompletes) {
  ::testing::internal::CaptureStderr();  // the host's stderr too: it inherits the redirection
  RootHost host;
  ASSERT_TRUE(host.ok()) << host.error();
  const UniqueId id = host.id();
  const uint16_t port = id_port(id);

  // Not a gradwire rank at all.
  const int junk = raw_connect(port);
  ASSERT_GE(junk, 0);
  const std::string junk_name = local_name(junk);
  std::string junk_bytes(256, '\0');
  for (size_t i = 0; i < junk_bytes.size(); ++i) junk_bytes[i] = static_cast<char>(i * 13);
  raw_send(junk, junk_bytes);

  // A well-formed hello with the wrong token.
  uint8_t forged[16];
  std::memcpy(forged, id.bytes + id_layout::kToken, 16);
  forged[3] ^= 0x40;
  const int stray = raw_connect(port);
  ASSERT_GE(stray, 0);
  const std::string stray_name = local_name(stray);
  raw_send(stray, frames::encode_hello(forged, 0, 2, "stolen"));

  std::string got_junk, got_stray;
  EXPECT_TRUE(read_to_eof(junk, &got_junk, seconds(5))) << "the root kept a junk connection open";
  EXPECT_TRUE(read_to_eof(stray, &got_stray, seconds(5))) << "the root kept a forged hello open";
  EXPECT_TRUE(got_junk.empty());
  EXPECT_TRUE(got_stray.empty()) << "a connection without the token must learn nothing";
  close(junk);
  close(stray);

  const auto codes = run_forked(2, [&](int r) { return rank_main(id, r, 2); });
  EXPECT_EQ(host.wait_exit(), 0);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
  if (!log::enabled(log::Level::kWarn)) GTEST_SKIP() << "GW_DEBUG hides warnings";
  EXPECT_TRUE(contains(log, "bad magic")) << log;
  EXPECT_TRUE(contains(log, junk_name)) << log;
  EXPECT_TRUE(contains(log, "wrong token")) << log;
  EXPECT_TRUE(contains(log, stray_name)) << log;
}

TEST_F(Rendezvous, SilentAndStalledConnectionsDoNotBlockTheJob) {
  RootHost host;
  ASSERT_TRUE(host.ok()) << host.error();
  const UniqueId id = host.id();
  const uint16_t port = id_port(id);
  std::vector<int> silent;
  for (int i = 0; i < 20; ++i) silent.push_back(raw_connect(port));
  // One that starts a valid hello and stalls half-way through its fixed part.
  const int stalled = raw_connect(port);
  const std::string hello = frames::encode_hello(id.bytes + id_layout::kToken, 2, 4, "abc");
  raw_send(stalled, hello.substr(0, 20));

  const auto start = Clock::now();
  const auto codes = run_forked(4, [&](int r) { return rank_main(id, r, 4, seconds(8)); });
  const auto took = Clock::now() - start;
  for (int c : codes) EXPECT_EQ(c, 0);
  // A root waiting on a silent peer would take the 10 s hello timeout at least.
  EXPECT_LT(took, seconds(5));
  // Once the job is done the root closes the leftovers and ends.
  for (int fd : silent) {
    ASSERT_GE(fd, 0);
    EXPECT_TRUE(read_to_eof(fd, nullptr, seconds(5)));
    close(fd);
  }
  EXPECT_TRUE(read_to_eof(stalled, nullptr, seconds(5)));
  close(stalled);
  EXPECT_EQ(host.wait_exit(), 0);
}

// ---- ranks that go wrong ---------------------------------------------------------------------

TEST_F(Rendezvous, RankThatNeverArrivesTimesTheOthersOut) {
  RootHost host(seconds(3));
  ASSERT_TRUE(host.ok()) << host.error();
  const UniqueId id = host.id();
  const auto codes = run_forked(2, [&](int r) {  // rank 2 of 3 never comes
    const auto start = Clock::now();
    auto t = rendezvous(id, r, 3, blob_for(r), milliseconds(1500));
    const auto took = Clock::now() - start;
    if (t.is_ok()) return 1;
    std::fprintf(stderr, "rank %d (expected to time out): %s\n", r, t.status().to_string().c_str());
    if (t.status().code() != Code::kTimeout) return 2;
    if (took < milliseconds(1400) || took > milliseconds(3500)) return 3;
    // 2 of 3, or 1 of 3 when the other rank gave up a moment earlier and the root said so.
    if (!contains(t.status().message(), "2 of 3 ranks") && !contains(t.status().message(), "1 of 3 ranks")) return 4;
    return 0;
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
  EXPECT_EQ(host.wait_exit(), 0) << "the root did not end after its deadline";
}

TEST_F(Rendezvous, RootDeadlineSendsTheCountToWaitingRanks) {
  RootHost host(seconds(1));
  ASSERT_TRUE(host.ok()) << host.error();
  const UniqueId id = host.id();
  const auto codes = run_forked(2, [&](int r) {
    const auto start = Clock::now();
    auto t = rendezvous(id, r, 3, blob_for(r), seconds(8));
    const auto took = Clock::now() - start;
    if (t.is_ok()) return 1;
    std::fprintf(stderr, "rank %d (expected the root's timeout): %s\n", r, t.status().to_string().c_str());
    if (t.status().code() != Code::kTimeout) return 2;
    if (took > seconds(4)) return 3;
    if (!contains(t.status().message(), "2 of 3 ranks arrived") || !contains(t.status().message(), "missing: 2")) return 4;
    return 0;
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
  EXPECT_EQ(host.wait_exit(), 0);
}

constexpr int kDuplicate = 5;

int rank_or_duplicate(const UniqueId& id, int rank, int nranks) {
  auto t = rendezvous(id, rank, nranks, blob_for(rank), seconds(8));
  if (t.is_ok()) return (*t)[static_cast<size_t>(rank)] == blob_for(rank) ? 0 : 3;
  std::fprintf(stderr, "rank %d: %s\n", rank, t.status().to_string().c_str());
  if (t.status().code() == Code::kRemote && contains(t.status().message(), "already joined")) return kDuplicate;
  return 1;
}

TEST_F(Rendezvous, DuplicateRankIsRefused) {
  RootHost host;
  ASSERT_TRUE(host.ok()) << host.error();
  const UniqueId id = host.id();
  const pid_t a = spawn([&] { return rank_or_duplicate(id, 0, 2); });
  std::this_thread::sleep_for(milliseconds(300));
  const pid_t b = spawn([&] { return rank_or_duplicate(id, 0, 2); });
  // Whichever came second is refused at once; the other keeps waiting for rank 1.
  const auto deadline = Clock::now() + seconds(5);
  std::optional<pid_t> refused;
  int status = 0;
  while (!refused && Clock::now() < deadline) {
    for (pid_t p : {a, b}) {
      if (waitpid(p, &status, WNOHANG) == p) {
        refused = p;
        break;
      }
    }
    std::this_thread::sleep_for(milliseconds(5));
  }
  ASSERT_TRUE(refused.has_value()) << "the duplicate rank was not refused";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == kDuplicate) << "status " << status;
  const pid_t survivor = *refused == a ? b : a;
  const pid_t one = spawn([&] { return rank_or_duplicate(id, 1, 2); });
  EXPECT_EQ(wait_child(survivor, Clock::now() + seconds(10)), 0);
  EXPECT_EQ(wait_child(one, Clock::now() + seconds(10)), 0);
  EXPECT_EQ(host.wait_exit(), 0);
}

TEST_F(Rendezvous, DisagreeingNranksIsRefused) {
  RootHost host;
  ASSERT_TRUE(host.ok()) << host.error();
  const UniqueId id = host.id();
  const pid_t zero = spawn([&] { return rank_main(id, 0, 2); });
  std::this_thread::sleep_for(milliseconds(300));
  auto wrong = rendezvous(id, 1, 3, "x", seconds(5));
  ASSERT_FALSE(wrong.is_ok());
  EXPECT_EQ(wrong.status().code(), Code::kRemote) << wrong.status().to_string();
  EXPECT_TRUE(contains(wrong.status().message(), "job has 2 ranks")) << wrong.status().to_string();
  const pid_t one = spawn([&] { return rank_main(id, 1, 2); });
  EXPECT_EQ(wait_child(zero, Clock::now() + seconds(10)), 0);
  EXPECT_EQ(wait_child(one, Clock::now() + seconds(10)), 0);
  EXPECT_EQ(host.wait_exit(), 0);
}

TEST_F(Rendezvous, RankThatLeavesGivesItsSlotBack) {
  RootHost host;
  ASSERT_TRUE(host.ok()) << host.error();
  const UniqueId id = host.id();
  const int fd = raw_connect(id_port(id));
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(set_nonblocking(fd).is_ok());
  raw_send(fd, frames::encode_hello(id.bytes + id_layout::kToken, 0, 2, "first try"));
  // Wait for the acknowledgement (a progress frame), then leave.
  uint8_t ack[frames::kReplyHeader + frames::kProgressPayload];
  ASSERT_TRUE(read_exact(fd, ack, sizeof ack, Clock::now() + seconds(5)).is_ok());
  const frames::ReplyHeader h = frames::parse_reply_header(ack);
  EXPECT_EQ(h.kind, frames::kProgress);
  EXPECT_EQ(frames::get_u32(ack + frames::kReplyHeader), 1u);  // arrived
  EXPECT_EQ(frames::get_u32(ack + frames::kReplyHeader + 4), 2u);  // nranks
  close(fd);
  std::this_thread::sleep_for(milliseconds(200));
  const auto codes = run_forked(2, [&](int r) { return rank_main(id, r, 2); });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
  EXPECT_EQ(host.wait_exit(), 0);
}

// Sends raw bytes as a hello and returns the error code in the root's reply (or -1).
long error_code_for(const UniqueId& id, const std::string& hello) {
  const int fd = raw_connect(id_port(id));
  if (fd < 0) return -1;
  raw_send(fd, hello);
  std::string got;
  const bool eof = read_to_eof(fd, &got, seconds(5));
  close(fd);
  if (!eof || got.size() < frames::kReplyHeader + frames::kErrorPayloadFixed) return -1;
  const auto* p = reinterpret_cast<const uint8_t*>(got.data());
  const frames::ReplyHeader h = frames::parse_reply_header(p);
  if (std::memcmp(h.magic, frames::kReplyMagic, 4) != 0 || h.kind != frames::kError) return -1;
  if (h.payload_len != got.size() - frames::kReplyHeader) return -1;
  return frames::get_u32(p + frames::kReplyHeader);
}

TEST_F(Rendezvous, HellosWithTheTokenButBadFieldsGetAnError) {
  const UniqueId id = local_id();
  const uint8_t* token = id.bytes + id_layout::kToken;
  EXPECT_EQ(error_code_for(id, frames::encode_hello(token, 0, 2, "x", /*version=*/2)), long{frames::kErrVersion});
  EXPECT_EQ(error_code_for(id, frames::encode_hello(token, 5, 2, "x")), long{frames::kErrRejected});
  EXPECT_EQ(error_code_for(id, frames::encode_hello(token, 0, 0, "x")), long{frames::kErrRejected});
  EXPECT_EQ(error_code_for(id, frames::encode_hello(token, 0, 70000, "x")), long{frames::kErrRejected});
  std::string big = frames::encode_hello(token, 0, 2, "");
  frames::put_u32(reinterpret_cast<uint8_t*>(big.data()) + 32, 64 * 1024 + 1);  // blob_len over the limit
  EXPECT_EQ(error_code_for(id, big), long{frames::kErrRejected});
  // None of that disturbed the job.
  auto t = rendezvous(id, 0, 1, "fine", seconds(5));
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ((*t)[0], "fine");
  EXPECT_TRUE(roots_idle());
}

TEST_F(Rendezvous, InvalidArgumentsFailBeforeAnyNetworking) {
  uint8_t token[16] = {1, 2, 3};
  const UniqueId id = make_unique_id(Endpoint::loopback_v4(1), token);  // nobody listens there
  const std::string ok_blob = "b";
  struct Case {
    int rank, nranks;
    size_t blob;
  };
  for (const Case c : {Case{0, 0, 1}, Case{0, -1, 1}, Case{0, 65537, 1}, Case{-1, 2, 1}, Case{2, 2, 1}, Case{0, 2, 65537}}) {
    const auto start = Clock::now();
    auto t = rendezvous(id, c.rank, c.nranks, std::string(c.blob, 'q'), seconds(5));
    ASSERT_FALSE(t.is_ok());
    EXPECT_EQ(t.status().code(), Code::kInvalidArgument) << c.rank << "/" << c.nranks << ": " << t.status().to_string();
    EXPECT_LT(Clock::now() - start, milliseconds(500));
  }
  auto t = rendezvous(id, 0, 2, ok_blob, milliseconds(0));
  EXPECT_EQ(t.status().code(), Code::kInvalidArgument);
}

TEST_F(Rendezvous, NobodyListeningIsATimeout) {
  uint8_t token[16] = {9};
  const UniqueId id = make_unique_id(Endpoint::loopback_v4(free_port()), token);
  const auto start = Clock::now();
  auto t = rendezvous(id, 0, 2, "x", milliseconds(800));
  const auto took = Clock::now() - start;
  ASSERT_FALSE(t.is_ok());
  EXPECT_EQ(t.status().code(), Code::kTimeout) << t.status().to_string();
  EXPECT_TRUE(contains(t.status().message(), "not reachable")) << t.status().to_string();
  EXPECT_GE(took, milliseconds(700));
  EXPECT_LT(took, milliseconds(2500));
}

// ---- the rank distrusts what it reads --------------------------------------------------------

// A fake root that answers the first connection's hello with `reply`, then closes (or, with
// close_after false, waits for the rank to hang up).
Result<std::vector<std::string>> against_fake_root(const std::string& reply, bool close_after = true,
                                                   milliseconds timeout = seconds(3), const std::string& blob = "abc",
                                                   int nranks = 2) {
  Endpoint ep = Endpoint::loopback_v4(0);
  auto listener = listen_on(ep, 16);
  if (!listener.is_ok()) return listener.status();
  uint8_t token[16] = {7, 7, 7};
  const UniqueId id = make_unique_id(ep, token);
  const int lfd = listener->fd();
  std::thread fake([&] {
    pollfd p{lfd, POLLIN, 0};
    if (poll(&p, 1, 5000) <= 0) return;
    const int fd = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    uint8_t hello[frames::kHelloFixed];
    std::string rest;
    if (read_exact(fd, hello, sizeof hello, Clock::now() + seconds(5)).is_ok()) {
      rest.resize(frames::get_u32(hello + 32));
      (void)read_exact(fd, rest.data(), rest.size(), Clock::now() + seconds(5));
      raw_send(fd, reply);
      if (!close_after) read_to_eof(fd, nullptr, seconds(6));
    }
    close(fd);
  });
  auto result = rendezvous(id, 0, nranks, blob, timeout);
  fake.join();
  return result;
}

std::string header(uint16_t kind, uint64_t len, uint16_t version = frames::kVersion) {
  std::string h(frames::kReplyHeader, '\0');
  auto* p = reinterpret_cast<uint8_t*>(h.data());
  std::memcpy(p, frames::kReplyMagic, 4);
  frames::put_u16(p + 4, version);
  frames::put_u16(p + 6, kind);
  frames::put_u64(p + 8, len);
  return h;
}

std::string u32(uint32_t v) {
  std::string s(4, '\0');
  frames::put_u32(reinterpret_cast<uint8_t*>(s.data()), v);
  return s;
}

void expect_failure(const Result<std::vector<std::string>>& r, Code code, const std::string& part) {
  ASSERT_FALSE(r.is_ok()) << "expected " << code_name(code) << " containing '" << part << "'";
  EXPECT_EQ(r.status().code(), code) << r.status().to_string();
  EXPECT_TRUE(contains(r.status().message(), part)) << r.status().to_string();
}

TEST_F(Rendezvous, MalformedRepliesAreRejected) {
  // The fake itself works: a correct table for two ranks.
  {
    auto ok = against_fake_root(frames::encode_table({"abc", "peer"}));
    ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
    EXPECT_EQ((*ok)[1], "peer");
  }
  expect_failure(against_fake_root(std::string(16, 'X')), Code::kRemote, "bad magic");
  expect_failure(against_fake_root(header(frames::kTable, 100, 7)), Code::kRemote, "protocol version 7");
  expect_failure(against_fake_root(header(9, 0)), Code::kRemote, "unknown kind");
  // Tables that do not fit the job.
  expect_failure(against_fake_root(frames::encode_table({"abc", "x", "y"})), Code::kRemote, "3 ranks");
  expect_failure(against_fake_root(header(frames::kTable, uint64_t{1} << 40)), Code::kRemote, "impossible");
  expect_failure(against_fake_root(header(frames::kTable, 4)), Code::kRemote, "impossible");
  expect_failure(against_fake_root(header(frames::kTable, 4 + 8 + 70000) + u32(2) + u32(70000)), Code::kRemote,
                 "70000 bytes");
  expect_failure(against_fake_root(header(frames::kTable, 4 + 8 + 3) + u32(2) + u32(50) + "abc"), Code::kRemote,
                 "table entry");
  expect_failure(against_fake_root(header(frames::kTable, 4 + 8 + 3 + 5) + u32(2) + u32(3) + "abc" + u32(0) + "t"),
                 Code::kRemote, "trailing");
  expect_failure(against_fake_root(frames::encode_table({"not mine", "peer"})), Code::kRemote, "not the blob");
  // Progress and error frames out of bounds.
  expect_failure(against_fake_root(header(frames::kProgress, 9)), Code::kRemote, "progress frame");
  expect_failure(against_fake_root(frames::encode_progress(1, 5)), Code::kRemote, "for a job of 2");
  expect_failure(against_fake_root(frames::encode_progress(3, 2)), Code::kRemote, "progress 3 of 2");
  expect_failure(against_fake_root(header(frames::kError, 100000)), Code::kRemote, "error frame");
  expect_failure(against_fake_root(header(frames::kError, 4)), Code::kRemote, "error frame");
  // Error frames mean what they say.
  expect_failure(against_fake_root(frames::encode_error(frames::kErrRejected, 0, 2, "go away")), Code::kRemote, "go away");
  expect_failure(against_fake_root(frames::encode_error(frames::kErrTimeout, 1, 2, "too late")), Code::kTimeout,
                 "too late");
  // A truncated reply, and none at all.
  expect_failure(against_fake_root(frames::encode_progress(1, 2) + header(frames::kTable, 20) + u32(2)), Code::kRemote,
                 "closed the connection before the table");
  expect_failure(against_fake_root(""), Code::kRemote, "without a reply");
  const auto start = Clock::now();
  expect_failure(against_fake_root("", /*close_after=*/false, seconds(1)), Code::kTimeout, "never acknowledged");
  EXPECT_LT(Clock::now() - start, seconds(3));
  expect_failure(against_fake_root(frames::encode_progress(1, 2), false, seconds(1)), Code::kTimeout,
                 "1 of 2 ranks had arrived");
}

// ---- the process hosting the root goes away --------------------------------------------------

TEST_F(Rendezvous, RootProcessThatExitsEndsTheWaitAndExitsCleanly) {
  ASSERT_TRUE(roots_idle()) << "an earlier root is still running";
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t host = spawn([&] {
    close(fds[0]);
    RootOptions o;
    o.address = "127.0.0.1";
    o.timeout = seconds(60);
    auto id = create_unique_id(o);
    if (!id.is_ok()) return 1;
    if (write(fds[1], id->bytes, sizeof id->bytes) != static_cast<ssize_t>(sizeof id->bytes)) return 2;
    close(fds[1]);
    std::this_thread::sleep_for(milliseconds(500));
    std::exit(0);  // a normal exit with the root thread still serving
  });
  close(fds[1]);
  UniqueId id{};
  ASSERT_EQ(read(fds[0], id.bytes, sizeof id.bytes), static_cast<ssize_t>(sizeof id.bytes));
  close(fds[0]);
  const auto start = Clock::now();
  auto t = rendezvous(id, 0, 2, "x", seconds(10));
  EXPECT_LT(Clock::now() - start, seconds(4));
  ASSERT_FALSE(t.is_ok());
  EXPECT_EQ(t.status().code(), Code::kRemote) << t.status().to_string();
  EXPECT_EQ(wait_child(host, Clock::now() + seconds(5)), 0) << "the process did not exit cleanly";
}

// ---- unique ids ------------------------------------------------------------------------------

TEST_F(UniqueIdTest, ValidationRejectsWhatDidNotComeFromCreateUniqueId) {
  uint8_t token[16];
  ASSERT_TRUE(random_bytes(token, sizeof token).is_ok());
  const UniqueId good = make_unique_id(Endpoint::loopback_v4(4242), token);
  EXPECT_TRUE(validate_unique_id(good).is_ok());

  auto broken = [&](auto&& edit) {
    UniqueId id = good;
    edit(id);
    return validate_unique_id(id);
  };
  auto expect_bad = [](const Status& s, const char* part) {
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.to_string();
    EXPECT_TRUE(contains(s.message(), part)) << s.to_string();
  };
  expect_bad(broken([](UniqueId& id) { id.bytes[0] = 'X'; }), "magic");
  expect_bad(broken([](UniqueId& id) { id.bytes[id_layout::kVersion] = 2; }), "version");
  expect_bad(broken([](UniqueId& id) { id.bytes[id_layout::kFamily] = 5; }), "family");
  expect_bad(broken([](UniqueId& id) { id.bytes[id_layout::kPort] = id.bytes[id_layout::kPort + 1] = 0; }), "port 0");
  expect_bad(broken([](UniqueId& id) { std::memset(id.bytes + id_layout::kAddress, 0, 4); }), "no root address");
  expect_bad(broken([](UniqueId& id) { id.bytes[100] = 1; }), "non-zero");
  expect_bad(broken([](UniqueId& id) { id.bytes[id_layout::kAddress + 7] = 1; }), "non-zero");
  expect_bad(broken([](UniqueId& id) { std::memset(id.bytes + id_layout::kToken, 0, 16); }), "token");
  expect_bad(validate_unique_id(UniqueId{}), "magic");

  // rendezvous checks the id too.
  UniqueId bad = good;
  bad.bytes[1] = 'Q';
  auto t = rendezvous(bad, 0, 1, "x", seconds(1));
  EXPECT_EQ(t.status().code(), Code::kInvalidArgument);
}

TEST_F(UniqueIdTest, LayoutOfACreatedId) {
  const UniqueId id = local_id(seconds(5));
  ASSERT_TRUE(validate_unique_id(id).is_ok());
  EXPECT_EQ(std::memcmp(id.bytes, "GWID", 4), 0);
  EXPECT_EQ(id.bytes[4], 1);
  EXPECT_EQ(id.bytes[5], 4);
  EXPECT_NE(id_port(id), 0);
  const uint8_t lo[4] = {127, 0, 0, 1};
  EXPECT_EQ(std::memcmp(id.bytes + 8, lo, 4), 0);
  // Two ids never share a token.
  const UniqueId other = local_id(seconds(5));
  EXPECT_NE(std::memcmp(id.bytes + 24, other.bytes + 24, 16), 0);
  for (const UniqueId* u : {&id, &other}) ASSERT_TRUE(rendezvous(*u, 0, 1, "", seconds(5)).is_ok());
  EXPECT_TRUE(roots_idle());
}

// Sets (or unsets, with nullptr) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_.c_str(), old_->c_str(), 1);
    else unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

std::string id_host(const UniqueId& id) { return unique_id_endpoint(id).host(); }

TEST_F(UniqueIdTest, AddressComesFromOptionsThenEnvironmentThenInterfaces) {
  ScopedEnv no_addr("GW_SOCKET_ADDR", nullptr);
  ScopedEnv no_if("GW_SOCKET_IFNAME", nullptr);
  RootOptions quick;
  quick.timeout = seconds(5);
  auto finish = [](const UniqueId& id) {
    auto t = rendezvous(id, 0, 1, "me", seconds(5));
    EXPECT_TRUE(t.is_ok()) << t.status().to_string();
  };
  {
    ScopedEnv addr("GW_SOCKET_ADDR", "127.0.0.1");
    auto id = create_unique_id(quick);
    ASSERT_TRUE(id.is_ok()) << id.status().to_string();
    EXPECT_EQ(id_host(*id), "127.0.0.1");
    finish(*id);
  }
  {
    ScopedEnv ifname("GW_SOCKET_IFNAME", "lo");
    auto id = create_unique_id(quick);
    ASSERT_TRUE(id.is_ok()) << id.status().to_string();
    EXPECT_EQ(id_host(*id), "127.0.0.1");
    finish(*id);
  }
  {
    ScopedEnv ifname("GW_SOCKET_IFNAME", "no-such-if0");
    auto id = create_unique_id(quick);
    ASSERT_FALSE(id.is_ok());
    EXPECT_EQ(id.status().code(), Code::kInvalidArgument);
    EXPECT_TRUE(contains(id.status().message(), "GW_SOCKET_IFNAME")) << id.status().to_string();
  }
  {
    ScopedEnv addr("GW_SOCKET_ADDR", "not a host!");
    auto id = create_unique_id(quick);
    ASSERT_FALSE(id.is_ok());
    EXPECT_EQ(id.status().code(), Code::kInvalidArgument);
    EXPECT_TRUE(contains(id.status().message(), "GW_SOCKET_ADDR")) << id.status().to_string();
  }
  {
    ScopedEnv addr("GW_SOCKET_ADDR", "0.0.0.0");
    EXPECT_EQ(create_unique_id(quick).status().code(), Code::kInvalidArgument);
  }
  {
    // Nothing set: the first non-loopback IPv4 interface (this machine's own), else loopback.
    auto id = create_unique_id(quick);
    ASSERT_TRUE(id.is_ok()) << id.status().to_string();
    auto expected = interface_address("");
    EXPECT_EQ(id_host(*id), expected.is_ok() ? expected->host() : std::string("127.0.0.1"));
    finish(*id);
  }
  {
    RootOptions bad = quick;
    bad.timeout = milliseconds(0);
    bad.address = "127.0.0.1";
    EXPECT_EQ(create_unique_id(bad).status().code(), Code::kInvalidArgument);
  }
  EXPECT_TRUE(roots_idle());
}

TEST_F(UniqueIdTest, IPv6Loopback) {
  RootHost host(seconds(5), "::1");
  if (!host.ok()) GTEST_SKIP() << "no IPv6 loopback here: " << host.error();
  const UniqueId uid = host.id();
  EXPECT_EQ(uid.bytes[5], 6);
  EXPECT_TRUE(validate_unique_id(uid).is_ok());
  EXPECT_EQ(unique_id_endpoint(uid).host(), "::1");
  const auto codes = run_forked(2, [&](int r) { return rank_main(uid, r, 2); });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
  EXPECT_EQ(host.wait_exit(), 0);
}

}  // namespace
}  // namespace gw::bootstrap
