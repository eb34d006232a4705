// The frames of the rendezvous protocol (root_server.cpp documents them byte by byte), their
// encoders, the MACs of the handshake, and pure parsers for every frame either side receives:
// they check lengths and fields against fixed bounds before anything is trusted or allocated,
// touch no socket, and are what tests/fuzz/fuzz_bootstrap_frames.cpp runs. Little-endian
// throughout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gw::bootstrap::frames {

constexpr uint8_t kHelloMagic[4] = {'G', 'W', 'B', 'H'};
constexpr uint8_t kAuthMagic[4] = {'G', 'W', 'B', 'A'};
constexpr uint8_t kReplyMagic[4] = {'G', 'W', 'B', 'R'};
constexpr uint16_t kVersion = 2;

constexpr size_t kTokenBytes = 16;
constexpr size_t kNonceBytes = 32;
constexpr size_t kMacBytes = 32;

constexpr size_t kHelloBytes = 40;   // the whole hello
constexpr size_t kHelloPrefix = 8;   // magic, version, flags: enough to tell the version
constexpr size_t kAuthFixed = 16;    // auth up to (not including) the blob
constexpr size_t kReplyHeader = 16;  // reply up to (not including) the payload

constexpr uint32_t kMaxBlob = 64 * 1024;
constexpr uint32_t kMaxRanks = 65536;
constexpr uint32_t kMaxErrorText = 4096;

// Reply kinds.
constexpr uint16_t kTable = 1;
constexpr uint16_t kError = 2;
constexpr uint16_t kProgress = 3;
constexpr uint16_t kChallenge = 4;
constexpr uint16_t kProof = 5;

// Error codes carried by an error reply.
constexpr uint32_t kErrRejected = 1;  // bad rank/nranks, duplicate rank, nranks mismatch
constexpr uint32_t kErrTimeout = 2;   // the root's deadline passed before every rank arrived
constexpr uint32_t kErrVersion = 3;   // the hello's protocol version is not ours
constexpr uint32_t kErrShutdown = 4;  // the process hosting the root is exiting
constexpr uint32_t kErrComplete = 5;  // the job is already complete

constexpr size_t kProgressPayload = 8;     // arrived u32, nranks u32
constexpr size_t kErrorPayloadFixed = 12;  // code u32, arrived u32, nranks u32

inline void put_u16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
inline void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint16_t get_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
inline uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
inline uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// How far a parser got with the bytes it was given.
enum class Verdict {
  kOk,        // a whole, well-formed frame
  kNeedMore,  // a valid prefix; more bytes are needed
  kBad,       // not a frame of this protocol: `why` says what is wrong
};

// ---- rank -> root --------------------------------------------------------------------------

// hello: magic, version, flags, the rank's nonce Nc.
std::string encode_hello(const uint8_t nonce[kNonceBytes], uint16_t version = kVersion);

struct Hello {
  Verdict verdict = Verdict::kNeedMore;
  std::string why;
  uint16_t version = 0;  // known once kHelloPrefix bytes are in, even when the rest is not
  uint8_t nonce[kNonceBytes] = {};
};
// Parses the bytes a connection has sent so far. A hello of another version is kOk as soon as
// its prefix is in (the caller answers with a version error); `nonce` is then unset.
Hello parse_hello(const uint8_t* p, size_t n);

// auth: rank, nranks, blob, and the MAC over them that proves the rank holds the token.
std::string encode_auth(const uint8_t token[kTokenBytes], const uint8_t root_nonce[kNonceBytes],
                        const uint8_t rank_nonce[kNonceBytes], uint32_t rank, uint32_t nranks, const std::string& blob);

struct Auth {
  Verdict verdict = Verdict::kNeedMore;
  std::string why;
  uint32_t rank = 0, nranks = 0, blob_len = 0;
  size_t size = 0;  // of the whole frame, once blob_len is known
};
// Parses the bytes received since the hello. Checks only the shape (magic, blob_len bound):
// the fields mean nothing until verify_auth() has passed.
Auth parse_auth(const uint8_t* p, size_t n);
// Whether the MAC at the end of a complete auth frame (p, a.size bytes) is right for this
// token and these nonces. Constant time in the MAC.
bool verify_auth(const uint8_t token[kTokenBytes], const uint8_t root_nonce[kNonceBytes],
                 const uint8_t rank_nonce[kNonceBytes], const uint8_t* p, size_t size);

// ---- root -> rank --------------------------------------------------------------------------

struct ReplyHeader {
  uint8_t magic[4];
  uint16_t version;
  uint16_t kind;
  uint64_t payload_len;
};
ReplyHeader parse_reply_header(const uint8_t* p);  // p holds kReplyHeader bytes

enum class HeaderProblem { kNone, kBadMagic, kBadVersion, kUnknownKind, kBadLength };
// Checks a reply header against the bounds of its kind for a job of nranks (1..kMaxRanks);
// `why` describes a problem.
HeaderProblem check_reply_header(const ReplyHeader& h, uint32_t nranks, std::string* why);

std::string encode_challenge(const uint8_t root_nonce[kNonceBytes]);
// The proof frame a root holding `token` sends after a valid auth whose MAC is `rank_mac`.
std::string encode_proof(const uint8_t token[kTokenBytes], const uint8_t rank_nonce[kNonceBytes],
                         const uint8_t root_nonce[kNonceBytes], const uint8_t rank_mac[kMacBytes]);
// The proof payload itself.
void root_proof(const uint8_t token[kTokenBytes], const uint8_t rank_nonce[kNonceBytes],
                const uint8_t root_nonce[kNonceBytes], const uint8_t rank_mac[kMacBytes], uint8_t out[kMacBytes]);
// The MAC at the end of an auth frame (p, size bytes, MAC included).
inline const uint8_t* auth_mac(const uint8_t* p, size_t size) { return p + size - kMacBytes; }

// The per-connection key of the table's MAC.
void session_key(const uint8_t token[kTokenBytes], const uint8_t root_nonce[kNonceBytes],
                 const uint8_t rank_nonce[kNonceBytes], uint8_t out[kMacBytes]);

// The table frame without its MAC (the same bytes for every rank), the SHA-256 of its body
// (nranks and entries), and the 32-byte MAC that follows it on each connection.
std::string encode_table(const std::vector<std::string>& blobs);
void table_digest(const std::string& table_frame, uint8_t out[kMacBytes]);
std::string table_mac(const uint8_t key[kMacBytes], const uint8_t digest[kMacBytes]);
// Frame and MAC together, for one connection.
std::string encode_table(const std::vector<std::string>& blobs, const uint8_t key[kMacBytes]);

std::string encode_error(uint32_t code, uint32_t arrived, uint32_t nranks, const std::string& text);
std::string encode_progress(uint32_t arrived, uint32_t nranks);

// Payload parsers; `len` bytes at p, a length check_reply_header() accepted for that kind (they
// check it again). Each returns false with `why` set when the payload is not acceptable.
bool parse_nonce_payload(const uint8_t* p, uint64_t len, uint8_t out[kNonceBytes],
                         std::string* why);  // challenge, proof

struct Progress {
  uint32_t arrived = 0, nranks = 0;
};
bool parse_progress(const uint8_t* p, uint64_t len, uint32_t nranks, Progress* out, std::string* why);

struct Error {
  uint32_t code = 0, arrived = 0, nranks = 0;
  std::string text;  // control characters replaced by spaces
};
bool parse_error(const uint8_t* p, uint64_t len, Error* out, std::string* why);

// Whether the MAC at the end of a table payload matches its body for this session's key.
// Constant time in the MAC.
bool verify_table(const uint8_t key[kMacBytes], const uint8_t* p, uint64_t len);
// The blobs of a table payload (its MAC is not checked here).
bool parse_table(const uint8_t* p, uint64_t len, uint32_t nranks, std::vector<std::string>* out, std::string* why);

// The most a table payload for nranks may hold: nranks u32, a u32 length and at most
// kMaxBlob bytes per rank, and the MAC.
inline uint64_t max_table_payload(uint32_t nranks) { return 4 + uint64_t{nranks} * (4 + kMaxBlob) + kMacBytes; }
inline uint64_t min_table_payload(uint32_t nranks) { return 4 + uint64_t{nranks} * 4 + kMacBytes; }

}  // namespace gw::bootstrap::frames
