// The unique-id rendezvous between real processes: forked ranks meet at a root thread in the
// test process. Also strays, replayed hellos, silent connections, missing and duplicate ranks,
// fake roots (one that only listens, one with another token, malformed and tampered replies),
// and a root whose process exits. Nothing may hang: every child has an
// alarm(), the parent kills what outlives its deadline, and the test process itself has one.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/log.hpp"
#include "tests/bootstrap/fork_util.hpp"
#include "transport/bootstrap/bootstrap.hpp"
#include "transport/bootstrap/frames.hpp"
#include "transport/bootstrap/hmac_sha256.hpp"
#include "transport/bootstrap/root_server.hpp"
#include "transport/bootstrap/socket.hpp"
#include "transport/bootstrap/unique_id.hpp"

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
          const std::string msg = id.is_ok()
                                      ? "+" + std::string(reinterpret_cast<const char*>(id->bytes), kUniqueIdBytes)
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

// ---- a rank by hand ----------------------------------------------------------------------------

const uint8_t* id_token(const UniqueId& id) { return unique_id_token(id); }

struct Reply {
  uint16_t kind = 0;
  std::string payload;
};

// Reads one reply frame; false on the end of the stream, a timeout or a bad header.
bool read_reply(int fd, Reply* r, milliseconds wait = seconds(5)) {
  uint8_t head[frames::kReplyHeader];
  const auto deadline = Clock::now() + wait;
  if (!read_exact(fd, head, sizeof head, deadline).is_ok()) return false;
  const frames::ReplyHeader h = frames::parse_reply_header(head);
  if (std::memcmp(h.magic, frames::kReplyMagic, 4) != 0 || h.payload_len > (1u << 20)) return false;
  r->kind = h.kind;
  r->payload.assign(static_cast<size_t>(h.payload_len), '\0');
  return read_exact(fd, r->payload.data(), r->payload.size(), deadline).is_ok();
}

// One connection to a root, driven by hand: hello, then the root's challenge.
struct HandRank {
  int fd = -1;
  uint8_t rank_nonce[frames::kNonceBytes] = {};
  uint8_t root_nonce[frames::kNonceBytes] = {};
  std::string hello;

  // Connects and says hello; true once the challenge is in.
  bool start(uint16_t port) {
    fd = raw_connect(port);
    if (fd < 0 || !set_nonblocking(fd).is_ok()) return false;
    if (!random_bytes(rank_nonce, sizeof rank_nonce).is_ok()) return false;
    hello = frames::encode_hello(rank_nonce);
    if (!raw_send(fd, hello)) return false;
    Reply r;
    if (!read_reply(fd, &r) || r.kind != frames::kChallenge || r.payload.size() != frames::kNonceBytes) return false;
    std::memcpy(root_nonce, r.payload.data(), frames::kNonceBytes);
    return true;
  }
  std::string auth(const uint8_t* token, uint32_t rank, uint32_t nranks, const std::string& blob) const {
    return frames::encode_auth(token, root_nonce, rank_nonce, rank, nranks, blob);
  }
  // Reads the proof and checks it against `token` and the auth frame sent.
  bool proof_ok(const uint8_t* token, const std::string& sent) const {
    Reply r;
    if (!read_reply(fd, &r) || r.kind != frames::kProof || r.payload.size() != frames::kMacBytes) return false;
    uint8_t want[frames::kMacBytes];
    frames::root_proof(token, rank_nonce, root_nonce,
                       frames::auth_mac(reinterpret_cast<const uint8_t*>(sent.data()), sent.size()), want);
    return std::memcmp(want, r.payload.data(), sizeof want) == 0;
  }
};

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

  // The whole handshake, with the wrong token.
  uint8_t forged[16];
  std::memcpy(forged, id_token(id), 16);
  forged[3] ^= 0x40;
  HandRank stray;
  ASSERT_TRUE(stray.start(port));
  const std::string stray_name = local_name(stray.fd);
  raw_send(stray.fd, stray.auth(forged, 0, 2, "stolen"));

  std::string got_junk, got_stray;
  EXPECT_TRUE(read_to_eof(junk, &got_junk, seconds(5))) << "the root kept a junk connection open";
  EXPECT_TRUE(read_to_eof(stray.fd, &got_stray, seconds(5))) << "the root kept a forged auth open";
  EXPECT_TRUE(got_junk.empty());
  EXPECT_TRUE(got_stray.empty()) << "a connection without the token learns nothing but its challenge";
  close(junk);
  close(stray.fd);

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
  const uint8_t nonce[frames::kNonceBytes] = {1};
  raw_send(stalled, frames::encode_hello(nonce).substr(0, 20));
  // One that has its challenge and never answers it.
  HandRank challenged;
  ASSERT_TRUE(challenged.start(port));

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
  EXPECT_TRUE(read_to_eof(challenged.fd, nullptr, seconds(5)));
  close(challenged.fd);
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
    if (!contains(t.status().message(), "2 of 3 ranks arrived") || !contains(t.status().message(), "missing: 2"))
      return 4;
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
  HandRank hand;
  ASSERT_TRUE(hand.start(id_port(id)));
  const std::string auth = hand.auth(id_token(id), 0, 2, "first try");
  raw_send(hand.fd, auth);
  // Wait for the proof and the acknowledgement (a progress frame), then leave.
  ASSERT_TRUE(hand.proof_ok(id_token(id), auth));
  Reply ack;
  ASSERT_TRUE(read_reply(hand.fd, &ack));
  EXPECT_EQ(ack.kind, frames::kProgress);
  ASSERT_EQ(ack.payload.size(), frames::kProgressPayload);
  EXPECT_EQ(frames::get_u32(reinterpret_cast<const uint8_t*>(ack.payload.data())), 1u);      // arrived
  EXPECT_EQ(frames::get_u32(reinterpret_cast<const uint8_t*>(ack.payload.data()) + 4), 2u);  // nranks
  close(hand.fd);
  std::this_thread::sleep_for(milliseconds(200));
  const auto codes = run_forked(2, [&](int r) { return rank_main(id, r, 2); });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
  EXPECT_EQ(host.wait_exit(), 0);
}

// The error code of the error frame that ends `got` (or -1).
long error_code_in(const std::string& got) {
  const size_t at = got.rfind(std::string(reinterpret_cast<const char*>(frames::kReplyMagic), 4));
  if (at == std::string::npos || got.size() - at < frames::kReplyHeader + frames::kErrorPayloadFixed) return -1;
  const auto* p = reinterpret_cast<const uint8_t*>(got.data()) + at;
  const frames::ReplyHeader h = frames::parse_reply_header(p);
  if (h.kind != frames::kError || h.payload_len != got.size() - at - frames::kReplyHeader) return -1;
  return frames::get_u32(p + frames::kReplyHeader);
}

// Authenticates with the job's token, sends these fields and returns the error code the root
// answers with after its proof (or -1).
long error_code_for(const UniqueId& id, uint32_t rank, uint32_t nranks, const std::string& blob = "x") {
  HandRank hand;
  if (!hand.start(id_port(id))) return -1;
  const std::string auth = hand.auth(id_token(id), rank, nranks, blob);
  raw_send(hand.fd, auth);
  const bool proven = hand.proof_ok(id_token(id), auth);
  std::string got;
  const bool eof = read_to_eof(hand.fd, &got, seconds(5));
  close(hand.fd);
  return proven && eof ? error_code_in(got) : -1;
}

TEST_F(Rendezvous, HellosWithTheTokenButBadFieldsGetAnError) {
  const UniqueId id = local_id();
  EXPECT_EQ(error_code_for(id, 5, 2), long{frames::kErrRejected});
  EXPECT_EQ(error_code_for(id, 0, 0), long{frames::kErrRejected});
  EXPECT_EQ(error_code_for(id, 0, 70000), long{frames::kErrRejected});
  // Another protocol version (a version-1 rank's hello begins with the same 8 bytes) gets the
  // version error at once, and nothing else.
  for (uint16_t version : {uint16_t{1}, uint16_t{3}}) {
    const int fd = raw_connect(id_port(id));
    ASSERT_GE(fd, 0);
    const uint8_t nonce[frames::kNonceBytes] = {};
    raw_send(fd, frames::encode_hello(nonce, version));
    std::string got;
    EXPECT_TRUE(read_to_eof(fd, &got, seconds(5)));
    close(fd);
    EXPECT_EQ(error_code_in(got), long{frames::kErrVersion}) << "version " << version;
    EXPECT_EQ(got.find(std::string(reinterpret_cast<const char*>(frames::kReplyMagic), 4)), 0u) << "only the error";
  }
  // A blob over the limit cannot be authenticated: closed unread, nothing beyond the challenge.
  {
    HandRank hand;
    ASSERT_TRUE(hand.start(id_port(id)));
    std::string big = hand.auth(id_token(id), 0, 2, "");
    frames::put_u32(reinterpret_cast<uint8_t*>(big.data()) + 12, frames::kMaxBlob + 1);
    raw_send(hand.fd, big.substr(0, frames::kAuthFixed));
    std::string got;
    EXPECT_TRUE(read_to_eof(hand.fd, &got, seconds(5)));
    EXPECT_TRUE(got.empty());
    close(hand.fd);
  }
  // None of that disturbed the job.
  auto t = rendezvous(id, 0, 1, "fine", seconds(5));
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ((*t)[0], "fine");
  EXPECT_TRUE(roots_idle());
}

// A stranger who captured a rank's hello and auth frame (on another connection: of this job, or
// of an earlier one with the same token) replays them: the root's fresh challenge makes the MAC
// wrong, and the replay learns nothing.
TEST_F(Rendezvous, ReplayedHelloIsRejected) {
  ::testing::internal::CaptureStderr();
  RootHost host;
  ASSERT_TRUE(host.ok()) << host.error();
  const UniqueId id = host.id();
  // The genuine conversation, as seen on the wire.
  HandRank genuine;
  ASSERT_TRUE(genuine.start(id_port(id)));
  const std::string auth = genuine.auth(id_token(id), 1, 2, blob_for(1));
  raw_send(genuine.fd, auth);
  ASSERT_TRUE(genuine.proof_ok(id_token(id), auth));
  close(genuine.fd);  // rank 1's slot is open again
  std::this_thread::sleep_for(milliseconds(200));

  // The replay: the same hello and the same auth frame on a new connection.
  const int fd = raw_connect(id_port(id));
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(set_nonblocking(fd).is_ok());
  const std::string replayer = local_name(fd);
  raw_send(fd, genuine.hello);
  Reply challenge;
  ASSERT_TRUE(read_reply(fd, &challenge));
  ASSERT_EQ(challenge.kind, frames::kChallenge);
  EXPECT_NE(std::memcmp(challenge.payload.data(), genuine.root_nonce, frames::kNonceBytes), 0) << "a nonce came back";
  raw_send(fd, auth);
  std::string got;
  EXPECT_TRUE(read_to_eof(fd, &got, seconds(5))) << "the root kept a replayed auth open";
  EXPECT_TRUE(got.empty()) << "a replay must learn nothing (no proof, no progress)";
  close(fd);

  // The slot the replay asked for is still free for the real rank 1.
  const auto codes = run_forked(2, [&](int r) { return rank_main(id, r, 2); });
  EXPECT_EQ(host.wait_exit(), 0);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
  if (!log::enabled(log::Level::kWarn)) GTEST_SKIP() << "GW_DEBUG hides warnings";
  EXPECT_TRUE(contains(log, "rejected connection from " + replayer + ": wrong token")) << log;
}

TEST_F(Rendezvous, InvalidArgumentsFailBeforeAnyNetworking) {
  uint8_t token[16] = {1, 2, 3};
  const UniqueId id = make_unique_id(Endpoint::loopback_v4(1), token);  // nobody listens there
  const std::string ok_blob = "b";
  struct Case {
    int rank, nranks;
    size_t blob;
  };
  for (const Case c :
       {Case{0, 0, 1}, Case{0, -1, 1}, Case{0, 65537, 1}, Case{-1, 2, 1}, Case{2, 2, 1}, Case{0, 2, 65537}}) {
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

// ---- fake roots: the rank distrusts what it reads --------------------------------------------

const uint8_t kFakeToken[16] = {0x5a, 0x17, 0xc3, 0x88, 0x21, 0xfe, 0x04, 0x9b,
                                0x6d, 0x30, 0xe2, 0x7f, 0x11, 0xa6, 0x4c, 0xd9};

// What a fake root learned from the rank's hello and auth frame: enough to answer as a root
// holding kFakeToken (the rank's token) would.
struct Session {
  uint8_t rank_nonce[frames::kNonceBytes] = {};
  uint8_t root_nonce[frames::kNonceBytes] = {};
  uint8_t rank_mac[frames::kMacBytes] = {};
  uint8_t key[frames::kMacBytes] = {};  // the table's key
};

struct FakeOptions {
  bool challenge = true;    // false: answer the hello with the reply itself
  bool close_after = true;  // false: wait for the rank to hang up
  milliseconds timeout = seconds(3);
};

struct FakeRun {
  Result<std::vector<std::string>> result;
  std::string where;     // the fake root's host:port
  std::string received;  // every byte the rank sent
  Clock::duration took{};
};

using Script = std::function<std::string(const Session&)>;

// A fake root (a plain listening socket) for one rank 0 of 2 holding kFakeToken with blob "abc":
// it reads the hello, sends a challenge, reads the auth frame, answers with script(session), and
// closes (or waits for the rank to hang up).
FakeRun fake_root(const Script& script, const FakeOptions& o = FakeOptions()) {
  Endpoint ep = Endpoint::loopback_v4(0);
  auto listener = listen_on(ep, 16);
  if (!listener.is_ok()) return FakeRun{listener.status(), "", "", {}};
  const UniqueId id = make_unique_id(ep, kFakeToken);
  const int lfd = listener->fd();
  std::string received;
  std::thread fake([&] {
    pollfd p{lfd, POLLIN, 0};
    if (poll(&p, 1, 5000) <= 0) return;
    const int fd = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    const auto deadline = Clock::now() + seconds(5);
    Session s;
    std::string hello(frames::kHelloBytes, '\0');
    bool go = read_exact(fd, hello.data(), hello.size(), deadline).is_ok();
    if (go) {
      received += hello;
      std::memcpy(s.rank_nonce, hello.data() + 8, frames::kNonceBytes);
    }
    if (go && o.challenge) {
      go = random_bytes(s.root_nonce, sizeof s.root_nonce).is_ok() &&
           raw_send(fd, frames::encode_challenge(s.root_nonce));
      std::string auth(frames::kAuthFixed, '\0');
      go = go && read_exact(fd, auth.data(), auth.size(), deadline).is_ok();
      if (go) {
        const uint32_t blob_len = frames::get_u32(reinterpret_cast<const uint8_t*>(auth.data()) + 12);
        auth.resize(frames::kAuthFixed + blob_len + frames::kMacBytes);
        go = read_exact(fd, auth.data() + frames::kAuthFixed, auth.size() - frames::kAuthFixed, deadline).is_ok();
      }
      if (go) {
        received += auth;
        std::memcpy(s.rank_mac, auth.data() + auth.size() - frames::kMacBytes, frames::kMacBytes);
        frames::session_key(kFakeToken, s.root_nonce, s.rank_nonce, s.key);
      }
    }
    if (go) {
      raw_send(fd, script(s));
      if (!o.close_after) read_to_eof(fd, &received, seconds(6));
    }
    close(fd);
  });
  const auto start = Clock::now();
  FakeRun run{rendezvous(id, 0, 2, "abc", o.timeout), ep.to_string(), "", {}};
  run.took = Clock::now() - start;
  fake.join();
  run.received = received;
  return run;
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

std::string proof(const Session& s, const uint8_t* token = kFakeToken) {
  return frames::encode_proof(token, s.rank_nonce, s.root_nonce, s.rank_mac);
}

std::string table(const Session& s, const std::vector<std::string>& blobs) {
  return frames::encode_table(blobs, s.key);
}

// A table frame with any body, carrying the right MAC for it.
std::string table_body(const Session& s, const std::string& body) {
  uint8_t digest[kSha256Bytes];
  sha256(body.data(), body.size(), digest);
  return header(frames::kTable, body.size() + frames::kMacBytes) + body + frames::table_mac(s.key, digest);
}

Script fixed(const std::string& bytes) {
  return [bytes](const Session&) { return bytes; };
}

// A genuine proof, then `rest`.
Script proven(const Script& rest) {
  return [rest](const Session& s) { return proof(s) + rest(s); };
}

void expect_failure(const Result<std::vector<std::string>>& r, Code code, const std::string& part) {
  ASSERT_FALSE(r.is_ok()) << "expected " << code_name(code) << " containing '" << part << "'";
  EXPECT_EQ(r.status().code(), code) << r.status().to_string();
  EXPECT_TRUE(contains(r.status().message(), part)) << r.status().to_string();
}

std::string token_bytes(const uint8_t* token) { return std::string(reinterpret_cast<const char*>(token), 16); }

TEST_F(Rendezvous, FakeRootThatAnswersLikeARootIsBelieved) {
  auto ok = fake_root(proven([](const Session& s) {
    return frames::encode_progress(1, 2) + table(s, {"abc", "peer"});
  }));
  ASSERT_TRUE(ok.result.is_ok()) << ok.result.status().to_string();
  EXPECT_EQ((*ok.result)[1], "peer");
}

// Whoever listens on the port learns nothing it could join with: the token is not in any byte
// the rank sends, and the rank gives up with a clear error.
TEST_F(Rendezvous, TheTokenNeverCrossesTheWire) {
  const std::string token = token_bytes(kFakeToken);
  // A squatter that only listens and reads.
  FakeOptions quiet;
  quiet.challenge = false;
  quiet.close_after = false;
  quiet.timeout = seconds(1);
  const FakeRun a = fake_root(fixed(""), quiet);
  expect_failure(a.result, Code::kTimeout, "never acknowledged");
  EXPECT_LT(a.took, milliseconds(2500));
  EXPECT_EQ(a.received.size(), frames::kHelloBytes);
  EXPECT_EQ(a.received.find(token), std::string::npos);
  // One that challenges, takes the auth frame and hangs up.
  const FakeRun b = fake_root(fixed(""));
  expect_failure(b.result, Code::kRemote, "closed the connection without proving it holds the job's token");
  EXPECT_TRUE(contains(b.result.status().message(), b.where)) << b.result.status().to_string();
  EXPECT_LT(b.took, seconds(3));
  EXPECT_EQ(b.received.size(), frames::kHelloBytes + frames::kAuthFixed + 3 + frames::kMacBytes);
  EXPECT_EQ(b.received.find(token), std::string::npos);
  // One that bluffs a proof and waits.
  FakeOptions waits;
  waits.close_after = false;
  const FakeRun c = fake_root(fixed(header(frames::kProof, 32) + std::string(32, 'p')), waits);
  expect_failure(c.result, Code::kRemote, "did not prove it holds the job's token");
  EXPECT_LT(c.took, seconds(3));
  EXPECT_EQ(c.received.find(token), std::string::npos);
}

TEST_F(Rendezvous, RootWithoutTheTokenIsDetected) {
  const std::string want = "did not prove it holds the job's token (another job's root, or a stranger on the port)";
  // A root holding another token: its proof is wrong, whatever it sends next.
  uint8_t other[16];
  std::memcpy(other, kFakeToken, 16);
  other[0] ^= 0x80;
  const FakeRun r = fake_root([&](const Session& s) {
    return proof(s, other) + frames::encode_progress(2, 2) + table(s, {"abc", "peer"});
  });
  expect_failure(r.result, Code::kRemote, want);
  EXPECT_TRUE(contains(r.result.status().message(), "the root at " + r.where)) << r.result.status().to_string();
  EXPECT_TRUE(contains(r.result.status().message(), "its proof is wrong")) << r.result.status().to_string();
  // A proof captured from another connection (the right token, other nonces).
  expect_failure(fake_root([](const Session& s) {
                   Session stale = s;
                   stale.rank_nonce[0] ^= 1;
                   return proof(stale);
                 }).result,
                 Code::kRemote, "its proof is wrong");
  // Nothing before the proof is believed: an error, progress, a table (even with a valid MAC).
  expect_failure(fake_root(fixed(frames::encode_error(frames::kErrTimeout, 1, 2, "too late"))).result, Code::kRemote,
                 want);
  expect_failure(fake_root(fixed(frames::encode_progress(1, 2))).result, Code::kRemote, want);
  expect_failure(fake_root([](const Session& s) { return table(s, {"abc", "peer"}); }).result, Code::kRemote, want);
  FakeOptions no_challenge;
  no_challenge.challenge = false;
  expect_failure(fake_root(fixed(frames::encode_error(frames::kErrRejected, 0, 2, "go away")), no_challenge).result,
                 Code::kRemote, want);
  // A real root of another job on that port: it cannot verify this rank and hangs up.
  const UniqueId theirs = local_id(seconds(5));
  uint8_t ours[16];
  std::memcpy(ours, unique_id_token(theirs), 16);
  ours[7] ^= 0x01;
  const Endpoint at = unique_id_endpoint(theirs);
  auto t = rendezvous(make_unique_id(at, ours), 0, 1, "x", seconds(3));
  expect_failure(t, Code::kRemote, "closed the connection without proving it holds the job's token");
  EXPECT_TRUE(contains(t.status().message(), at.to_string())) << t.status().to_string();
  ASSERT_TRUE(rendezvous(theirs, 0, 1, "x", seconds(5)).is_ok()) << "the other job is undisturbed";
  EXPECT_TRUE(roots_idle());
}

TEST_F(Rendezvous, TamperedTableIsRejected) {
  const std::string want = "fails its MAC";
  // One byte of another rank's blob changed on the way.
  expect_failure(fake_root(proven([](const Session& s) {
                   std::string t = table(s, {"abc", "peer"});
                   t[t.size() - frames::kMacBytes - 1] ^= 0x01;
                   return frames::encode_progress(2, 2) + t;
                 })).result,
                 Code::kRemote, want);
  // A rank's entry swapped for another of the same size.
  expect_failure(fake_root(proven([](const Session& s) {
                   std::string t = table(s, {"abc", "peer"});
                   const std::string forged = frames::encode_table({"abc", "evil"});
                   return forged + t.substr(forged.size());
                 })).result,
                 Code::kRemote, want);
  // A table MACed for another connection (replayed from another rank's conversation).
  expect_failure(fake_root(proven([](const Session& s) {
                   Session other = s;
                   other.root_nonce[5] ^= 0x10;
                   frames::session_key(kFakeToken, other.root_nonce, other.rank_nonce, other.key);
                   return table(other, {"abc", "peer"});
                 })).result,
                 Code::kRemote, want);
  // No MAC at all (zeros).
  expect_failure(fake_root(proven([](const Session&) {
                   return frames::encode_table({"abc", "peer"}) + std::string(frames::kMacBytes, '\0');
                 })).result,
                 Code::kRemote, want);
}

TEST_F(Rendezvous, MalformedRepliesAreRejected) {
  auto after_proof = [](const std::string& bytes) { return proven(fixed(bytes)); };
  FakeOptions raw;  // frames instead of the challenge
  raw.challenge = false;
  expect_failure(fake_root(fixed(std::string(16, 'X')), raw).result, Code::kRemote, "bad magic");
  expect_failure(fake_root(fixed(header(frames::kTable, 100, 7)), raw).result, Code::kRemote, "protocol version 7");
  expect_failure(fake_root(fixed(header(frames::kChallenge, 100, 1)), raw).result, Code::kRemote, "protocol version 1");
  expect_failure(fake_root(fixed(header(9, 0)), raw).result, Code::kRemote, "unknown kind");
  expect_failure(fake_root(fixed(header(frames::kChallenge, 31)), raw).result, Code::kRemote,
                 "a challenge of 31 bytes");
  expect_failure(fake_root(fixed(header(frames::kProof, 33))).result, Code::kRemote, "a proof of 33 bytes");
  // Tables that do not fit the job (each with the right MAC for what it holds).
  expect_failure(fake_root(proven([](const Session& s) {
                   return table(s, {"abc", "x", "y"});
                 })).result,
                 Code::kRemote, "3 ranks");
  expect_failure(fake_root(after_proof(header(frames::kTable, uint64_t{1} << 40))).result, Code::kRemote, "impossible");
  expect_failure(fake_root(after_proof(header(frames::kTable, 4))).result, Code::kRemote, "impossible");
  expect_failure(fake_root(proven([](const Session& s) {
                   return table_body(s, u32(2) + u32(70000) + std::string(4, 'x'));
                 })).result,
                 Code::kRemote, "70000 bytes");
  expect_failure(
      fake_root(proven([](const Session& s) { return table_body(s, u32(2) + u32(50) + "abc" + u32(0)); })).result,
      Code::kRemote, "table entry");
  expect_failure(
      fake_root(proven([](const Session& s) { return table_body(s, u32(2) + u32(3) + "abc" + u32(0) + "t"); })).result,
      Code::kRemote, "trailing");
  expect_failure(fake_root(proven([](const Session& s) {
                   return table(s, {"not mine", "peer"});
                 })).result,
                 Code::kRemote, "not the blob");
  // Progress and error frames out of bounds; handshake frames out of turn.
  expect_failure(fake_root(after_proof(header(frames::kProgress, 9))).result, Code::kRemote, "progress frame");
  expect_failure(fake_root(after_proof(frames::encode_progress(1, 5))).result, Code::kRemote, "for a job of 2");
  expect_failure(fake_root(after_proof(frames::encode_progress(3, 2))).result, Code::kRemote, "progress 3 of 2");
  expect_failure(fake_root(after_proof(header(frames::kError, 100000))).result, Code::kRemote, "error frame");
  expect_failure(fake_root(after_proof(header(frames::kError, 4))).result, Code::kRemote, "error frame");
  expect_failure(fake_root(proven([](const Session& s) { return frames::encode_challenge(s.root_nonce); })).result,
                 Code::kRemote, "a challenge after the handshake");
  expect_failure(fake_root(proven([](const Session& s) { return proof(s); })).result, Code::kRemote,
                 "a proof after the handshake");
  // Error frames after the proof mean what they say.
  expect_failure(fake_root(after_proof(frames::encode_error(frames::kErrRejected, 0, 2, "go away"))).result,
                 Code::kRemote, "go away");
  expect_failure(fake_root(after_proof(frames::encode_error(frames::kErrTimeout, 1, 2, "too late"))).result,
                 Code::kTimeout, "too late");
  // A truncated reply, and none at all.
  expect_failure(fake_root(after_proof(frames::encode_progress(1, 2) + header(frames::kTable, 60) + u32(2))).result,
                 Code::kRemote, "closed the connection before the table");
  FakeOptions slow;
  slow.close_after = false;
  slow.timeout = seconds(1);
  const FakeRun none = fake_root(fixed(""), slow);
  expect_failure(none.result, Code::kTimeout, "never proved");
  EXPECT_LT(none.took, seconds(3));
  expect_failure(fake_root(after_proof(frames::encode_progress(1, 2)), slow).result, Code::kTimeout,
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
    if (value != nullptr)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_.c_str(), old_->c_str(), 1);
    else
      unsetenv(name_.c_str());
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
