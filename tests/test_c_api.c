/*
 * The C ABI from plain C99: gradwire.h compiles as C, every function reports failures
 * through gw_result_t and gw_get_last_error(), and the codec, error-feedback and
 * communicator handles work end to end against libgradwire.so.
 *
 * Prints each failed check to stderr, then "N passed, M failed"; exits 0 only when M is 0.
 */
#define _POSIX_C_SOURCE 200112L /* setenv */

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gradwire/gradwire.h"

static int g_passed = 0;
static int g_failed = 0;

static int check(int ok, int line, const char* what) {
  if (ok) {
    ++g_passed;
  } else {
    ++g_failed;
    fprintf(stderr, "test_c_api.c:%d: check failed: %s (last error: \"%s\")\n", line, what, gw_get_last_error());
  }
  return ok;
}

#define CHECK(cond) check((cond) ? 1 : 0, __LINE__, #cond)

/* result must be `want`, and the thread's last error must contain every needle given. */
static int expect_error(gw_result_t result, gw_result_t want, const char* needle1, const char* needle2, int line,
                        const char* what) {
  const char* msg = gw_get_last_error();
  int ok = result == want && msg != NULL && msg[0] != '\0';
  if (ok && needle1 != NULL) ok = strstr(msg, needle1) != NULL;
  if (ok && needle2 != NULL) ok = strstr(msg, needle2) != NULL;
  if (ok) {
    ++g_passed;
  } else {
    ++g_failed;
    fprintf(stderr, "test_c_api.c:%d: %s: got %d (%s) with last error \"%s\"; want %d (%s) naming \"%s\"%s%s\n", line,
            what, (int)result, gw_get_error_string(result), msg != NULL ? msg : "(null)", (int)want,
            gw_get_error_string(want), needle1 != NULL ? needle1 : "", needle2 != NULL ? " and " : "",
            needle2 != NULL ? needle2 : "");
  }
  return ok;
}

/* The call fails with `want` and a message that names `needle` (an argument, a key...). */
#define EXPECT_ERR(call, want, needle) expect_error((call), (want), (needle), NULL, __LINE__, #call)
/* ... and also names the function that failed. */
#define EXPECT_ERR2(call, want, needle, fn) expect_error((call), (want), (needle), (fn), __LINE__, #call)
#define EXPECT_OK(call) expect_ok((call), __LINE__, #call)

static int expect_ok(gw_result_t result, int line, const char* what) { return check(result == GW_SUCCESS, line, what); }

static float absf(float x) { return x < 0.0f ? -x : x; }

static uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

/* Reproducible test data in [-2, 2), never zero. */
static void fill(float* x, size_t n, uint32_t seed) {
  uint32_t s = seed * 2654435761u + 1u;
  size_t i;
  for (i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    x[i] = (float)(s >> 8) / 4194304.0f - 2.0f; /* (s >> 8) / 2^22 in [0, 4) */
    if (x[i] == 0.0f) x[i] = 0.125f;
  }
}

static uint64_t load_u64(const unsigned char* p) {
  uint64_t v = 0;
  int i;
  for (i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

/* ---------------------------------------------------------------------------------- */

static void test_version_and_error_strings(void) {
  int version = -1;
  const char* unknown;
  const char* strings[GW_NUM_RESULTS];
  int r, s;

  EXPECT_OK(gw_get_version(&version));
  CHECK(version == GW_VERSION_CODE);
  CHECK(version == GW_VERSION_MAJOR * 10000 + GW_VERSION_MINOR * 100 + GW_VERSION_PATCH);
  EXPECT_ERR(gw_get_version(NULL), GW_ERR_INVALID_ARGUMENT, "version");

  /* Out-of-range codes. Only values inside the enum's C++ value range (0..15 for 0..12) are
   * used: the library is C++, where a gw_result_t of -1 or 999 is undefined behaviour. */
  unknown = gw_get_error_string(GW_NUM_RESULTS);
  CHECK(unknown != NULL && unknown[0] != '\0');
  CHECK(gw_get_error_string((gw_result_t)15) != NULL);
  if (unknown != NULL && gw_get_error_string((gw_result_t)15) != NULL) {
    CHECK(strcmp(gw_get_error_string((gw_result_t)15), unknown) == 0);
  }
  for (r = 0; r < GW_NUM_RESULTS; ++r) {
    strings[r] = gw_get_error_string((gw_result_t)r);
    if (!CHECK(strings[r] != NULL && strings[r][0] != '\0')) continue;
    if (unknown != NULL) {
      if (!check(strcmp(strings[r], unknown) != 0, __LINE__, "error string differs from the unknown code's")) {
        fprintf(stderr, "  result %d gives \"%s\"\n", r, strings[r]);
      }
    }
  }
  for (r = 0; r < GW_NUM_RESULTS; ++r) {
    for (s = r + 1; s < GW_NUM_RESULTS; ++s) {
      if (strings[r] != NULL && strings[s] != NULL) {
        if (!check(strcmp(strings[r], strings[s]) != 0, __LINE__, "error strings are distinct")) {
          fprintf(stderr, "  results %d and %d both give \"%s\"\n", r, s, strings[r]);
        }
      }
    }
  }
}

/* ---------------------------------------------------------------------------------- */

struct good_spec {
  const char* spec;
  gw_codec_id_t id;
  const char* canonical_prefix;
};

/* The built-in codecs as gw_codec_info lists them, in order of id. */
static void test_codec_list(void) {
  static const char* const names[] = {"none", "fp16", "bf16", "qsgd", "sign", "topk", "dgc", "randomk"};
  static const char* const keys[] = {"",       "rounding,seed", "rounding,seed",       "bits,bucket,rounding,seed",
                                     "bucket", "ratio,k",       "ratio,k,sample,seed", "ratio,k,seed"};
  gw_codec_info_t info;
  size_t i;
  CHECK(gw_codec_count() == 8);
  for (i = 0; i < 8 && i < gw_codec_count(); ++i) {
    EXPECT_OK(gw_codec_info(i, &info));
    CHECK(strcmp(info.name, names[i]) == 0);
    CHECK((size_t)info.id == i);
    CHECK(strcmp(info.keys, keys[i]) == 0);
  }
  EXPECT_OK(gw_codec_info(3, &info));
  CHECK((info.caps & (GW_CODEC_CAP_LOSSY | GW_CODEC_CAP_EF)) == (GW_CODEC_CAP_LOSSY | GW_CODEC_CAP_EF));
  CHECK((info.caps & (GW_CODEC_CAP_SPARSE | GW_CODEC_CAP_ANY_DTYPE)) == 0);
  EXPECT_OK(gw_codec_info(5, &info));
  CHECK((info.caps & (GW_CODEC_CAP_SPARSE | GW_CODEC_CAP_INDICES)) == (GW_CODEC_CAP_SPARSE | GW_CODEC_CAP_INDICES));
  EXPECT_OK(gw_codec_info(7, &info));
  CHECK((info.caps & (GW_CODEC_CAP_SPARSE | GW_CODEC_CAP_INDICES)) == GW_CODEC_CAP_SPARSE);
  EXPECT_OK(gw_codec_info(0, &info));
  CHECK(info.caps == GW_CODEC_CAP_ANY_DTYPE || info.caps == (GW_CODEC_CAP_ANY_DTYPE | GW_CODEC_CAP_DEVICE));
  EXPECT_ERR(gw_codec_info(8, &info), GW_ERR_INVALID_ARGUMENT, "gw_codec_count");
  EXPECT_ERR(gw_codec_info(0, NULL), GW_ERR_INVALID_ARGUMENT, "info is null");
}

static void test_codec_create(void) {
  static const struct good_spec good[] = {
      {"none", GW_CODEC_NONE, "none"},
      {"fp16", GW_CODEC_FP16, "fp16"},
      {"bf16", GW_CODEC_BF16, "bf16"},
      {"qsgd:bits=4,bucket=512", GW_CODEC_QSGD, "qsgd:bits=4,bucket=512"},
      {"qsgd:bits=8", GW_CODEC_QSGD, "qsgd:bits=8"},
      {" qsgd : bits = 2 , rounding = nearest ", GW_CODEC_QSGD, "qsgd:bits=2"},
      {"sign:bucket=512", GW_CODEC_SIGN, "sign:bucket=512"},
      {"topk:ratio=0.01", GW_CODEC_TOPK, "topk:ratio=0.01"},
      {"topk:k=1000", GW_CODEC_TOPK, "topk:k=1000"},
      {"dgc:ratio=0.001", GW_CODEC_DGC, "dgc:ratio=0.001"},
      {"randomk:ratio=0.01,seed=7", GW_CODEC_RANDOMK, "randomk:ratio=0.01"},
      {"qsgd:bits=1,bucket=16777216,ef=1,rounding=nearest", GW_CODEC_QSGD, "qsgd:bits=1,bucket=16777216"},
  };
  size_t i;
  for (i = 0; i < sizeof good / sizeof good[0]; ++i) {
    gw_codec_t codec = NULL, again = NULL;
    gw_codec_id_t id = GW_CODEC_NONE;
    char text[256], text2[256];
    if (!check(gw_codec_create(good[i].spec, &codec) == GW_SUCCESS && codec != NULL, __LINE__,
               "gw_codec_create(good spec)")) {
      fprintf(stderr, "  spec \"%s\"\n", good[i].spec);
      continue;
    }
    EXPECT_OK(gw_codec_id(codec, &id));
    CHECK(id == good[i].id);
    EXPECT_OK(gw_codec_spec(codec, text, sizeof text));
    CHECK(strncmp(text, good[i].canonical_prefix, strlen(good[i].canonical_prefix)) == 0);
    /* The canonical text parses back to the same codec. */
    if (EXPECT_OK(gw_codec_create(text, &again))) {
      EXPECT_OK(gw_codec_spec(again, text2, sizeof text2));
      CHECK(strcmp(text, text2) == 0);
      EXPECT_OK(gw_codec_destroy(again));
    }
    /* A buffer one byte short of the text and its NUL is refused. */
    EXPECT_ERR(gw_codec_spec(codec, text2, strlen(text)), GW_ERR_BUFFER_TOO_SMALL, "capacity");
    EXPECT_OK(gw_codec_destroy(codec));
  }
  {
    gw_codec_t codec = NULL;
    char text[256];
    if (EXPECT_OK(gw_codec_create("qsgd:bits=4,ef=1", &codec))) {
      EXPECT_OK(gw_codec_spec(codec, text, sizeof text));
      CHECK(strstr(text, "ef=1") != NULL);
      CHECK(strstr(text, "rounding=stochastic") != NULL);
      EXPECT_OK(gw_codec_destroy(codec));
    }
  }
}

struct bad_spec {
  const char* spec;
  const char* needle; /* what the message must name */
};

static void test_codec_create_errors(void) {
  static const struct bad_spec bad[] = {
      {"nosuchcodec", "nosuchcodec"},
      {"", "unknown codec"},
      {"qsgd:bitz=4", "bitz"},
      {"topk:ratio=0.1,bucket=8", "bucket"},
      {"fp16:k=3", "'k'"},
      {"qsgd:bits=3", "bits=3"},
      {"qsgd:bits=16", "bits=16"},
      {"qsgd:bits=-1", "bits=-1"},
      {"qsgd:bucket=0", "bucket=0"},
      {"qsgd:bucket=16777217", "bucket=16777217"},
      {"sign:bucket=99999999999999999999999", "bucket"},
      {"qsgd:rounding=up", "rounding=up"},
      {"topk:ratio=1.5", "ratio=1.5"},
      {"topk:ratio=0", "ratio=0"},
      {"topk:ratio=nan", "ratio=nan"},
      {"topk:k=0", "k=0"},
      {"dgc:ratio=0.1,sample=2", "sample=2"},
      {"randomk:ratio=0.1,seed=x", "seed=x"},
      {"qsgd:ef=maybe", "ef=maybe"},
      {"topk", "ratio"},
      {"topk:ratio=0.1,k=5", "exactly one"},
      {"qsgd:bits=4,bits=4", "twice"},
      {"qsgd:bits", "bits"},
  };
  size_t i;
  for (i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    /* The handle is cleared on failure, whatever it held before. */
    gw_codec_t codec = (gw_codec_t)(void*)&g_passed;
    if (!expect_error(gw_codec_create(bad[i].spec, &codec), GW_ERR_INVALID_ARGUMENT, bad[i].needle, "gw_codec_create",
                      __LINE__, "gw_codec_create(bad spec)")) {
      fprintf(stderr, "  spec \"%s\"\n", bad[i].spec);
    }
    if (!CHECK(codec == NULL) && codec != (gw_codec_t)(void*)&g_passed) gw_codec_destroy(codec);
  }
  {
    gw_codec_t codec = (gw_codec_t)(void*)&g_passed;
    EXPECT_ERR2(gw_codec_create(NULL, &codec), GW_ERR_INVALID_ARGUMENT, "spec", "gw_codec_create");
    CHECK(codec == NULL);
    EXPECT_ERR2(gw_codec_create("fp16", NULL), GW_ERR_INVALID_ARGUMENT, "codec", "gw_codec_create");
  }
  /* A success clears the previous failure's message. */
  {
    gw_codec_t codec = NULL;
    EXPECT_ERR(gw_codec_create("nosuchcodec", &codec), GW_ERR_INVALID_ARGUMENT, "nosuchcodec");
    if (EXPECT_OK(gw_codec_create("fp16", &codec))) {
      CHECK(gw_get_last_error() != NULL && gw_get_last_error()[0] == '\0');
      EXPECT_OK(gw_codec_destroy(codec));
    }
  }
}

/* ---------------------------------------------------------------------------------- */

struct size_case {
  const char* spec;
  size_t count;
  gw_dtype_t dtype;
  size_t bytes; /* from docs/wire-format.md: 56-byte header + payload */
};

static void test_max_encoded_bytes(void) {
  static const struct size_case cases[] = {
      {"none", 10, GW_FLOAT32, 56 + 40},
      {"none", 10, GW_FLOAT16, 56 + 20},
      {"none", 0, GW_FLOAT32, 56},
      {"fp16", 10, GW_FLOAT32, 56 + 20},
      {"bf16", 7, GW_BFLOAT16, 56 + 14},
      /* qsgd: 8 bytes of scale per bucket + ceil(n * bits / 8) */
      {"qsgd:bits=8", 1000, GW_FLOAT32, 56 + 8 * 2 + 1000},
      {"qsgd:bits=4,bucket=512", 1001, GW_FLOAT32, 56 + 8 * 2 + 501},
      {"qsgd:bits=1,bucket=100", 1001, GW_FLOAT32, 56 + 8 * 11 + 126},
      /* sign: 4 bytes of scale per bucket + ceil(n / 8) */
      {"sign:bucket=512", 1000, GW_FLOAT32, 56 + 4 * 2 + 125},
      /* topk, dgc: k_for(n) u32 indices and f32 values */
      {"topk:k=10", 1000, GW_FLOAT32, 56 + 10 * 8},
      {"topk:k=10", 5, GW_FLOAT32, 56 + 5 * 8},
      {"topk:ratio=0.01", 1000, GW_FLOAT32, 56 + 10 * 8},
      {"topk:ratio=0.0001", 1000, GW_FLOAT32, 56 + 1 * 8},
      {"dgc:ratio=0.01", 1000, GW_FLOAT32, 56 + 10 * 8},
      /* randomk: k_for(n) f32 values */
      {"randomk:k=10", 1000, GW_FLOAT32, 56 + 40},
      {"randomk:ratio=0.5", 7, GW_FLOAT32, 56 + 4 * 4},
  };
  size_t i;
  gw_codec_t codec = NULL;
  size_t bytes = 0;
  for (i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    if (!EXPECT_OK(gw_codec_create(cases[i].spec, &codec))) continue;
    bytes = 0;
    EXPECT_OK(gw_codec_max_encoded_bytes(codec, cases[i].count, cases[i].dtype, &bytes));
    if (!check(bytes == cases[i].bytes, __LINE__, "max_encoded_bytes matches the documented size")) {
      fprintf(stderr, "  %s, %zu elements: %zu bytes, expected %zu\n", cases[i].spec, cases[i].count, bytes,
              cases[i].bytes);
    }
    EXPECT_OK(gw_codec_destroy(codec));
  }
  if (EXPECT_OK(gw_codec_create("fp16", &codec))) {
    EXPECT_ERR2(gw_codec_max_encoded_bytes(NULL, 10, GW_FLOAT32, &bytes), GW_ERR_INVALID_ARGUMENT, "codec",
                "gw_codec_max_encoded_bytes");
    EXPECT_ERR(gw_codec_max_encoded_bytes(codec, 10, GW_FLOAT32, NULL), GW_ERR_INVALID_ARGUMENT, "bytes");
    EXPECT_ERR(gw_codec_max_encoded_bytes(codec, 10, (gw_dtype_t)0, &bytes), GW_ERR_INVALID_ARGUMENT, "dtype");
    EXPECT_ERR(gw_codec_max_encoded_bytes(codec, SIZE_MAX, GW_FLOAT32, &bytes), GW_ERR_INVALID_ARGUMENT, "count");
    EXPECT_OK(gw_codec_destroy(codec));
  }
}

/* ---------------------------------------------------------------------------------- */

#define RT_N 300

/* Encodes x with spec, decodes it, and checks |decoded - x| <= bound(i) for every element. */
static void round_trip_fp16(void) {
  float x[RT_N], y[RT_N], acc[RT_N];
  unsigned char msg[56 + 2 * RT_N + 16];
  uint16_t halves[RT_N];
  gw_codec_t codec = NULL;
  size_t written = 0, max_bytes = 0, i;
  gw_message_info_t info;
  int bad = 0;

  fill(x, RT_N, 1);
  x[0] = 65504.0f; /* largest finite half */
  x[1] = 1e-6f;    /* a subnormal half */
  if (!EXPECT_OK(gw_codec_create("fp16", &codec))) return;
  EXPECT_OK(gw_codec_max_encoded_bytes(codec, RT_N, GW_FLOAT32, &max_bytes));
  CHECK(max_bytes == 56 + 2 * RT_N);
  EXPECT_OK(gw_encode(codec, x, RT_N, GW_FLOAT32, 0, 0, NULL, msg, sizeof msg, &written));
  CHECK(written == 56 + 2 * RT_N);
  CHECK(memcmp(msg, "GWRE", 4) == 0 && msg[4] == 1 && msg[5] == GW_CODEC_FP16 && msg[6] == GW_FLOAT32);
  CHECK(load_u64(msg + 8) == RT_N);
  CHECK(load_u64(msg + 48) == 2 * RT_N);

  memset(y, 0, sizeof y);
  EXPECT_OK(gw_decode(msg, written, y, RT_N, GW_FLOAT32, GW_DECODE_OVERWRITE));
  for (i = 0; i < RT_N; ++i) {
    /* round to nearest half: relative error 2^-11 for normals, 2^-25 absolute below 2^-14 */
    const float bound = absf(x[i]) * (1.0f / 2048.0f) + 6.0e-8f;
    if (!(absf(y[i] - x[i]) <= bound)) ++bad;
  }
  if (!check(bad == 0, __LINE__, "fp16 round trip within half precision")) {
    fprintf(stderr, "  %d elements out of tolerance\n", bad);
  }
  CHECK(y[0] == 65504.0f);

  /* Accumulate and subtract. */
  for (i = 0; i < RT_N; ++i) acc[i] = 1.0f;
  EXPECT_OK(gw_decode(msg, written, acc, RT_N, GW_FLOAT32, GW_DECODE_ACCUMULATE));
  bad = 0;
  for (i = 0; i < RT_N; ++i) {
    if (float_bits(acc[i]) != float_bits(1.0f + y[i])) ++bad;
  }
  CHECK(bad == 0);
  EXPECT_OK(gw_decode(msg, written, acc, RT_N, GW_FLOAT32, GW_DECODE_SUBTRACT));
  bad = 0;
  for (i = 0; i < RT_N; ++i) {
    if (float_bits(acc[i]) != float_bits((1.0f + y[i]) - y[i])) ++bad;
  }
  CHECK(bad == 0);

  /* Decoding into half precision gives the payload's halves unchanged. */
  EXPECT_OK(gw_decode(msg, written, halves, RT_N, GW_FLOAT16, GW_DECODE_OVERWRITE));
  CHECK(memcmp(halves, msg + 56, sizeof halves) == 0);

  /* message info */
  memset(&info, 0, sizeof info);
  EXPECT_OK(gw_message_info(msg, written, &info));
  CHECK(info.codec == GW_CODEC_FP16);
  CHECK(info.dtype == GW_FLOAT32);
  CHECK(info.count == RT_N);
  CHECK(info.nnz == RT_N);
  CHECK(info.total_bytes == written);

  /* The length from the header alone: the first 56 bytes are enough; fewer, a foreign magic
   * or another wire version are refused, and nothing is claimed. */
  uint64_t total = 0;
  EXPECT_OK(gw_message_length(msg, 56, &total));
  CHECK(total == written);
  EXPECT_OK(gw_message_length(msg, written, &total));
  CHECK(total == written);
  total = 9;
  EXPECT_ERR(gw_message_length(msg, 55, &total), GW_ERR_INVALID_MESSAGE, "shorter than the 56-byte header");
  CHECK(total == 0);
  EXPECT_ERR(gw_message_length(NULL, 56, &total), GW_ERR_INVALID_ARGUMENT, "msg");
  EXPECT_ERR(gw_message_length(msg, 56, NULL), GW_ERR_INVALID_ARGUMENT, "total_bytes");
  {
    unsigned char forged[56];
    memcpy(forged, msg, sizeof forged);
    forged[0] = 'X';
    EXPECT_ERR(gw_message_length(forged, sizeof forged, &total), GW_ERR_INVALID_MESSAGE, "magic");
    memcpy(forged, msg, sizeof forged);
    forged[4] = 99;
    EXPECT_ERR(gw_message_length(forged, sizeof forged, &total), GW_ERR_INVALID_MESSAGE, "version 99");
    memcpy(forged, msg, sizeof forged);
    memset(forged + 48, 0xff, 8); /* a payload length near 2^64: refused, no wrap-around */
    EXPECT_ERR(gw_message_length(forged, sizeof forged, &total), GW_ERR_INVALID_MESSAGE, "payload bytes");
    CHECK(total == 0);
  }

  /* Too little room: refused, nothing claimed written. */
  written = 12345;
  EXPECT_ERR(gw_encode(codec, x, RT_N, GW_FLOAT32, 0, 0, NULL, msg, max_bytes - 1, &written), GW_ERR_BUFFER_TOO_SMALL,
             "capacity");
  CHECK(written == 0);
  EXPECT_OK(gw_codec_destroy(codec));
}

static void round_trip_qsgd8(const char* spec, float slack_units) {
  float x[RT_N], y[RT_N];
  unsigned char msg[56 + 8 + RT_N + 16];
  gw_codec_t codec = NULL;
  size_t written = 0, i;
  float mn, mx, unit;
  gw_message_info_t info;
  int bad = 0;

  fill(x, RT_N, 2);
  if (!EXPECT_OK(gw_codec_create(spec, &codec))) return;
  EXPECT_OK(gw_encode(codec, x, RT_N, GW_FLOAT32, 5, 3, NULL, msg, sizeof msg, &written));
  /* one bucket of 512: 8 bytes of scale, one byte a code */
  CHECK(written == 56 + 8 + RT_N);
  memset(y, 0, sizeof y);
  EXPECT_OK(gw_decode(msg, written, y, RT_N, GW_FLOAT32, GW_DECODE_OVERWRITE));
  mn = x[0];
  mx = x[0];
  for (i = 1; i < RT_N; ++i) {
    if (x[i] < mn) mn = x[i];
    if (x[i] > mx) mx = x[i];
  }
  unit = (mx - mn) / 255.0f;
  for (i = 0; i < RT_N; ++i) {
    /* stochastic rounding moves an element less than one unit, nearest at most half of one */
    if (!(absf(y[i] - x[i]) <= unit * slack_units + 1e-6f)) ++bad;
    if (y[i] < mn - 1e-6f || y[i] > mx + 1e-6f) ++bad;
  }
  if (!check(bad == 0, __LINE__, "qsgd:bits=8 round trip within one quantization step")) {
    fprintf(stderr, "  %s: %d elements out of tolerance (unit %g)\n", spec, bad, (double)unit);
  }
  EXPECT_OK(gw_message_info(msg, written, &info));
  CHECK(info.codec == GW_CODEC_QSGD && info.dtype == GW_FLOAT32 && info.count == RT_N && info.nnz == RT_N &&
        info.total_bytes == written);
  /* Lossy codecs decode into float32 only, and take float32 input only. */
  EXPECT_ERR(gw_decode(msg, written, y, RT_N, GW_FLOAT16, GW_DECODE_OVERWRITE), GW_ERR_UNSUPPORTED, "float32");
  EXPECT_ERR(gw_encode(codec, x, RT_N, GW_FLOAT16, 0, 0, NULL, msg, sizeof msg, &written), GW_ERR_UNSUPPORTED,
             "float32");
  EXPECT_OK(gw_codec_destroy(codec));
}

/* Malformed messages through the C ABI: GW_ERR_INVALID_MESSAGE, destination untouched. */
static void test_decode_rejects(void) {
  float x[RT_N], dst[RT_N + 1], before[RT_N + 1];
  unsigned char msg[56 + 2 * RT_N], bad[56 + 2 * RT_N + 4];
  gw_codec_t codec = NULL;
  size_t written = 0;
  gw_message_info_t info;

  fill(x, RT_N, 3);
  if (!EXPECT_OK(gw_codec_create("bf16", &codec))) return;
  EXPECT_OK(gw_encode(codec, x, RT_N, GW_FLOAT32, 0, 0, NULL, msg, sizeof msg, &written));
  EXPECT_OK(gw_codec_destroy(codec));
  fill(before, RT_N + 1, 4);
  memcpy(dst, before, sizeof dst);

  EXPECT_ERR(gw_decode(msg, written - 1, dst, RT_N, GW_FLOAT32, GW_DECODE_OVERWRITE), GW_ERR_INVALID_MESSAGE,
             "gw_decode");
  EXPECT_ERR(gw_decode(msg, 10, dst, RT_N, GW_FLOAT32, GW_DECODE_OVERWRITE), GW_ERR_INVALID_MESSAGE, "header");
  EXPECT_ERR(gw_decode(msg, written, dst, RT_N + 1, GW_FLOAT32, GW_DECODE_OVERWRITE), GW_ERR_INVALID_MESSAGE,
             "destination");
  EXPECT_ERR(gw_decode(msg, written, dst, RT_N - 1, GW_FLOAT32, GW_DECODE_ACCUMULATE), GW_ERR_INVALID_MESSAGE,
             "destination");
  memcpy(bad, msg, written);
  bad[0] = 'X';
  EXPECT_ERR(gw_decode(bad, written, dst, RT_N, GW_FLOAT32, GW_DECODE_OVERWRITE), GW_ERR_INVALID_MESSAGE, "magic");
  memcpy(bad, msg, written);
  bad[4] = 2;
  EXPECT_ERR(gw_decode(bad, written, dst, RT_N, GW_FLOAT32, GW_DECODE_SUBTRACT), GW_ERR_INVALID_MESSAGE, "version");
  memcpy(bad, msg, written);
  bad[written] = 0;
  EXPECT_ERR(gw_decode(bad, written + 1, dst, RT_N, GW_FLOAT32, GW_DECODE_OVERWRITE), GW_ERR_INVALID_MESSAGE,
             "payload");
  CHECK(memcmp(dst, before, sizeof dst) == 0);
  EXPECT_ERR(gw_message_info(msg, written - 2, &info), GW_ERR_INVALID_MESSAGE, "gw_message_info");
  EXPECT_OK(gw_message_info(msg, written, &info));
  CHECK(info.codec == GW_CODEC_BF16 && info.count == RT_N && info.total_bytes == written);
}

/* ---------------------------------------------------------------------------------- */

#define EF_N 64
#define EF_K 8

static void test_error_feedback(void) {
  float x[EF_N], d[EF_N], r[EF_N], r1[EF_N], acc;
  unsigned char msg[56 + EF_K * 8];
  gw_ef_state_t ef = NULL;
  gw_codec_t codec = NULL;
  size_t count = 0, written = 0, i;
  uint64_t step = 99;
  int kept = 0, exact = 1, zero = 1;
  float smallest_kept = 1e30f, largest_dropped = 0.0f;

  fill(x, EF_N, 5);
  if (!EXPECT_OK(gw_ef_state_create(EF_N, &ef))) return;
  if (!EXPECT_OK(gw_codec_create("topk:k=8", &codec))) {
    gw_ef_state_destroy(ef);
    return;
  }
  EXPECT_OK(gw_ef_state_count(ef, &count));
  CHECK(count == EF_N);
  EXPECT_OK(gw_ef_state_step(ef, &step));
  CHECK(step == 0);
  EXPECT_OK(gw_ef_state_get_residual(ef, r, EF_N));
  for (i = 0; i < EF_N; ++i) zero = zero && float_bits(r[i]) == 0;
  CHECK(zero);

  /* Step 1: the residual is exactly input - decoded; topk keeps the 8 largest |x|. */
  EXPECT_OK(gw_encode(codec, x, EF_N, GW_FLOAT32, 0, 0, ef, msg, sizeof msg, &written));
  CHECK(written == 56 + EF_K * 8);
  EXPECT_OK(gw_ef_state_step(ef, &step));
  CHECK(step == 1);
  EXPECT_OK(gw_decode(msg, written, d, EF_N, GW_FLOAT32, GW_DECODE_OVERWRITE));
  EXPECT_OK(gw_ef_state_get_residual(ef, r, EF_N));
  for (i = 0; i < EF_N; ++i) {
    if (float_bits(r[i]) != float_bits(x[i] - d[i])) exact = 0;
    if (d[i] != 0.0f) {
      ++kept;
      if (d[i] != x[i]) exact = 0;
      if (absf(x[i]) < smallest_kept) smallest_kept = absf(x[i]);
    } else if (absf(x[i]) > largest_dropped) {
      largest_dropped = absf(x[i]);
    }
  }
  CHECK(exact);
  CHECK(kept == EF_K);
  CHECK(smallest_kept >= largest_dropped);
  memcpy(r1, r, sizeof r);

  /* Step 2: input + old residual is what gets encoded; the new residual is what is left. */
  EXPECT_OK(gw_encode(codec, x, EF_N, GW_FLOAT32, 1, 0, ef, msg, sizeof msg, &written));
  EXPECT_OK(gw_ef_state_step(ef, &step));
  CHECK(step == 2);
  EXPECT_OK(gw_decode(msg, written, d, EF_N, GW_FLOAT32, GW_DECODE_OVERWRITE));
  EXPECT_OK(gw_ef_state_get_residual(ef, r, EF_N));
  exact = 1;
  for (i = 0; i < EF_N; ++i) {
    acc = r1[i] + x[i];
    if (float_bits(r[i]) != float_bits(acc - d[i])) exact = 0;
  }
  CHECK(exact);

  /* Wrong sizes and types. */
  EXPECT_ERR(gw_encode(codec, x, EF_N - 1, GW_FLOAT32, 0, 0, ef, msg, sizeof msg, &written), GW_ERR_INVALID_ARGUMENT,
             "error-feedback");
  EXPECT_ERR(gw_encode(codec, x, EF_N, GW_FLOAT16, 0, 0, ef, msg, sizeof msg, &written), GW_ERR_UNSUPPORTED, "float32");
  EXPECT_ERR(gw_ef_state_get_residual(ef, r, EF_N - 1), GW_ERR_INVALID_ARGUMENT, "count");
  EXPECT_ERR(gw_ef_state_get_residual(ef, NULL, EF_N), GW_ERR_INVALID_ARGUMENT, "out");
  EXPECT_OK(gw_ef_state_step(ef, &step));
  CHECK(step == 2); /* failed encodes do not advance the step */

  /* Reset: zero residual, step 0. */
  EXPECT_OK(gw_ef_state_reset(ef));
  EXPECT_OK(gw_ef_state_step(ef, &step));
  CHECK(step == 0);
  EXPECT_OK(gw_ef_state_get_residual(ef, r, EF_N));
  zero = 1;
  for (i = 0; i < EF_N; ++i) zero = zero && float_bits(r[i]) == 0;
  CHECK(zero);
  EXPECT_OK(gw_codec_destroy(codec));

  /* qsgd with error feedback: residual = x - decoded, in float32. */
  if (EXPECT_OK(gw_codec_create("qsgd:bits=2,bucket=16", &codec))) {
    unsigned char qmsg[56 + 4 * 8 + EF_N / 4];
    EXPECT_OK(gw_encode(codec, x, EF_N, GW_FLOAT32, 7, 1, ef, qmsg, sizeof qmsg, &written));
    CHECK(written == sizeof qmsg);
    EXPECT_OK(gw_decode(qmsg, written, d, EF_N, GW_FLOAT32, GW_DECODE_OVERWRITE));
    EXPECT_OK(gw_ef_state_get_residual(ef, r, EF_N));
    exact = 1;
    for (i = 0; i < EF_N; ++i) {
      if (float_bits(r[i]) != float_bits(x[i] - d[i])) exact = 0;
    }
    CHECK(exact);
    EXPECT_OK(gw_ef_state_step(ef, &step));
    CHECK(step == 1);
    EXPECT_OK(gw_codec_destroy(codec));
  }
  EXPECT_OK(gw_ef_state_destroy(ef));

  /* An empty state is fine; one past 2^48 elements is not. */
  ef = NULL;
  if (EXPECT_OK(gw_ef_state_create(0, &ef))) {
    EXPECT_OK(gw_ef_state_get_residual(ef, NULL, 0));
    EXPECT_OK(gw_ef_state_destroy(ef));
  }
  ef = (gw_ef_state_t)(void*)&g_passed;
  EXPECT_ERR(gw_ef_state_create(((size_t)1 << 48) + 1, &ef), GW_ERR_INVALID_ARGUMENT, "count");
  CHECK(ef == NULL);
}

/* ---------------------------------------------------------------------------------- */

/* Invalid enum arguments below stay inside the enum's C++ value range (dtype 0, mode 3, algo
 * 5 or 7): the C ABI is implemented in C++, where loading e.g. a gw_dtype_t of 4 is undefined
 * behaviour that UBSan reports (-fsanitize=enum), so such values are not passed here.
 *
 * Every function's pointer arguments: NULL is GW_ERR_INVALID_ARGUMENT, and the message names
 * the argument and the function (the wording comes from c_api_codec.cpp, c_api_comm.cpp and
 * the C++ checks they call: "<function>: <argument> is null"). */
static void test_null_arguments(void) {
  gw_codec_t codec = NULL;
  gw_ef_state_t ef = NULL;
  float x[4] = {1.0f, -2.0f, 3.0f, -4.0f}, y[4];
  unsigned char msg[256];
  size_t written = 0, bytes = 0, count = 0;
  uint64_t step = 0;
  gw_codec_id_t id;
  gw_message_info_t info;
  char text[64];
  gw_unique_id_t uid;
  gw_comm_t comm = (gw_comm_t)(void*)&g_passed;
  int ival = 0;
  gw_result_t rval = GW_SUCCESS;
  gw_algo_t algo = GW_ALGO_AUTO;
  gw_request_t req = (gw_request_t)(void*)&g_passed;
  size_t lengths[1];

  if (!EXPECT_OK(gw_codec_create("fp16", &codec))) return;
  if (!EXPECT_OK(gw_ef_state_create(4, &ef))) return;
  EXPECT_OK(gw_encode(codec, x, 4, GW_FLOAT32, 0, 0, NULL, msg, sizeof msg, &written));

  EXPECT_ERR2(gw_codec_spec(NULL, text, sizeof text), GW_ERR_INVALID_ARGUMENT, "codec is null", "gw_codec_spec");
  EXPECT_ERR2(gw_codec_spec(codec, NULL, sizeof text), GW_ERR_INVALID_ARGUMENT, "buf is null", "gw_codec_spec");
  EXPECT_ERR2(gw_codec_id(NULL, &id), GW_ERR_INVALID_ARGUMENT, "codec is null", "gw_codec_id");
  EXPECT_ERR2(gw_codec_id(codec, NULL), GW_ERR_INVALID_ARGUMENT, "id is null", "gw_codec_id");
  EXPECT_ERR2(gw_codec_max_encoded_bytes(NULL, 4, GW_FLOAT32, &bytes), GW_ERR_INVALID_ARGUMENT, "codec is null",
              "gw_codec_max_encoded_bytes");
  EXPECT_ERR2(gw_codec_max_encoded_bytes(codec, 4, GW_FLOAT32, NULL), GW_ERR_INVALID_ARGUMENT, "bytes is null",
              "gw_codec_max_encoded_bytes");

  EXPECT_ERR2(gw_encode(NULL, x, 4, GW_FLOAT32, 0, 0, NULL, msg, sizeof msg, &written), GW_ERR_INVALID_ARGUMENT,
              "codec is null", "gw_encode");
  EXPECT_ERR2(gw_encode(codec, x, 4, GW_FLOAT32, 0, 0, NULL, msg, sizeof msg, NULL), GW_ERR_INVALID_ARGUMENT,
              "written is null", "gw_encode");
  EXPECT_ERR2(gw_encode(codec, NULL, 4, GW_FLOAT32, 0, 0, NULL, msg, sizeof msg, &written), GW_ERR_INVALID_ARGUMENT,
              "src is null", "gw_encode");
  EXPECT_ERR2(gw_encode(codec, NULL, 4, GW_FLOAT32, 0, 0, ef, msg, sizeof msg, &written), GW_ERR_INVALID_ARGUMENT,
              "src is null", "gw_encode");
  EXPECT_ERR2(gw_encode(codec, x, 4, GW_FLOAT32, 0, 0, NULL, NULL, sizeof msg, &written), GW_ERR_INVALID_ARGUMENT,
              "dst is null", "gw_encode");
  EXPECT_ERR2(gw_encode(codec, x, 4, (gw_dtype_t)0, 0, 0, NULL, msg, sizeof msg, &written), GW_ERR_INVALID_ARGUMENT,
              "dtype", "gw_encode");

  EXPECT_ERR2(gw_decode(NULL, written, y, 4, GW_FLOAT32, GW_DECODE_OVERWRITE), GW_ERR_INVALID_ARGUMENT, "msg is null",
              "gw_decode");
  EXPECT_ERR2(gw_decode(msg, written, NULL, 4, GW_FLOAT32, GW_DECODE_OVERWRITE), GW_ERR_INVALID_ARGUMENT, "dst is null",
              "gw_decode");
  EXPECT_ERR2(gw_decode(msg, written, y, 4, (gw_dtype_t)0, GW_DECODE_OVERWRITE), GW_ERR_INVALID_ARGUMENT, "dtype",
              "gw_decode");
  EXPECT_ERR2(gw_decode(msg, written, y, 4, GW_FLOAT32, (gw_decode_mode_t)3), GW_ERR_INVALID_ARGUMENT, "mode",
              "gw_decode");
  EXPECT_ERR2(gw_message_info(NULL, written, &info), GW_ERR_INVALID_ARGUMENT, "msg is null", "gw_message_info");
  EXPECT_ERR2(gw_message_info(msg, written, NULL), GW_ERR_INVALID_ARGUMENT, "info is null", "gw_message_info");

  EXPECT_ERR2(gw_ef_state_create(4, NULL), GW_ERR_INVALID_ARGUMENT, "ef is null", "gw_ef_state_create");
  EXPECT_ERR2(gw_ef_state_reset(NULL), GW_ERR_INVALID_ARGUMENT, "ef is null", "gw_ef_state_reset");
  EXPECT_ERR2(gw_ef_state_count(NULL, &count), GW_ERR_INVALID_ARGUMENT, "ef is null", "gw_ef_state_count");
  EXPECT_ERR2(gw_ef_state_count(ef, NULL), GW_ERR_INVALID_ARGUMENT, "count is null", "gw_ef_state_count");
  EXPECT_ERR2(gw_ef_state_step(NULL, &step), GW_ERR_INVALID_ARGUMENT, "ef is null", "gw_ef_state_step");
  EXPECT_ERR2(gw_ef_state_step(ef, NULL), GW_ERR_INVALID_ARGUMENT, "step is null", "gw_ef_state_step");
  EXPECT_ERR2(gw_ef_state_get_residual(NULL, y, 4), GW_ERR_INVALID_ARGUMENT, "ef is null", "gw_ef_state_get_residual");
  EXPECT_ERR2(gw_ef_state_get_residual(ef, NULL, 4), GW_ERR_INVALID_ARGUMENT, "out is null",
              "gw_ef_state_get_residual");

  /* Destroying nothing is allowed, like free(NULL). */
  EXPECT_OK(gw_codec_destroy(NULL));
  EXPECT_OK(gw_ef_state_destroy(NULL));
  EXPECT_OK(gw_comm_destroy(NULL));

  /* Communicator entry points. */
  memset(&uid, 0, sizeof uid);
  EXPECT_ERR2(gw_get_unique_id(NULL), GW_ERR_INVALID_ARGUMENT, "id is null", "gw_get_unique_id");
  EXPECT_ERR2(gw_comm_init_rank(NULL, 1, uid, 0, NULL), GW_ERR_INVALID_ARGUMENT, "comm is null", "gw_comm_init_rank");
  EXPECT_ERR2(gw_comm_init_from_env(NULL, NULL), GW_ERR_INVALID_ARGUMENT, "comm is null", "gw_comm_init_from_env");
  /* A unique id of zeros did not come from gw_get_unique_id. */
  EXPECT_ERR2(gw_comm_init_rank(&comm, 1, uid, 0, NULL), GW_ERR_INVALID_ARGUMENT, "unique id", "gw_comm_init_rank");
  CHECK(comm == NULL);
  EXPECT_ERR2(gw_comm_abort(NULL), GW_ERR_INVALID_ARGUMENT, "comm is null", "gw_comm_abort");
  EXPECT_ERR2(gw_comm_revoke(NULL), GW_ERR_INVALID_ARGUMENT, "comm is null", "gw_comm_revoke");
  {
    gw_comm_t made = (gw_comm_t)(void*)&g_passed;
    EXPECT_ERR2(gw_comm_shrink(NULL, &made), GW_ERR_INVALID_ARGUMENT, "comm is null", "gw_comm_shrink");
    CHECK(made == NULL);
  }
  EXPECT_ERR2(gw_comm_rank(NULL, &ival), GW_ERR_INVALID_ARGUMENT, "comm is null", "gw_comm_rank");
  EXPECT_ERR2(gw_comm_size(NULL, &ival), GW_ERR_INVALID_ARGUMENT, "comm is null", "gw_comm_size");
  EXPECT_ERR2(gw_comm_topology(NULL, &ival, &ival, &ival, &ival), GW_ERR_INVALID_ARGUMENT, "comm is null",
              "gw_comm_topology");
  EXPECT_ERR2(gw_comm_get_async_error(NULL, &rval), GW_ERR_INVALID_ARGUMENT, "comm is null", "gw_comm_get_async_error");
  EXPECT_ERR2(gw_allreduce(NULL, x, y, 4, GW_FLOAT32, GW_SUM, NULL, NULL), GW_ERR_INVALID_ARGUMENT, "comm is null",
              "gw_allreduce");
  EXPECT_ERR2(gw_allreduce_ex(NULL, x, y, 4, GW_FLOAT32, GW_SUM, NULL, NULL, GW_ALGO_RING), GW_ERR_INVALID_ARGUMENT,
              "comm is null", "gw_allreduce");
  EXPECT_ERR2(gw_iallreduce(NULL, x, y, 4, GW_FLOAT32, GW_SUM, NULL, NULL, GW_ALGO_AUTO, &req), GW_ERR_INVALID_ARGUMENT,
              "comm is null", "gw_iallreduce");
  EXPECT_ERR2(gw_test(NULL, &ival), GW_ERR_INVALID_ARGUMENT, "request is null", "gw_test");
  EXPECT_ERR2(gw_wait(NULL), GW_ERR_INVALID_ARGUMENT, "request is null", "gw_wait");
  EXPECT_ERR2(gw_allreduce_algo(NULL, 4, GW_FLOAT32, NULL, &algo), GW_ERR_INVALID_ARGUMENT, "comm is null",
              "gw_allreduce_algo");
  EXPECT_ERR2(gw_allreduce_algo_device(NULL, 4, GW_FLOAT32, NULL, &algo), GW_ERR_INVALID_ARGUMENT, "comm is null",
              "gw_allreduce_algo_device");
  EXPECT_ERR2(gw_sparse_allgather(NULL, msg, written, msg, sizeof msg, lengths), GW_ERR_INVALID_ARGUMENT,
              "comm is null", "gw_sparse_allgather");
  EXPECT_ERR2(gw_sparse_allgather_dense(NULL, msg, written, y, 4), GW_ERR_INVALID_ARGUMENT, "comm is null",
              "gw_sparse_allgather_dense");
  EXPECT_ERR2(gw_allgather(NULL, x, y, sizeof x), GW_ERR_INVALID_ARGUMENT, "comm is null", "gw_allgather");
  EXPECT_ERR2(gw_broadcast(NULL, y, sizeof y, 0), GW_ERR_INVALID_ARGUMENT, "comm is null", "gw_broadcast");
  EXPECT_ERR2(gw_barrier(NULL), GW_ERR_INVALID_ARGUMENT, "comm is null", "gw_barrier");

  EXPECT_OK(gw_ef_state_destroy(ef));
  EXPECT_OK(gw_codec_destroy(codec));
}

/* ---------------------------------------------------------------------------------- */

#define COMM_N 5000

static void test_communicator(void) {
  gw_unique_id_t uid;
  gw_config_t cfg = GW_CONFIG_INITIALIZER;
  gw_config_t bad_cfg = GW_CONFIG_INITIALIZER;
  gw_comm_t comm = NULL, shrunk = NULL, again = NULL;
  gw_codec_t fp16 = NULL, topk = NULL;
  gw_request_t req = NULL;
  gw_result_t async = GW_ERR_INTERNAL;
  gw_algo_t algo = GW_ALGO_SPARSE_ALLGATHER;
  gw_result_t init;
  static float x[COMM_N], y[COMM_N], z[COMM_N], d[COMM_N];
  static uint16_t hx[COMM_N], hy[COMM_N];
  static unsigned char msg[56 + COMM_N * 8], gathered[56 + COMM_N * 8];
  size_t lengths[1] = {0}, written = 0, i;
  int rank = -1, size = -1, done = 0, spins = 0, bad = 0;

  /* UCX may need to be told to use loopback-capable transports for a one-rank job. */
  if (getenv("UCX_TLS") == NULL) setenv("UCX_TLS", "tcp,self", 0);
  cfg.timeout_s = 30.0;

  if (!EXPECT_OK(gw_get_unique_id(&uid))) return;

  /* Bad sizes and ranks are argument errors, found before any rendezvous. */
  comm = (gw_comm_t)(void*)&g_passed;
  EXPECT_ERR2(gw_comm_init_rank(&comm, 0, uid, 0, &cfg), GW_ERR_INVALID_ARGUMENT, "nranks", "gw_comm_init_rank");
  CHECK(comm == NULL);
  EXPECT_ERR(gw_comm_init_rank(&comm, -3, uid, 0, &cfg), GW_ERR_INVALID_ARGUMENT, "nranks");
  EXPECT_ERR(gw_comm_init_rank(&comm, 1, uid, 1, &cfg), GW_ERR_INVALID_ARGUMENT, "rank 1");
  EXPECT_ERR(gw_comm_init_rank(&comm, 1, uid, -1, &cfg), GW_ERR_INVALID_ARGUMENT, "rank -1");
  EXPECT_ERR(gw_comm_init_rank(&comm, 2, uid, 5, &cfg), GW_ERR_INVALID_ARGUMENT, "rank 5");
  CHECK(comm == NULL);
  bad_cfg.magic = 0;
  EXPECT_ERR(gw_comm_init_rank(&comm, 1, uid, 0, &bad_cfg), GW_ERR_INVALID_ARGUMENT, "magic");
  bad_cfg.magic = GW_CONFIG_MAGIC;
  bad_cfg.timeout_s = -1.0;
  EXPECT_ERR(gw_comm_init_rank(&comm, 1, uid, 0, &bad_cfg), GW_ERR_INVALID_ARGUMENT, "timeout_s");
  bad_cfg.timeout_s = 0.0;
  bad_cfg.size = sizeof bad_cfg - 1;
  EXPECT_ERR(gw_comm_init_rank(&comm, 1, uid, 0, &bad_cfg), GW_ERR_INVALID_ARGUMENT, "size");
  bad_cfg.size = sizeof bad_cfg;
  bad_cfg.chunk_bytes = 100;
  EXPECT_ERR(gw_comm_init_rank(&comm, 1, uid, 0, &bad_cfg), GW_ERR_INVALID_ARGUMENT, "chunk_bytes");

  /* The real thing: one rank. Compressed all-reduces below run from 0 bytes up. */
  cfg.dense_threshold_bytes = 0;
  init = gw_comm_init_rank(&comm, 1, uid, 0, &cfg);
  if (init == GW_ERR_UNSUPPORTED && strstr(gw_get_last_error(), "without UCX") != NULL) {
    /* A build configured with GW_WITH_UCX=OFF has no transport; it must say so. */
    fprintf(stderr, "note: communicator checks skipped: %s\n", gw_get_last_error());
    CHECK(comm == NULL);
    return;
  }
  if (!EXPECT_OK(init) || comm == NULL) return;
  EXPECT_OK(gw_comm_rank(comm, &rank));
  CHECK(rank == 0);
  EXPECT_OK(gw_comm_size(comm, &size));
  CHECK(size == 1);
  EXPECT_OK(gw_comm_get_async_error(comm, &async));
  CHECK(async == GW_SUCCESS);
  EXPECT_ERR2(gw_comm_rank(comm, NULL), GW_ERR_INVALID_ARGUMENT, "rank is null", "gw_comm_rank");
  EXPECT_ERR2(gw_comm_size(comm, NULL), GW_ERR_INVALID_ARGUMENT, "size is null", "gw_comm_size");
  /* One rank: one node, local rank 0 of 1; each output pointer is required. */
  {
    int nodes = -1, node = -1, lrank = -1, lsize = -1;
    EXPECT_OK(gw_comm_topology(comm, &nodes, &node, &lrank, &lsize));
    CHECK(nodes == 1 && node == 0 && lrank == 0 && lsize == 1);
    EXPECT_ERR2(gw_comm_topology(comm, NULL, &node, &lrank, &lsize), GW_ERR_INVALID_ARGUMENT, "node_count is null",
                "gw_comm_topology");
    EXPECT_ERR2(gw_comm_topology(comm, &nodes, NULL, &lrank, &lsize), GW_ERR_INVALID_ARGUMENT, "node is null",
                "gw_comm_topology");
    EXPECT_ERR2(gw_comm_topology(comm, &nodes, &node, NULL, &lsize), GW_ERR_INVALID_ARGUMENT, "local_rank is null",
                "gw_comm_topology");
    EXPECT_ERR2(gw_comm_topology(comm, &nodes, &node, &lrank, NULL), GW_ERR_INVALID_ARGUMENT, "local_size is null",
                "gw_comm_topology");
    /* Asked for by name on one rank, hierarchical runs flat (and the policy says so). */
    algo = GW_ALGO_HIERARCHICAL;
    EXPECT_OK(gw_allreduce_ex(comm, x, y, 4, GW_FLOAT32, GW_SUM, NULL, NULL, GW_ALGO_HIERARCHICAL));
    EXPECT_OK(gw_allreduce_algo(comm, 4, GW_FLOAT32, NULL, &algo));
    CHECK(algo == GW_ALGO_RING);
    algo = GW_ALGO_HIERARCHICAL;
    EXPECT_OK(gw_allreduce_algo_device(comm, 4, GW_FLOAT32, NULL, &algo));
    CHECK(algo == GW_ALGO_RING);
    EXPECT_ERR(gw_allreduce_algo_device(comm, 4, GW_FLOAT32, NULL, NULL), GW_ERR_INVALID_ARGUMENT, "algo");
  }
  EXPECT_ERR2(gw_comm_get_async_error(comm, NULL), GW_ERR_INVALID_ARGUMENT, "error is null", "gw_comm_get_async_error");
  EXPECT_OK(gw_barrier(comm));

  /* Dense all-reduce of one rank: the sum (and the mean) is the input, bit for bit. */
  fill(x, COMM_N, 6);
  memset(y, 0, sizeof y);
  EXPECT_OK(gw_allreduce(comm, x, y, COMM_N, GW_FLOAT32, GW_SUM, NULL, NULL));
  CHECK(memcmp(x, y, sizeof x) == 0);
  memset(y, 0, sizeof y);
  EXPECT_OK(gw_allreduce(comm, x, y, COMM_N, GW_FLOAT32, GW_AVG, NULL, NULL));
  CHECK(memcmp(x, y, sizeof x) == 0);
  memcpy(z, x, sizeof x);
  EXPECT_OK(gw_allreduce(comm, z, z, COMM_N, GW_FLOAT32, GW_SUM, NULL, NULL)); /* in place */
  CHECK(memcmp(x, z, sizeof x) == 0);
  for (i = 0; i < COMM_N; ++i) hx[i] = (uint16_t)(0x3C00u + (i & 0x3FFu)); /* halves in [1, 2) */
  EXPECT_OK(gw_allreduce_ex(comm, hx, hy, COMM_N, GW_FLOAT16, GW_SUM, NULL, NULL, GW_ALGO_RING));
  CHECK(memcmp(hx, hy, sizeof hx) == 0);
  EXPECT_OK(gw_allreduce(comm, x, y, 0, GW_FLOAT32, GW_SUM, NULL, NULL));
  EXPECT_OK(gw_allreduce_algo(comm, COMM_N, GW_FLOAT32, NULL, &algo));
  CHECK(algo == GW_ALGO_RING);

  /* Compressed with fp16: the one rank's values come back rounded to half precision. */
  if (EXPECT_OK(gw_codec_create("fp16", &fp16))) {
    memset(y, 0, sizeof y);
    EXPECT_OK(gw_allreduce(comm, x, y, COMM_N, GW_FLOAT32, GW_SUM, fp16, NULL));
    bad = 0;
    for (i = 0; i < COMM_N; ++i) {
      if (!(absf(y[i] - x[i]) <= absf(x[i]) * (1.0f / 1024.0f) + 1e-7f)) ++bad;
    }
    if (!check(bad == 0, __LINE__, "fp16 all-reduce of one rank is the input at half precision")) {
      fprintf(stderr, "  %d of %d elements out of tolerance\n", bad, COMM_N);
    }
    /* Non-blocking form, completed by gw_test then gw_wait on a second request. */
    memset(z, 0, sizeof z);
    if (EXPECT_OK(gw_iallreduce(comm, x, z, COMM_N, GW_FLOAT32, GW_SUM, fp16, NULL, GW_ALGO_AUTO, &req))) {
      gw_result_t tr = GW_SUCCESS;
      done = 0;
      spins = 0;
      while (!done && spins < 100000000 && tr == GW_SUCCESS) {
        tr = gw_test(req, &done); /* frees the request once done */
        ++spins;
      }
      EXPECT_OK(tr);
      CHECK(done == 1);
      CHECK(memcmp(y, z, sizeof y) == 0); /* same input, same codec, same bits */
    }
    memset(z, 0, sizeof z);
    if (EXPECT_OK(gw_iallreduce(comm, x, z, COMM_N, GW_FLOAT32, GW_SUM, NULL, NULL, GW_ALGO_AUTO, &req))) {
      EXPECT_OK(gw_wait(req));
      CHECK(memcmp(x, z, sizeof x) == 0);
    }
  }

  /* Argument errors on a healthy communicator leave it healthy. */
  EXPECT_ERR(gw_allreduce(comm, NULL, y, COMM_N, GW_FLOAT32, GW_SUM, NULL, NULL), GW_ERR_INVALID_ARGUMENT, "sendbuf");
  EXPECT_ERR(gw_allreduce(comm, x, NULL, COMM_N, GW_FLOAT32, GW_SUM, NULL, NULL), GW_ERR_INVALID_ARGUMENT, "recvbuf");
  EXPECT_ERR(gw_allreduce(comm, x, y, COMM_N, (gw_dtype_t)0, GW_SUM, NULL, NULL), GW_ERR_INVALID_ARGUMENT, "dtype");
  /* One past the last algorithm, and far past it. */
  EXPECT_ERR(gw_allreduce_ex(comm, x, y, COMM_N, GW_FLOAT32, GW_SUM, NULL, NULL, (gw_algo_t)(GW_ALGO_RABENSEIFNER + 1)),
             GW_ERR_INVALID_ARGUMENT, "algo 10");
  EXPECT_ERR(gw_iallreduce(comm, x, y, COMM_N, GW_FLOAT32, GW_SUM, NULL, NULL, (gw_algo_t)200, &req),
             GW_ERR_INVALID_ARGUMENT, "algo 200");
  CHECK(req == NULL);
  EXPECT_ERR(gw_iallreduce(comm, x, y, COMM_N, GW_FLOAT32, GW_SUM, NULL, NULL, GW_ALGO_AUTO, NULL),
             GW_ERR_INVALID_ARGUMENT, "request");
  EXPECT_ERR(gw_allreduce_algo(comm, COMM_N, GW_FLOAT32, NULL, NULL), GW_ERR_INVALID_ARGUMENT, "algo");
  EXPECT_ERR(gw_broadcast(comm, y, sizeof y, 1), GW_ERR_INVALID_ARGUMENT, "root");
  EXPECT_ERR(gw_broadcast(comm, NULL, sizeof y, 0), GW_ERR_INVALID_ARGUMENT, "buf");
  EXPECT_ERR(gw_allgather(comm, NULL, y, sizeof y), GW_ERR_INVALID_ARGUMENT, "sendbuf");
  EXPECT_ERR(gw_sparse_allgather(comm, x, sizeof x, z, sizeof z, NULL), GW_ERR_INVALID_ARGUMENT, "lengths");
  EXPECT_OK(gw_comm_get_async_error(comm, &async));
  CHECK(async == GW_SUCCESS);

  /* All-gather, broadcast and the sparse gathers of one rank. */
  memset(y, 0, sizeof y);
  EXPECT_OK(gw_allgather(comm, x, y, sizeof x));
  CHECK(memcmp(x, y, sizeof x) == 0);
  memcpy(y, x, sizeof x);
  EXPECT_OK(gw_broadcast(comm, y, sizeof y, 0));
  CHECK(memcmp(x, y, sizeof x) == 0);
  if (EXPECT_OK(gw_codec_create("topk:k=50", &topk))) {
    EXPECT_OK(gw_encode(topk, x, COMM_N, GW_FLOAT32, 0, 0, NULL, msg, sizeof msg, &written));
    CHECK(written == 56 + 50 * 8);
    EXPECT_OK(gw_sparse_allgather(comm, msg, written, gathered, sizeof gathered, lengths));
    CHECK(lengths[0] == written);
    CHECK(memcmp(msg, gathered, written) == 0);
    EXPECT_OK(gw_decode(msg, written, d, COMM_N, GW_FLOAT32, GW_DECODE_OVERWRITE));
    for (i = 0; i < COMM_N; ++i) z[i] = 7.0f;
    EXPECT_OK(gw_sparse_allgather_dense(comm, msg, written, z, COMM_N));
    CHECK(memcmp(d, z, sizeof d) == 0);
  }
  EXPECT_OK(gw_barrier(comm));

  /* Abort: every later call fails with GW_ERR_ABORTED, and the state says so. */
  EXPECT_OK(gw_comm_abort(comm));
  EXPECT_ERR(gw_barrier(comm), GW_ERR_ABORTED, "abort");
  EXPECT_ERR(gw_allreduce(comm, x, y, COMM_N, GW_FLOAT32, GW_SUM, NULL, NULL), GW_ERR_ABORTED, "abort");
  EXPECT_OK(gw_comm_get_async_error(comm, &async));
  CHECK(async == GW_ERR_ABORTED);

  /* Shrink after the abort: the lone survivor gets a working communicator of one rank; the
   * old one stays broken and is shrunk once. A revoke fails the new one's calls. */
  EXPECT_ERR2(gw_comm_shrink(comm, NULL), GW_ERR_INVALID_ARGUMENT, "newcomm is null", "gw_comm_shrink");
  if (EXPECT_OK(gw_comm_shrink(comm, &shrunk))) {
    EXPECT_OK(gw_comm_size(shrunk, &size));
    CHECK(size == 1);
    EXPECT_OK(gw_allreduce(shrunk, x, y, COMM_N, GW_FLOAT32, GW_SUM, NULL, NULL));
    CHECK(memcmp(x, y, sizeof x) == 0);
    EXPECT_ERR(gw_barrier(comm), GW_ERR_ABORTED, "abort");
    EXPECT_ERR(gw_comm_shrink(comm, &again), GW_ERR_INVALID_USAGE, "shrunk once");
    CHECK(again == NULL);
    EXPECT_OK(gw_comm_revoke(shrunk));
    EXPECT_ERR(gw_barrier(shrunk), GW_ERR_REVOKED, "revoked");
    EXPECT_OK(gw_comm_get_async_error(shrunk, &async));
    CHECK(async == GW_ERR_REVOKED);
    EXPECT_OK(gw_comm_destroy(shrunk));
  }
  EXPECT_OK(gw_comm_destroy(comm));
  EXPECT_OK(gw_codec_destroy(fp16));
  EXPECT_OK(gw_codec_destroy(topk));
}

/* The device half of the codec ABI on a machine that cannot run kernels (CI: no GPU; the
 * sanitized build: no CUDA at all): every call fails with one clear code, never crashes, and
 * leaves its outputs cleared. With a GPU, tests/gpu checks the real thing. */
static void test_device_calls_without_gpu(void) {
  int count = -1;
  gw_result_t r = gw_cuda_device_count(&count);
  if (r == GW_SUCCESS && count > 0) {
    printf("a CUDA device is present: device calls are checked by tests/gpu\n");
    return;
  }
  CHECK(r == GW_ERR_CUDA || r == GW_ERR_UNSUPPORTED);
  CHECK(count == 0);
  EXPECT_ERR(gw_cuda_device_count(NULL), GW_ERR_INVALID_ARGUMENT, "count");
  EXPECT_ERR(gw_cuda_device_count(&count), r, r == GW_ERR_UNSUPPORTED ? "without CUDA" : "cudaGetDeviceCount");
  gw_ef_state_t ef = (gw_ef_state_t)1;
  EXPECT_ERR(gw_ef_state_create_device(16, &ef), r, r == GW_ERR_UNSUPPORTED ? "without CUDA" : "cuda");
  CHECK(ef == NULL);
  gw_codec_t codec = NULL;
  EXPECT_OK(gw_codec_create("qsgd:bits=4", &codec));
  float x[16] = {0};
  unsigned char out[256];
  size_t written = 7;
  EXPECT_ERR(gw_encode_device(codec, x, 16, GW_FLOAT32, 0, 0, NULL, out, sizeof out, &written, NULL), r,
             "gw_encode_device");
  CHECK(written == 0);
  written = 7;
  EXPECT_ERR(gw_encode_device_async(codec, x, 16, GW_FLOAT32, 0, 0, NULL, out, sizeof out, &written, NULL), r,
             "gw_encode_device_async");
  CHECK(written == 0);
  EXPECT_ERR(gw_encode_device_async(codec, x, 16, GW_FLOAT32, 0, 0, NULL, out, sizeof out, NULL, NULL),
             r == GW_ERR_UNSUPPORTED ? r : GW_ERR_INVALID_ARGUMENT,
             r == GW_ERR_UNSUPPORTED ? "without CUDA" : "max_written");
  EXPECT_ERR(gw_decode_device(out, sizeof out, x, 16, GW_FLOAT32, GW_DECODE_OVERWRITE, NULL), r, "gw_decode_device");

  /* The device collectives: refused with the same reason, and the communicator goes on. */
  gw_unique_id_t uid;
  EXPECT_OK(gw_get_unique_id(&uid));
  gw_comm_t comm = NULL;
  EXPECT_OK(gw_comm_init_rank(&comm, 1, uid, 0, NULL));
  const char* why = r == GW_ERR_UNSUPPORTED ? "without CUDA" : "cudaGetDeviceCount";
  EXPECT_ERR(gw_allreduce_device(comm, x, x, 16, GW_FLOAT32, GW_SUM, codec, NULL, GW_ALGO_AUTO, NULL), r, why);
  gw_request_t req = (gw_request_t)1;
  EXPECT_ERR(gw_iallreduce_device(comm, x, x, 16, GW_FLOAT32, GW_SUM, NULL, NULL, GW_ALGO_AUTO, NULL, &req), r, why);
  CHECK(req == NULL);
  EXPECT_ERR(gw_iallreduce_device(comm, x, x, 16, GW_FLOAT32, GW_SUM, NULL, NULL, GW_ALGO_AUTO, NULL, NULL),
             GW_ERR_INVALID_ARGUMENT, "request");
  EXPECT_ERR(gw_allgather_device(comm, x, out, 4, NULL), r, why);
  EXPECT_ERR(gw_broadcast_device(comm, x, 4, 0, NULL), r, why);
  gw_ef_state_t host_ef = NULL;
  EXPECT_OK(gw_ef_state_create(16, &host_ef));
  EXPECT_ERR(gw_allreduce_device(comm, x, x, 16, GW_FLOAT32, GW_SUM, codec, host_ef, GW_ALGO_AUTO, NULL),
             GW_ERR_INVALID_ARGUMENT, "host state");
  EXPECT_ERR(gw_comm_enable_nccl(comm), GW_ERR_UNSUPPORTED, "rank 0");
  int enabled = -1;
  EXPECT_OK(gw_comm_nccl_enabled(comm, &enabled));
  CHECK(enabled == 0);
  EXPECT_ERR(gw_comm_nccl_enabled(comm, NULL), GW_ERR_INVALID_ARGUMENT, "enabled");
  EXPECT_ERR(gw_comm_enable_nccl(NULL), GW_ERR_INVALID_ARGUMENT, "comm");
  x[0] = 1.0f;
  EXPECT_OK(gw_allreduce(comm, x, x, 16, GW_FLOAT32, GW_SUM, NULL, NULL));
  CHECK(x[0] == 1.0f);
  EXPECT_OK(gw_ef_state_destroy(host_ef));
  EXPECT_OK(gw_comm_destroy(comm));
  EXPECT_OK(gw_codec_destroy(codec));
}

int main(void) {
  test_version_and_error_strings();
  test_codec_list();
  test_codec_create();
  test_codec_create_errors();
  test_max_encoded_bytes();
  round_trip_fp16();
  round_trip_qsgd8("qsgd:bits=8", 1.0f);
  round_trip_qsgd8("qsgd:bits=8,rounding=nearest", 0.5f);
  test_decode_rejects();
  test_error_feedback();
  test_null_arguments();
  test_communicator();
  test_device_calls_without_gpu();
  fflush(stderr);
  printf("%d passed, %d failed\n", g_passed, g_failed);
  fflush(stdout);
  return g_failed == 0 ? 0 : 1;
}
