#pragma once
// GPU test helpers: skip with the reason where there is no GPU.

#include <gtest/gtest.h>

#include "freezeframe/core/device.h"

/// First statement of every GPU test: skips (never fails, never passes) without a GPU.
#define FF_REQUIRE_GPU()                                                   \
  do {                                                                     \
    if (!::freezeframe::has_gpu()) {                                       \
      GTEST_SKIP() << "needs a CUDA GPU: " << ::freezeframe::gpu_status(); \
    }                                                                      \
  } while (0)
