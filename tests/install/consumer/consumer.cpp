#include <gradwire/codec.hpp>

#include <cstdio>
#include <vector>

int main() {
  auto codec = gw::Codec::create("topk:ratio=0.1");
  if (!codec.is_ok()) return 1;
  std::vector<float> x(100, 1.0f);
  std::vector<unsigned char> out((*codec)->max_encoded_bytes(x.size(), gw::DType::kFloat32));
  auto n = (*codec)->encode(x.data(), x.size(), gw::DType::kFloat32, gw::EncodeContext{}, out.data(), out.size());
  if (!n.is_ok()) return 2;
  std::printf("consumer_cpp: %zu bytes\n", *n);
  return 0;
}
