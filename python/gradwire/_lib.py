"""Loads libgradwire.so with ctypes and declares the C ABI's prototypes.

Where the library comes from, first match wins:
  1. $GRADWIRE_LIB, a path to libgradwire.so (nothing else is tried when it is set);
  2. build/libgradwire.so and build-release/libgradwire.so of the source tree this package
     sits in (python/../build);
  3. libgradwire.so inside this package (what `pip install .` puts there);
  4. <prefix>/lib/libgradwire.so.0 when this package was installed by `cmake --install` with
     GW_INSTALL_PYTHON=ON (the package in <prefix>/lib/python3.X/site-packages/gradwire);
  5. the system's search path (ctypes.util.find_library("gradwire"), e.g. after
     `cmake --install build --prefix /usr/local`).
"""
import ctypes
import ctypes.util
import os

_HERE = os.path.dirname(os.path.abspath(__file__))

GW_SUCCESS = 0
# Codecs take the first three; the dense collectives all of them (bool travels as uint8).
DTYPES = {"float32": 1, "float16": 2, "bfloat16": 3, "float64": 4, "int8": 5, "uint8": 6, "int32": 7, "int64": 8}
DTYPE_SIZES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int8": 1, "uint8": 1, "int32": 4,
               "int64": 8}
DECODE_MODES = {"overwrite": 0, "accumulate": 1, "subtract": 2}
OPS = {"sum": 0, "avg": 1, "prod": 2, "min": 3, "max": 4}
ALGOS = {"auto": 0, "ring": 1, "compressed_ring": 2, "scatter_reduce": 3, "sparse_allgather": 4, "hierarchical": 5,
         "recursive_doubling": 6, "halving_doubling": 7, "sparse_doubling": 8,
         "rabenseifner": 9}
RESULT_NAMES = [
    "success", "invalid argument", "invalid message", "unsupported", "out of memory",
    "buffer too small", "internal error", "system error", "remote error", "timeout",
    "aborted", "CUDA error", "invalid usage", "revoked",
]
GW_ERR_INVALID_ARGUMENT = 1
GW_ERR_UNSUPPORTED = 3
GW_ERR_REMOTE = 8
GW_ERR_TIMEOUT = 9
GW_ERR_ABORTED = 10
GW_ERR_REVOKED = 13
GW_CONFIG_MAGIC = 0x67776366


class GradwireError(RuntimeError):
    """A gradwire call failed: code is the gw_result_t, message the library's own words."""

    def __init__(self, code, message):
        self.code = code
        self.message = message
        name = RESULT_NAMES[code] if 0 <= code < len(RESULT_NAMES) else "error %d" % code
        super().__init__("%s: %s" % (name, message))

    def __reduce__(self):  # picklable, so it survives a trip through multiprocessing
        return (GradwireError, (self.code, self.message))


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


class MessageInfo(ctypes.Structure):
    _fields_ = [("codec", ctypes.c_int), ("dtype", ctypes.c_int), ("count", ctypes.c_uint64),
                ("nnz", ctypes.c_uint64), ("total_bytes", ctypes.c_uint64)]


class CodecInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("id", ctypes.c_int), ("caps", ctypes.c_uint32),
                ("keys", ctypes.c_char_p)]


class Config(ctypes.Structure):
    """gw_config_t. Zero or negative fields mean "the default, or its environment variable"."""
    _fields_ = [("size", ctypes.c_size_t), ("magic", ctypes.c_uint), ("version", ctypes.c_uint),
                ("timeout_s", ctypes.c_double), ("chunk_bytes", ctypes.c_size_t),
                ("dense_threshold_bytes", ctypes.c_longlong)]


class CommStats(ctypes.Structure):
    """gw_comm_stats_t (libraries that have gw_comm_get_stats)."""
    _fields_ = [("size", ctypes.c_size_t), ("collectives", ctypes.c_uint64), ("allreduces", ctypes.c_uint64),
                ("bytes_sent", ctypes.c_uint64), ("messages_sent", ctypes.c_uint64),
                ("encode_s", ctypes.c_double), ("decode_s", ctypes.c_double), ("total_s", ctypes.c_double),
                ("last_algo", ctypes.c_int), ("hidden_s", ctypes.c_double),
                ("algo_calls", ctypes.c_uint64 * 16)]


def _candidates():
    env = os.environ.get("GRADWIRE_LIB")
    if env:
        yield env
        return
    root = os.path.dirname(os.path.dirname(_HERE))
    for build in ("build", "build-release"):
        yield os.path.join(root, build, "libgradwire.so")
    yield os.path.join(_HERE, "libgradwire.so")
    prefix_lib = os.path.dirname(os.path.dirname(os.path.dirname(_HERE)))
    yield os.path.join(prefix_lib, "libgradwire.so.0")
    found = ctypes.util.find_library("gradwire")
    if found:
        yield found


def _load():
    tried = []
    for path in _candidates():
        if os.path.exists(path) or not os.path.dirname(path):
            try:
                return ctypes.CDLL(path), path
            except OSError as e:
                tried.append("%s (%s)" % (path, e))
        else:
            tried.append("%s (no such file)" % path)
    raise ImportError("libgradwire.so not found; build it (scripts/build.sh) or set GRADWIRE_LIB "
                      "to its path. Tried: " + ", ".join(tried))


lib, path = _load()

_c = ctypes
_sz = _c.c_size_t
_vp = _c.c_void_p
_p = _c.POINTER

_PROTOTYPES = {
    "gw_get_error_string": (_c.c_char_p, [_c.c_int]),
    "gw_get_last_error": (_c.c_char_p, []),
    "gw_get_version": (_c.c_int, [_p(_c.c_int)]),
    "gw_codec_create": (_c.c_int, [_c.c_char_p, _p(_vp)]),
    "gw_codec_destroy": (_c.c_int, [_vp]),
    "gw_codec_spec": (_c.c_int, [_vp, _c.c_char_p, _sz]),
    "gw_codec_id": (_c.c_int, [_vp, _p(_c.c_int)]),
    "gw_codec_max_encoded_bytes": (_c.c_int, [_vp, _sz, _c.c_int, _p(_sz)]),
    "gw_codec_count": (_sz, []),
    "gw_codec_info": (_c.c_int, [_sz, _p(CodecInfo)]),
    "gw_encode": (_c.c_int, [_vp, _vp, _sz, _c.c_int, _c.c_uint64, _c.c_uint32, _vp, _vp, _sz, _p(_sz)]),
    "gw_decode": (_c.c_int, [_vp, _sz, _vp, _sz, _c.c_int, _c.c_int]),
    "gw_message_info": (_c.c_int, [_vp, _sz, _p(MessageInfo)]),
    "gw_ef_state_create": (_c.c_int, [_sz, _p(_vp)]),
    "gw_ef_state_destroy": (_c.c_int, [_vp]),
    "gw_ef_state_reset": (_c.c_int, [_vp]),
    "gw_ef_state_count": (_c.c_int, [_vp, _p(_sz)]),
    "gw_ef_state_step": (_c.c_int, [_vp, _p(_c.c_uint64)]),
    "gw_ef_state_get_residual": (_c.c_int, [_vp, _vp, _sz]),
    "gw_get_unique_id": (_c.c_int, [_p(UniqueId)]),
    "gw_comm_init_rank": (_c.c_int, [_p(_vp), _c.c_int, UniqueId, _c.c_int, _p(Config)]),
    "gw_comm_init_from_env": (_c.c_int, [_p(_vp), _p(Config)]),
    "gw_comm_destroy": (_c.c_int, [_vp]),
    "gw_comm_abort": (_c.c_int, [_vp]),
    "gw_comm_rank": (_c.c_int, [_vp, _p(_c.c_int)]),
    "gw_comm_size": (_c.c_int, [_vp, _p(_c.c_int)]),
    "gw_comm_topology": (_c.c_int, [_vp, _p(_c.c_int), _p(_c.c_int), _p(_c.c_int), _p(_c.c_int)]),
    "gw_comm_get_async_error": (_c.c_int, [_vp, _p(_c.c_int)]),
    "gw_allreduce_ex": (_c.c_int, [_vp, _vp, _vp, _sz, _c.c_int, _c.c_int, _vp, _vp, _c.c_int]),
    "gw_iallreduce": (_c.c_int, [_vp, _vp, _vp, _sz, _c.c_int, _c.c_int, _vp, _vp, _c.c_int, _p(_vp)]),
    "gw_test": (_c.c_int, [_vp, _p(_c.c_int)]),
    "gw_wait": (_c.c_int, [_vp]),
    "gw_allreduce_algo": (_c.c_int, [_vp, _sz, _c.c_int, _vp, _p(_c.c_int)]),
    "gw_allreduce_algo_device": (_c.c_int, [_vp, _sz, _c.c_int, _vp, _p(_c.c_int)]),
    "gw_allgather": (_c.c_int, [_vp, _vp, _vp, _sz]),
    "gw_broadcast": (_c.c_int, [_vp, _vp, _sz, _c.c_int]),
    "gw_barrier": (_c.c_int, [_vp]),
}

# Newer calls: bound when the loaded library has them.
_OPTIONAL = {
    "gw_comm_get_stats": (_c.c_int, [_vp, _p(CommStats)]),
    "gw_comm_reset_stats": (_c.c_int, [_vp]),
    "gw_ef_state_create_device": (_c.c_int, [_sz, _p(_vp)]),
    "gw_allreduce_device": (_c.c_int, [_vp, _vp, _vp, _sz, _c.c_int, _c.c_int, _vp, _vp, _c.c_int, _vp]),
    "gw_iallreduce_device": (_c.c_int, [_vp, _vp, _vp, _sz, _c.c_int, _c.c_int, _vp, _vp, _c.c_int, _vp, _p(_vp)]),
    "gw_allgather_device": (_c.c_int, [_vp, _vp, _vp, _sz, _vp]),
    "gw_allgather_compressed": (_c.c_int, [_vp, _vp, _vp, _sz, _c.c_int, _vp]),
    "gw_iallgather_compressed": (_c.c_int, [_vp, _vp, _vp, _sz, _c.c_int, _vp, _p(_vp)]),
    "gw_allgather_compressed_device": (_c.c_int, [_vp, _vp, _vp, _sz, _c.c_int, _vp, _vp]),
    "gw_iallgather_compressed_device": (_c.c_int, [_vp, _vp, _vp, _sz, _c.c_int, _vp, _vp, _p(_vp)]),
    "gw_broadcast_device": (_c.c_int, [_vp, _vp, _sz, _c.c_int, _vp]),
    "gw_get_build_info": (_c.c_char_p, []),
    "gw_comm_enable_nccl": (_c.c_int, [_vp]),
    "gw_comm_nccl_enabled": (_c.c_int, [_vp, _p(_c.c_int)]),
    "gw_ef_state_set_residual": (_c.c_int, [_vp, _vp, _sz]),
    "gw_ef_state_set_step": (_c.c_int, [_vp, _c.c_uint64]),
    "gw_ef_state_save": (_c.c_int, [_vp, _vp, _sz, _p(_sz)]),
    "gw_ef_state_load": (_c.c_int, [_vp, _vp, _sz]),
    "gw_iallgather_device": (_c.c_int, [_vp, _vp, _vp, _sz, _vp, _p(_vp)]),
    "gw_ibroadcast_device": (_c.c_int, [_vp, _vp, _sz, _c.c_int, _vp, _p(_vp)]),
    "gw_request_stream_wait": (_c.c_int, [_vp, _vp]),
    "gw_comm_trim": (_c.c_int, [_vp]),
    "gw_standin_stream_create": (_c.c_int, [_c.c_int, _c.c_uint64, _p(_vp)]),
    "gw_standin_stream_destroy": (_c.c_int, [_vp]),
    "gw_standin_stream_enqueue": (_c.c_int, [_vp, _vp, _vp]),
    "gw_standin_memcpy_async": (_c.c_int, [_vp, _vp, _sz, _vp]),
    "gw_standin_stream_synchronize": (_c.c_int, [_vp]),
    "gw_standin_stream_query": (_c.c_int, [_vp, _p(_c.c_int)]),
    "gw_standin_event_record": (_c.c_int, [_vp, _p(_c.c_uint64)]),
    "gw_standin_stream_wait_event": (_c.c_int, [_vp, _vp, _c.c_uint64]),
    "gw_standin_event_synchronize": (_c.c_int, [_vp, _c.c_uint64]),
    "gw_standin_malloc": (_c.c_int, [_sz, _p(_vp)]),
    "gw_standin_free": (_c.c_int, [_vp]),
    "gw_standin_contains": (_c.c_int, [_vp, _sz, _p(_c.c_int)]),
    "gw_standin_set_current_stream": (_c.c_int, [_vp]),
    "gw_standin_current_stream": (_c.c_int, [_p(_vp)]),
    "gw_standin_live_bytes": (_c.c_int, [_p(_sz)]),
    "gw_comm_use_standin": (_c.c_int, [_vp, _c.c_int, _c.c_uint64]),
    "gw_standin_ef_state_create": (_c.c_int, [_sz, _p(_vp)]),
    "gw_comm_revoke": (_c.c_int, [_vp]),
    "gw_reduce_scatterv": (_c.c_int, [_vp, _vp, _vp, _p(_sz), _c.c_int, _c.c_int, _vp, _vp]),
    "gw_ireduce_scatterv": (_c.c_int, [_vp, _vp, _vp, _p(_sz), _c.c_int, _c.c_int, _vp, _vp, _p(_vp)]),
    "gw_reduce_scatterv_device": (_c.c_int, [_vp, _vp, _vp, _p(_sz), _c.c_int, _c.c_int, _vp, _vp, _vp]),
    "gw_ireduce_scatterv_device": (_c.c_int, [_vp, _vp, _vp, _p(_sz), _c.c_int, _c.c_int, _vp, _vp, _vp, _p(_vp)]),
    "gw_comm_shrink": (_c.c_int, [_vp, _p(_vp)]),
}

for _name, (_res, _args) in _PROTOTYPES.items():
    _f = getattr(lib, _name)
    _f.restype = _res
    _f.argtypes = _args
for _name, (_res, _args) in _OPTIONAL.items():
    if hasattr(lib, _name):
        _f = getattr(lib, _name)
        _f.restype = _res
        _f.argtypes = _args


def _codecs():
    out = []
    for i in range(lib.gw_codec_count()):
        info = CodecInfo()
        if lib.gw_codec_info(i, ctypes.byref(info)) != GW_SUCCESS:
            raise GradwireError(GW_ERR_INVALID_ARGUMENT, (lib.gw_get_last_error() or b"").decode())
        out.append({"name": info.name.decode(), "id": info.id, "caps": info.caps,
                    "keys": [k for k in info.keys.decode().split(",") if k]})
    return out


# The library's codecs (gw_codec_info), in order of id: name, id, caps (GW_CODEC_CAP_*), keys.
CODECS = _codecs()
CODEC_IDS = {c["id"]: c["name"] for c in CODECS}


def has(name):
    """Whether the loaded library exports the C function name."""
    return hasattr(lib, name)


def last_error():
    """The library's message for the last failed call on this thread."""
    msg = lib.gw_get_last_error()
    return msg.decode("utf-8", "replace") if msg else ""


def check(result):
    """Raises GradwireError carrying the library's message when result is not GW_SUCCESS.

    Call it on the thread that made the call: the library's message is thread-local."""
    if result != GW_SUCCESS:
        raise GradwireError(result, last_error())


def build_info():
    """gw_get_build_info(): the library's version, what it was built with, UCX's version and
    NCCL's when loaded ("" for libraries older than the call)."""
    if not has("gw_get_build_info"):
        return ""
    return lib.gw_get_build_info().decode("utf-8", "replace")


def version():
    """GW_VERSION_CODE of the loaded library."""
    v = ctypes.c_int()
    check(lib.gw_get_version(ctypes.byref(v)))
    return v.value


def make_config(timeout_s=None, chunk_bytes=None, dense_threshold_bytes=None):
    """A gw_config_t, or None when every field is left to the library (and its environment)."""
    if timeout_s is None and chunk_bytes is None and dense_threshold_bytes is None:
        return None
    cfg = Config()
    cfg.size = ctypes.sizeof(Config)
    cfg.magic = GW_CONFIG_MAGIC
    cfg.version = version()
    cfg.timeout_s = float(timeout_s or 0.0)
    cfg.chunk_bytes = int(chunk_bytes or 0)
    cfg.dense_threshold_bytes = -1 if dense_threshold_bytes is None else int(dense_threshold_bytes)
    return cfg
