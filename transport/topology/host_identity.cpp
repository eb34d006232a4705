#include "transport/topology/host_identity.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <fstream>

namespace gw::topo {
namespace {

constexpr char kMagic[4] = {'G', 'W', 'H', '1'};
constexpr size_t kMaxId = 1024;

std::string first_line(const char* path) {
  std::ifstream f(path);
  std::string line;
  if (f) std::getline(f, line);
  return line;
}

std::string ns_inode(const char* path) {
  struct stat st {};
  if (::stat(path, &st) != 0) return "?";
  return std::to_string(static_cast<unsigned long long>(st.st_ino));
}

int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return -1;
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v, &end, 10);
  if (errno != 0 || *end != '\0' || x < 0 || x > (1 << 20)) return -2;
  return static_cast<int>(x);
}

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint32_t get_u32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(s[at + i])) << (8 * i);
  return v;
}

}  // namespace

std::string host_identity() {
  if (const char* forced = std::getenv("GW_HOST_ID"); forced != nullptr && *forced != '\0') {
    return std::string("forced:") + forced;
  }
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return std::string(host) + "|boot:" + first_line("/proc/sys/kernel/random/boot_id") +
         "|net:" + ns_inode("/proc/self/ns/net") + "|ipc:" + ns_inode("/proc/self/ns/ipc");
}

HostInfo local_host_info() {
  HostInfo h;
  h.id = host_identity();
  if (h.id.size() > kMaxId) h.id.resize(kMaxId);
  static const char* const kHints[][2] = {
      {"GW_LOCAL_RANK", "GW_LOCAL_SIZE"},         {"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
      {"LOCAL_RANK", "LOCAL_WORLD_SIZE"},         {"MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
      {"SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
  };
  for (const auto& pair : kHints) {
    const int r = env_int(pair[0]), s = env_int(pair[1]);
    if (r == -1 && s == -1) continue;
    if (r >= 0 && s > 0 && r < s) {
      h.hint_local_rank = r;
      h.hint_local_size = s;
      h.hint_source = std::string(pair[0]) + "/" + pair[1];
    }
    break;  // the first launcher that says anything; a malformed hint is no hint
  }
  return h;
}

std::string encode_host_info(const HostInfo& h) {
  std::string out(kMagic, sizeof kMagic);
  const std::string id = h.id.size() > kMaxId ? h.id.substr(0, kMaxId) : h.id;
  put_u32(out, static_cast<uint32_t>(id.size()));
  out += id;
  put_u32(out, static_cast<uint32_t>(h.hint_local_rank));
  put_u32(out, static_cast<uint32_t>(h.hint_local_size));
  const std::string src = h.hint_source.substr(0, 255);
  put_u32(out, static_cast<uint32_t>(src.size()));
  out += src;
  return out;
}

Result<HostInfo> parse_host_info(const std::string& blob, int rank, size_t* consumed) {
  // The record leads the rank's address blob: a bad one is a malformed address from a peer.
  auto bad = [&](const char* why) {
    return Status(Code::kRemote,
                  "rank " + std::to_string(rank) + " sent a malformed address (its host record: " + why + ")");
  };
  if (blob.size() < 8 || blob.compare(0, 4, kMagic, 4) != 0) return bad("no magic");
  size_t at = 4;
  const uint32_t id_len = get_u32(blob, at);
  at += 4;
  if (id_len > kMaxId || blob.size() - at < id_len + 12) return bad("identity length");
  HostInfo h;
  h.id = blob.substr(at, id_len);
  at += id_len;
  h.hint_local_rank = static_cast<int32_t>(get_u32(blob, at));
  h.hint_local_size = static_cast<int32_t>(get_u32(blob, at + 4));
  const uint32_t src_len = get_u32(blob, at + 8);
  at += 12;
  if (src_len > 255 || blob.size() - at < src_len) return bad("hint source length");
  h.hint_source = blob.substr(at, src_len);
  at += src_len;
  if (h.hint_local_size < -1 || h.hint_local_rank < -1 ||
      (h.hint_local_size > 0 && h.hint_local_rank >= h.hint_local_size)) {
    return bad("local rank hint");
  }
  *consumed = at;
  return h;
}

}  // namespace gw::topo
