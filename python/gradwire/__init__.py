"""gradwire: compressed gradient all-reduce for data-parallel training (ctypes over the C ABI).

The shared library is found through $GRADWIRE_LIB, else the source tree's build/, else the
system's library path (see gradwire._lib). PyTorch is only needed for gradwire.torch.
"""
from ._lib import GradwireError, version
from ._lib import path as library_path
from .core import Codec, Communicator, ErrorFeedback, Request, decode, get_unique_id, message_info

__all__ = ["Codec", "Communicator", "ErrorFeedback", "GradwireError", "Request", "decode", "get_unique_id",
           "library_path", "message_info", "version"]
