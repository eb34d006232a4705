// A downstream C++ program that uses only the installed headers: makes a communicator
// (Communicator::from_env under GW_RANK/GW_SIZE, or init_rank with a unique id) and runs every
// collective, checking each result against values computed here.
//   consumer_collectives            ranks from the environment (check_install.sh starts them)
//   consumer_collectives --np N     this process makes a unique id and starts N ranks of itself
//   consumer_collectives --id HEX --rank R --np N   one rank of such a job
#include <gradwire/version.h>
#include <sys/wait.h>
#include <unistd.h>
#include <gradwire/codec.hpp>
#include <gradwire/communicator.hpp>
#include <gradwire/ef_state.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

int g_failed = 0;
int g_rank = -1;

void expect(bool ok, const std::string& what) {
  if (!ok) {
    ++g_failed;
    std::fprintf(stderr, "rank %d: FAILED: %s\n", g_rank, what.c_str());
  }
}
void expect_ok(const gw::Status& s, const std::string& what) { expect(s.is_ok(), what + ": " + s.to_string()); }

float value(int rank, size_t i) { return static_cast<float>(rank + 1) * 0.5f + static_cast<float>(i % 7); }

void run_all(gw::Communicator& c) {
  const int p = c.size(), me = c.rank();
  const size_t n = 5000;

  // All-reduce: dense (sum, max), then with a lossy codec and error feedback.
  std::vector<float> x(n), y(n);
  for (size_t i = 0; i < n; ++i) x[i] = value(me, i);
  expect_ok(c.allreduce(x.data(), y.data(), n, gw::DType::kFloat32, gw::ReduceOp::kSum, nullptr, nullptr), "allreduce");
  for (size_t i = 0; i < n; ++i) {
    float e = 0;
    for (int r = 0; r < p; ++r) e += value(r, i);
    if (y[i] != e) {
      expect(false, "allreduce sum at " + std::to_string(i));
      break;
    }
  }
  expect_ok(c.allreduce(x.data(), y.data(), n, gw::DType::kFloat32, gw::ReduceOp::kMax, nullptr, nullptr),
            "allreduce max");
  expect(y[3] == value(p - 1, 3), "allreduce max value");
  auto codec = gw::Codec::create("topk:ratio=0.1");
  expect(codec.is_ok(), "codec");
  gw::ErrorFeedback ef(n);
  expect_ok(c.allreduce(x.data(), y.data(), n, gw::DType::kFloat32, gw::ReduceOp::kSum, codec->get(), &ef,
                        gw::Algo::kSparseAllgather),
            "compressed allreduce");

  // Sparse all-gather of every rank's encoded message, and its dense sum.
  std::vector<unsigned char> msg((*codec)->max_encoded_bytes(n, gw::DType::kFloat32));
  gw::EncodeContext ctx;
  ctx.rank = static_cast<uint32_t>(me);
  auto len = (*codec)->encode(x.data(), n, gw::DType::kFloat32, ctx, msg.data(), msg.size());
  expect(len.is_ok(), "encode");
  std::vector<unsigned char> all(msg.size() * static_cast<size_t>(p));
  std::vector<size_t> lengths(static_cast<size_t>(p));
  expect_ok(c.sparse_allgather(msg.data(), *len, all.data(), all.size(), lengths.data()), "sparse_allgather");
  expect(lengths[static_cast<size_t>(me)] == *len, "sparse_allgather lengths");
  std::vector<float> dense(n);
  expect_ok(c.sparse_allgather_dense(msg.data(), *len, dense.data(), n), "sparse_allgather_dense");

  // All-gather, all-gatherv, broadcast, barrier.
  std::vector<int> mine = {me, me * 10}, got(2 * static_cast<size_t>(p));
  expect_ok(c.allgather(mine.data(), got.data(), sizeof(int) * 2), "allgather");
  for (int r = 0; r < p; ++r)
    expect(got[2 * static_cast<size_t>(r)] == r && got[2 * static_cast<size_t>(r) + 1] == r * 10, "allgather value");
  std::vector<size_t> sizes(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) sizes[static_cast<size_t>(r)] = sizeof(int) * static_cast<size_t>(r + 1);
  std::vector<int> vsend(static_cast<size_t>(me + 1), me), vrecv(static_cast<size_t>(p * (p + 1) / 2), -1);
  expect_ok(c.allgatherv(vsend.data(), vsend.size() * sizeof(int), vrecv.data(), sizes.data(), nullptr), "allgatherv");
  expect(vrecv.back() == p - 1, "allgatherv value");
  int root_value = me == 0 ? 4242 : 0;
  expect_ok(c.broadcast(&root_value, sizeof root_value, 0), "broadcast");
  expect(root_value == 4242, "broadcast value");
  expect_ok(c.barrier(), "barrier");

  // Reduce, reduce-scatter (int64), all-to-all(v), gather, scatter.
  std::vector<long long> li(static_cast<size_t>(p) * 3), lo(static_cast<size_t>(p) * 3, 0);
  for (size_t i = 0; i < li.size(); ++i) li[i] = static_cast<long long>(i) + me;
  expect_ok(c.reduce(li.data(), lo.data(), li.size(), gw::DType::kInt64, gw::ReduceOp::kSum, 0), "reduce");
  if (me == 0) expect(lo[1] == static_cast<long long>(p) * 1 + static_cast<long long>(p * (p - 1) / 2), "reduce value");
  std::vector<long long> rs(3);
  expect_ok(c.reduce_scatter(li.data(), rs.data(), 3, gw::DType::kInt64, gw::ReduceOp::kMax), "reduce_scatter");
  expect(rs[0] == static_cast<long long>(3 * me) + p - 1, "reduce_scatter value");
  std::vector<int> a2a_send(static_cast<size_t>(p)), a2a_recv(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) a2a_send[static_cast<size_t>(r)] = me * 100 + r;
  expect_ok(c.alltoall(a2a_send.data(), a2a_recv.data(), sizeof(int)), "alltoall");
  for (int r = 0; r < p; ++r) expect(a2a_recv[static_cast<size_t>(r)] == r * 100 + me, "alltoall value");
  std::vector<size_t> one(static_cast<size_t>(p), sizeof(int));
  expect_ok(c.alltoallv(a2a_send.data(), one.data(), nullptr, a2a_recv.data(), one.data(), nullptr), "alltoallv");
  std::vector<int> gathered(static_cast<size_t>(p), -1);
  expect_ok(c.gather(&me, gathered.data(), sizeof(int), 0), "gather");
  if (me == 0) expect(gathered[static_cast<size_t>(p - 1)] == p - 1, "gather value");
  int scattered = -1;
  std::vector<int> to_scatter(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) to_scatter[static_cast<size_t>(r)] = r * 3;
  expect_ok(c.scatter(to_scatter.data(), &scattered, sizeof(int), 0), "scatter");
  expect(scattered == me * 3, "scatter value");

  // Point-to-point around the ring, and a queued call.
  int out_token = me, in_token = -1;
  auto rw = c.irecv(&in_token, sizeof in_token, (me + p - 1) % p, 7);
  auto sw = c.isend(&out_token, sizeof out_token, (me + 1) % p, 7);
  expect_ok(gw::Communicator::wait(*sw), "isend");
  expect_ok(gw::Communicator::wait(*rw), "irecv");
  expect(in_token == (me + p - 1) % p, "p2p value");
  auto work = c.submit([](gw::Communicator& cm) { return cm.barrier(); });
  expect_ok(gw::Communicator::wait(*work), "submit");
  auto stats = c.stats();
  expect(stats.is_ok() && stats->allreduces == 3, "stats");
  expect_ok(c.error(), "communicator error");
}

std::string hex(const gw::UniqueId& id) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (unsigned char b : id.bytes) {
    s += d[b >> 4];
    s += d[b & 15];
  }
  return s;
}

bool unhex(const std::string& s, gw::UniqueId& id) {
  if (s.size() != 2 * sizeof id.bytes) return false;
  for (size_t i = 0; i < sizeof id.bytes; ++i)
    id.bytes[i] = static_cast<unsigned char>(std::stoi(s.substr(2 * i, 2), nullptr, 16));
  return true;
}

int finish(gw::Result<std::unique_ptr<gw::Communicator>> made) {
  if (!made.is_ok()) {
    std::fprintf(stderr, "consumer: cannot make a communicator: %s\n", made.status().to_string().c_str());
    return 2;
  }
  g_rank = (*made)->rank();
  run_all(**made);
  if (g_failed == 0) std::printf("consumer_collectives: rank %d of %d ok\n", g_rank, (*made)->size());
  return g_failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string id_hex;
  int np = 0, rank = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--np")
      np = std::atoi(argv[i + 1]);
    else if (a == "--id")
      id_hex = argv[i + 1];
    else if (a == "--rank")
      rank = std::atoi(argv[i + 1]);
  }
  if (np == 0) return finish(gw::Communicator::from_env());
  if (!id_hex.empty()) {
    gw::UniqueId id;
    if (!unhex(id_hex, id)) return 2;
    return finish(gw::Communicator::init_rank(np, id, rank));
  }
  // The launcher: a unique id here (its rendezvous root runs in this process), N ranks exec'd.
  auto id = gw::get_unique_id();
  if (!id.is_ok()) {
    std::fprintf(stderr, "consumer: get_unique_id: %s\n", id.status().to_string().c_str());
    return 2;
  }
  const std::string h = hex(*id), n = std::to_string(np);
  std::vector<pid_t> kids;
  for (int r = 0; r < np; ++r) {
    const std::string rs = std::to_string(r);
    const pid_t pid = fork();
    if (pid == 0) {
      execl("/proc/self/exe", argv[0], "--np", n.c_str(), "--id", h.c_str(), "--rank", rs.c_str(),
            static_cast<char*>(nullptr));
      _exit(127);
    }
    kids.push_back(pid);
  }
  int bad = 0;
  for (pid_t k : kids) {
    int status = 0;
    waitpid(k, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++bad;
  }
  std::printf("consumer_collectives: %d of %d ranks ok (init_rank, gradwire %s)\n", np - bad, np, GW_VERSION_STRING);
  return bad == 0 ? 0 : 1;
}
