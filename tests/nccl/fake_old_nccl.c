/* A stand-in libnccl that reports NCCL 2.13.5, too old for nonblocking communicators: every
   symbol gradwire resolves exists, so only the version check can refuse it. */
#pragma GCC visibility push(default) /* the project builds with hidden visibility */
#include <nccl.h>

ncclResult_t ncclGetVersion(int* version) {
  *version = 21305;
  return ncclSuccess;
}
ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  (void)id;
  return ncclInternalError;
}
ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config) {
  (void)comm;
  (void)nranks;
  (void)id;
  (void)rank;
  (void)config;
  return ncclInternalError;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* error) {
  (void)comm;
  (void)error;
  return ncclInternalError;
}
ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  (void)comm;
  return ncclInternalError;
}
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  (void)comm;
  return ncclInternalError;
}
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  (void)comm;
  return ncclInternalError;
}
const char* ncclGetErrorString(ncclResult_t result) {
  (void)result;
  return "fake";
}
const char* ncclGetLastError(ncclComm_t comm) {
  (void)comm;
  return "";
}
ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  (void)send;
  (void)recv;
  (void)count;
  (void)type;
  (void)op;
  (void)comm;
  (void)stream;
  return ncclInternalError;
}
ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t type, ncclComm_t comm,
                           cudaStream_t stream) {
  (void)send;
  (void)recv;
  (void)count;
  (void)type;
  (void)comm;
  (void)stream;
  return ncclInternalError;
}
ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t stream) {
  (void)send;
  (void)recv;
  (void)count;
  (void)type;
  (void)op;
  (void)comm;
  (void)stream;
  return ncclInternalError;
}
ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  (void)send;
  (void)recv;
  (void)count;
  (void)type;
  (void)root;
  (void)comm;
  (void)stream;
  return ncclInternalError;
}
#pragma GCC visibility pop
