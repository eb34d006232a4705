#include <gradwire/gradwire.h>
#include <stdio.h>

int main(void) {
  int version = 0;
  gw_codec_t codec = NULL;
  if (gw_get_version(&version) != GW_SUCCESS || version != GW_VERSION_CODE) return 1;
  if (gw_codec_create("qsgd:bits=4", &codec) != GW_SUCCESS) return 2;
  gw_codec_destroy(codec);
  printf("consumer_c: gradwire %s\n", GW_VERSION_STRING);
  return 0;
}
