/* Compiles the AOT header as C (the launch API is callable from C). */
#include "causal.h"

int (*const flashc_example_launch)(void *, flashc_tensor, flashc_tensor, flashc_tensor,
                                   flashc_tensor, uint64_t, int64_t, int64_t, int64_t,
                                   int64_t, int64_t) = flashc_causal_launch;
