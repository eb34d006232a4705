// SHA-256 and HMAC-SHA256 against the published vectors (FIPS 180 examples, RFC 4231), the
// handshake's MACs, the pure frame parsers on good and hostile bytes, and the fuzzer's seed
// corpus (tests/fuzz/corpus/bootstrap_frames), which must be what the encoders write today.
#include <gtest/gtest.h>

#include <dirent.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "transport/bootstrap/frames.hpp"
#include "transport/bootstrap/hmac_sha256.hpp"

namespace gw::bootstrap {
namespace {

std::string hex(const uint8_t* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += d[p[i] >> 4];
    s += d[p[i] & 15];
  }
  return s;
}

std::string sha_hex(const std::string& m) {
  uint8_t out[kSha256Bytes];
  sha256(m.data(), m.size(), out);
  return hex(out, sizeof out);
}

std::string hmac_hex(const std::string& key, const std::string& m) {
  uint8_t out[kSha256Bytes];
  hmac_sha256(key.data(), key.size(), m.data(), m.size(), out);
  return hex(out, sizeof out);
}

const uint8_t* u8(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

// ---- SHA-256 and HMAC-SHA256 ---------------------------------------------------------------

TEST(Sha256, Fips180Examples) {
  EXPECT_EQ(sha_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(
      sha_hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnop"
              "qrstnopqrstu"),
      "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(sha_hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Lengths around the padding boundaries (digests from Python's hashlib).
TEST(Sha256, PaddingBoundaries) {
  const std::map<size_t, std::string> want = {
      {55, "e7313d333c272e639f790978283f9eb392e843d0f29b7016828bb1daa4aac70b"},
      {56, "4324d65f3c103567f5589c710bc08f8523f929a9272e3af36fc968e52abc6c27"},
      {63, "81c80242132f230c3bd41b3e63bbcff16107339549214a99614ff26664625055"},
      {64, "39e3d7b6b5d075d37d053ad89b24b41bef4f3c29760c84447cab3f3be1882241"},
      {65, "aacca6ff74fdbb296d165a45cecfa04e5127bc008770fbbdd48006f2d2fae95e"},
      {119, "9ce7368e4daf32341631b492e80359dc9f594b48453cd0dd5bf0b19279cc177e"},
      {120, "7836b787757e95e58b3ca5aec90b1b004e8deba1e50e9675af9cabf1a13a04b5"},
      {128, "d2742f1f4ac6bb7ca2b239ee18402ba8b3f9f8e652d2a72973c2b9ba11c08cf6"},
  };
  for (const auto& [n, digest] : want) {
    std::string m(n, '\0');
    for (size_t i = 0; i < n; ++i) m[i] = static_cast<char>((i * 7 + 3) & 0xff);
    EXPECT_EQ(sha_hex(m), digest) << n << " bytes";
  }
}

TEST(Sha256, UpdatesInPiecesGiveTheSameDigest) {
  std::string m(1000, '\0');
  for (size_t i = 0; i < m.size(); ++i) m[i] = static_cast<char>(i * 31 + 7);
  const std::string whole = sha_hex(m);
  for (size_t piece : {1, 3, 55, 63, 64, 65, 200}) {
    Sha256 s;
    for (size_t off = 0; off < m.size(); off += piece) s.update(m.data() + off, std::min(piece, m.size() - off));
    uint8_t out[kSha256Bytes];
    s.final(out);
    EXPECT_EQ(hex(out, sizeof out), whole) << "pieces of " << piece;
  }
}

TEST(HmacSha256, Rfc4231Vectors) {
  std::string key4;
  for (int i = 1; i <= 25; ++i) key4 += static_cast<char>(i);
  EXPECT_EQ(hmac_hex(std::string(20, '\x0b'), "Hi There"),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(hmac_hex("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(hmac_hex(std::string(20, '\xaa'), std::string(50, '\xdd')),
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  EXPECT_EQ(hmac_hex(key4, std::string(50, '\xcd')),
            "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  // Test case 5 is truncated to 128 bits.
  EXPECT_EQ(hmac_hex(std::string(20, '\x0c'), "Test With Truncation").substr(0, 32),
            "a3b6167473100ee06e0c796c2955552b");
  EXPECT_EQ(hmac_hex(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First"),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  EXPECT_EQ(hmac_hex(std::string(131, '\xaa'),
                     "This is a test using a larger than block-size key and a larger than block-size data. The key "
                     "needs to be hashed before being used by the HMAC algorithm."),
            "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

TEST(HmacSha256, ConstantTimeCompare) {
  const uint8_t a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 3, 5};
  EXPECT_TRUE(equal_constant_time(a, a, 4));
  EXPECT_FALSE(equal_constant_time(a, b, 4));
  EXPECT_TRUE(equal_constant_time(a, b, 3));
  EXPECT_TRUE(equal_constant_time(a, b, 0));
}

// ---- the frames ------------------------------------------------------------------------------

const uint8_t kToken[16] = {0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe, 1, 2, 3, 4, 5, 6, 7, 8};
const uint8_t kRootNonce[32] = {0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa};
const uint8_t kRankNonce[32] = {0xb0, 0xb1, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xb8, 0xb9, 0xba};

using frames::Verdict;

TEST(Frames, HelloParsesOnlyWhenWhole) {
  const std::string h = frames::encode_hello(kRankNonce);
  ASSERT_EQ(h.size(), frames::kHelloBytes);
  for (size_t k = 0; k < h.size(); ++k) EXPECT_EQ(frames::parse_hello(u8(h), k).verdict, Verdict::kNeedMore) << k;
  const frames::Hello ok = frames::parse_hello(u8(h), h.size());
  ASSERT_EQ(ok.verdict, Verdict::kOk);
  EXPECT_EQ(ok.version, frames::kVersion);
  EXPECT_EQ(std::memcmp(ok.nonce, kRankNonce, 32), 0);
  // Bytes out of turn, another magic, another version (known from the first 8 bytes).
  EXPECT_EQ(frames::parse_hello(u8(h + "x"), h.size() + 1).verdict, Verdict::kBad);
  EXPECT_EQ(frames::parse_hello(u8("GWBX"), 4).verdict, Verdict::kBad);
  EXPECT_EQ(frames::parse_hello(u8("GX"), 2).verdict, Verdict::kBad);
  const std::string v1 = frames::encode_hello(kRankNonce, 1).substr(0, frames::kHelloPrefix);
  const frames::Hello old = frames::parse_hello(u8(v1), v1.size());
  EXPECT_EQ(old.verdict, Verdict::kOk);
  EXPECT_EQ(old.version, 1);
}

TEST(Frames, AuthCarriesAMacOverTheNoncesAndFields) {
  const std::string a = frames::encode_auth(kToken, kRootNonce, kRankNonce, 3, 8, "blob bytes");
  ASSERT_EQ(a.size(), frames::kAuthFixed + 10 + frames::kMacBytes);
  for (size_t k = 0; k < a.size(); ++k) EXPECT_EQ(frames::parse_auth(u8(a), k).verdict, Verdict::kNeedMore) << k;
  const frames::Auth p = frames::parse_auth(u8(a), a.size());
  ASSERT_EQ(p.verdict, Verdict::kOk);
  EXPECT_EQ(p.rank, 3u);
  EXPECT_EQ(p.nranks, 8u);
  EXPECT_EQ(p.blob_len, 10u);
  EXPECT_EQ(p.size, a.size());
  EXPECT_TRUE(frames::verify_auth(kToken, kRootNonce, kRankNonce, u8(a), a.size()));
  // Another token, other nonces (a replay), any flipped bit: no.
  uint8_t other[16];
  std::memcpy(other, kToken, 16);
  other[15] ^= 1;
  EXPECT_FALSE(frames::verify_auth(other, kRootNonce, kRankNonce, u8(a), a.size()));
  uint8_t fresh[32];
  std::memcpy(fresh, kRootNonce, 32);
  fresh[31] = 1;
  EXPECT_FALSE(frames::verify_auth(kToken, fresh, kRankNonce, u8(a), a.size()));
  EXPECT_FALSE(frames::verify_auth(kToken, kRankNonce, kRootNonce, u8(a), a.size()));
  for (size_t i = 4; i < a.size(); i += 5) {
    std::string t = a;
    t[i] = static_cast<char>(t[i] ^ 0x20);
    EXPECT_FALSE(frames::verify_auth(kToken, kRootNonce, kRankNonce, u8(t), t.size())) << "byte " << i;
  }
  // The token is nowhere in it.
  EXPECT_EQ(a.find(std::string(reinterpret_cast<const char*>(kToken), 16)), std::string::npos);
  // Shape errors: bytes past the end, a blob over the limit, another magic.
  EXPECT_EQ(frames::parse_auth(u8(a + "z"), a.size() + 1).verdict, Verdict::kBad);
  std::string big = a;
  frames::put_u32(reinterpret_cast<uint8_t*>(big.data()) + 12, frames::kMaxBlob + 1);
  EXPECT_EQ(frames::parse_auth(u8(big), frames::kAuthFixed).verdict, Verdict::kBad);
  EXPECT_EQ(frames::parse_auth(u8("GWBH"), 4).verdict, Verdict::kBad);
}

TEST(Frames, ProofAndSessionKeyDependOnEverything) {
  const std::string a = frames::encode_auth(kToken, kRootNonce, kRankNonce, 0, 2, "x");
  const uint8_t* mac = frames::auth_mac(u8(a), a.size());
  uint8_t p1[32], p2[32], k1[32], k2[32];
  frames::root_proof(kToken, kRankNonce, kRootNonce, mac, p1);
  frames::root_proof(kToken, kRootNonce, kRankNonce, mac, p2);
  EXPECT_NE(hex(p1, 32), hex(p2, 32));
  EXPECT_NE(hex(p1, 32), hex(mac, 32)) << "a rank's MAC is not a root's proof";
  const std::string frame = frames::encode_proof(kToken, kRankNonce, kRootNonce, mac);
  ASSERT_EQ(frame.size(), frames::kReplyHeader + 32);
  EXPECT_EQ(frame.substr(frames::kReplyHeader), std::string(reinterpret_cast<const char*>(p1), 32));
  frames::session_key(kToken, kRootNonce, kRankNonce, k1);
  frames::session_key(kToken, kRankNonce, kRootNonce, k2);
  EXPECT_NE(hex(k1, 32), hex(k2, 32));
}

TEST(Frames, ReplyHeadersAreCheckedAgainstTheirKind) {
  auto problem = [](const std::string& frame, uint32_t nranks) {
    std::string why;
    return frames::check_reply_header(frames::parse_reply_header(u8(frame)), nranks, &why);
  };
  using P = frames::HeaderProblem;
  EXPECT_EQ(problem(frames::encode_challenge(kRootNonce), 2), P::kNone);
  EXPECT_EQ(problem(frames::encode_progress(1, 2), 2), P::kNone);
  EXPECT_EQ(problem(frames::encode_error(1, 0, 2, "no"), 2), P::kNone);
  EXPECT_EQ(problem(frames::encode_table({"a", "b"}), 2), P::kNone);
  EXPECT_EQ(problem(frames::encode_table({"abc", "def"}), 3), P::kNone) << "the count is checked with the body";
  EXPECT_EQ(problem(frames::encode_table({"a", "b"}), 3), P::kBadLength) << "too short for 3 entries";
  EXPECT_EQ(problem(frames::encode_table({"a", std::string(70000, 'b')}), 2), P::kNone) << "bounded in sum";
  EXPECT_EQ(problem(frames::encode_table({"a", std::string(200000, 'b')}), 2), P::kBadLength);
  EXPECT_EQ(problem(std::string(16, 'X'), 2), P::kBadMagic);
  std::string h = frames::encode_progress(1, 2);
  frames::put_u16(reinterpret_cast<uint8_t*>(h.data()) + 4, 1);
  EXPECT_EQ(problem(h, 2), P::kBadVersion);
  frames::put_u16(reinterpret_cast<uint8_t*>(h.data()) + 4, frames::kVersion);
  frames::put_u16(reinterpret_cast<uint8_t*>(h.data()) + 6, 77);
  EXPECT_EQ(problem(h, 2), P::kUnknownKind);
  for (uint16_t kind : {frames::kChallenge, frames::kProof, frames::kProgress, frames::kError, frames::kTable}) {
    frames::put_u16(reinterpret_cast<uint8_t*>(h.data()) + 6, kind);
    frames::put_u64(reinterpret_cast<uint8_t*>(h.data()) + 8, uint64_t{1} << 40);
    EXPECT_EQ(problem(h, 2), P::kBadLength) << kind;
    frames::put_u64(reinterpret_cast<uint8_t*>(h.data()) + 8, 7);
    EXPECT_EQ(problem(h, 2), P::kBadLength) << kind;
  }
}

TEST(Frames, TablesRoundTripAndTheirMacCoversEveryByte) {
  uint8_t key[32];
  frames::session_key(kToken, kRootNonce, kRankNonce, key);
  const std::vector<std::string> blobs = {"", "one", std::string(1000, '\xee')};
  const std::string frame = frames::encode_table(blobs, key);
  const uint8_t* p = u8(frame) + frames::kReplyHeader;
  const uint64_t len = frame.size() - frames::kReplyHeader;
  EXPECT_EQ(frames::parse_reply_header(u8(frame)).payload_len, len);
  EXPECT_TRUE(frames::verify_table(key, p, len));
  std::vector<std::string> got;
  std::string why;
  ASSERT_TRUE(frames::parse_table(p, len, 3, &got, &why)) << why;
  EXPECT_EQ(got, blobs);
  EXPECT_FALSE(frames::parse_table(p, len, 2, &got, &why));
  EXPECT_NE(why.find("3 ranks"), std::string::npos) << why;
  for (size_t i = 0; i < len; i += 7) {
    std::string t = frame;
    t[frames::kReplyHeader + i] = static_cast<char>(t[frames::kReplyHeader + i] ^ 1);
    EXPECT_FALSE(frames::verify_table(key, u8(t) + frames::kReplyHeader, len)) << "byte " << i;
  }
  uint8_t other[32];
  frames::session_key(kToken, kRankNonce, kRootNonce, other);
  EXPECT_FALSE(frames::verify_table(other, p, len)) << "another connection's key";
}

std::string u32(uint32_t v) {
  std::string s(4, '\0');
  frames::put_u32(reinterpret_cast<uint8_t*>(s.data()), v);
  return s;
}

TEST(Frames, MalformedTablesSayWhat) {
  const std::string mac(32, 'm');
  auto why_of = [&](const std::string& body, uint32_t nranks) {
    const std::string payload = body + mac;
    std::vector<std::string> t;
    std::string why;
    EXPECT_FALSE(frames::parse_table(u8(payload), payload.size(), nranks, &t, &why)) << body.size();
    return why;
  };
  EXPECT_NE(why_of(u32(2) + u32(70000) + std::string(4, 'x'), 2).find("70000 bytes"), std::string::npos);
  EXPECT_NE(why_of(u32(2) + u32(50) + "abc" + u32(0), 2).find("table entry"), std::string::npos);
  EXPECT_NE(why_of(u32(2) + u32(3) + "abc" + u32(0) + "t", 2).find("trailing"), std::string::npos);
  EXPECT_NE(why_of(u32(2), 2).find("impossible"), std::string::npos);
  EXPECT_NE(why_of(u32(1) + u32(0) + u32(0), 2).find("1 ranks"), std::string::npos);
}

TEST(Frames, ProgressAndErrorPayloads) {
  frames::Progress pr;
  std::string why;
  std::string f = frames::encode_progress(2, 3);
  EXPECT_TRUE(frames::parse_progress(u8(f) + 16, 8, 3, &pr, &why));
  EXPECT_EQ(pr.arrived, 2u);
  EXPECT_FALSE(frames::parse_progress(u8(f) + 16, 8, 4, &pr, &why));
  EXPECT_NE(why.find("for a job of 4"), std::string::npos) << why;
  f = frames::encode_progress(5, 3);
  EXPECT_FALSE(frames::parse_progress(u8(f) + 16, 8, 3, &pr, &why));
  EXPECT_FALSE(frames::parse_progress(u8(f) + 16, 7, 3, &pr, &why));

  frames::Error e;
  f = frames::encode_error(frames::kErrTimeout, 1, 2, std::string("late\n\x1b[31mred\x7f"));
  ASSERT_TRUE(frames::parse_error(u8(f) + 16, f.size() - 16, &e, &why));
  EXPECT_EQ(e.code, frames::kErrTimeout);
  EXPECT_EQ(e.text, "late  [31mred ");
  EXPECT_FALSE(frames::parse_error(u8(f) + 16, 11, &e, &why));
  EXPECT_EQ(frames::encode_error(1, 0, 0, std::string(10000, 'q')).size(), 16 + 12 + frames::kMaxErrorText);
}

// ---- the fuzzer's seeds ----------------------------------------------------------------------

// The seed corpus of tests/fuzz/fuzz_bootstrap_frames.cpp: every frame either side receives,
// as the encoders write it, plus an old version-1 hello.
std::map<std::string, std::string> seeds() {
  uint8_t key[32];
  frames::session_key(kToken, kRootNonce, kRankNonce, key);
  const std::string auth = frames::encode_auth(kToken, kRootNonce, kRankNonce, 1, 2, "tcp://10.0.0.2:4321/ucx-worker");
  std::string v1(36, '\0');
  std::memcpy(v1.data(), "GWBH", 4);
  frames::put_u16(reinterpret_cast<uint8_t*>(v1.data()) + 4, 1);
  frames::put_u32(reinterpret_cast<uint8_t*>(v1.data()) + 28, 2);
  frames::put_u32(reinterpret_cast<uint8_t*>(v1.data()) + 32, 3);
  v1 += "abc";
  const std::string table2 = frames::encode_table({"rank-0-address", "tcp://10.0.0.2:4321/ucx-worker"}, key);
  return {
      {"hello", frames::encode_hello(kRankNonce)},
      {"hello_v1", v1},
      {"auth", auth},
      {"auth_empty_blob", frames::encode_auth(kToken, kRootNonce, kRankNonce, 0, 1, "")},
      {"rank_stream",
       frames::encode_challenge(kRootNonce) +
           frames::encode_proof(kToken, kRankNonce, kRootNonce, frames::auth_mac(u8(auth), auth.size())) +
           frames::encode_progress(1, 2) + frames::encode_progress(2, 2) + table2},
      {"table_3_ranks", frames::encode_table({"", "x", std::string(300, '\x7f')}, key)},
      {"table_payload", table2.substr(frames::kReplyHeader)},
      {"error_rejected", frames::encode_error(frames::kErrRejected, 1, 2, "rank 1 of 2 has already joined")},
      {"error_timeout", frames::encode_progress(1, 3) + frames::encode_error(frames::kErrTimeout, 1, 3, "timed out")},
  };
}

TEST(Frames, SeedCorpus) {
  const std::string dir = GW_BOOTSTRAP_CORPUS_DIR;
  const bool write = std::getenv("GW_WRITE_FUZZ_CORPUS") != nullptr;
  for (const auto& [name, bytes] : seeds()) {
    const std::string path = dir + "/" + name;
    if (write) {
      std::ofstream(path, std::ios::binary) << bytes;
      continue;
    }
    std::ifstream in(path, std::ios::binary);
    ASSERT_TRUE(in.good()) << path << " is missing; regenerate with GW_WRITE_FUZZ_CORPUS=1";
    std::stringstream got;
    got << in.rdbuf();
    EXPECT_EQ(got.str(), bytes) << path << " is not what the encoders write; regenerate with GW_WRITE_FUZZ_CORPUS=1";
  }
}

}  // namespace
}  // namespace gw::bootstrap
