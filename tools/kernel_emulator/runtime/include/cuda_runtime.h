// The emulator's stand-in for the CUDA runtime; see cuda_runtime_api.h.
#pragma once
#include "cuda_runtime_api.h"
