/* Hashes every codec's bytes (messages, decoded values, EF residuals) over awkward sizes, so
 * two builds can be compared: identical output means identical codec bytes. */
#include <gradwire/gradwire.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t fnv(uint64_t h, const void* p, size_t n) {
  const unsigned char* b = p;
  for (size_t i = 0; i < n; ++i) {
    h ^= b[i];
    h *= 1099511628211ull;
  }
  return h;
}
static float gen(uint64_t* s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  double u = (double)(*s >> 11) / 9007199254740992.0 - 0.5;
  return (float)(u * u * u * 40.0);
}
int main(void) {
  const char* specs[] = {"none",
                         "fp16",
                         "bf16",
                         "qsgd:bits=8",
                         "qsgd:bits=4,bucket=128",
                         "qsgd:bits=2",
                         "qsgd:bits=1,bucket=64",
                         "sign",
                         "sign:bucket=100",
                         "topk:ratio=0.01",
                         "topk:k=3",
                         "dgc:ratio=0.01",
                         "dgc:ratio=0.001,sample=0.05",
                         "randomk:ratio=0.01,seed=7",
                         "randomk:k=5"};
  const size_t sizes[] = {1, 2, 7, 97, 1000, 4099, 65537, 1u << 20};
  uint64_t total = 1469598103934665603ull;
  for (size_t si = 0; si < sizeof specs / sizeof *specs; ++si) {
    gw_codec_t c;
    if (gw_codec_create(specs[si], &c) != GW_SUCCESS) {
      printf("%s: create failed: %s\n", specs[si], gw_get_last_error());
      continue;
    }
    uint64_t h = 1469598103934665603ull;
    for (size_t zi = 0; zi < sizeof sizes / sizeof *sizes; ++zi) {
      size_t n = sizes[zi];
      float* x = malloc(n * 4);
      float* y = malloc(n * 4);
      float* r = malloc(n * 4);
      uint64_t s = 12345 + n;
      for (size_t i = 0; i < n; ++i) x[i] = gen(&s);
      size_t cap = 0;
      gw_codec_max_encoded_bytes(c, n, GW_FLOAT32, &cap);
      void* msg = malloc(cap + 1);
      gw_ef_state_t ef;
      gw_ef_state_create(n, &ef);
      for (int step = 0; step < 3; ++step) {
        size_t w = 0;
        gw_result_t rc = gw_encode(c, x, n, GW_FLOAT32, (uint64_t)step * 7 + 1, 3, step == 0 ? NULL : ef, msg, cap, &w);
        h = fnv(h, &rc, sizeof rc);
        h = fnv(h, &w, sizeof w);
        h = fnv(h, msg, w);
        rc = gw_decode(msg, w, y, n, GW_FLOAT32, GW_DECODE_OVERWRITE);
        h = fnv(h, &rc, sizeof rc);
        h = fnv(h, y, n * 4);
        gw_ef_state_get_residual(ef, r, n);
        h = fnv(h, r, n * 4);
      }
      gw_ef_state_destroy(ef);
      free(x);
      free(y);
      free(r);
      free(msg);
    }
    printf("%-32s %016llx\n", specs[si], (unsigned long long)h);
    total = fnv(total, &h, sizeof h);
    gw_codec_destroy(c);
  }
  printf("%-32s %016llx\n", "ALL", (unsigned long long)total);
  return 0;
}
