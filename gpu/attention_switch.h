/* attention_switch.h — the compile-time head-dim dispatch of gpu/attention*.cu, in the manner of
 * flash-attention's hopper/static_switch.h: a run-time D becomes a compile-time constant.
 *
 *   ATTN_HEADDIM_SWITCH(D, [&](auto hd) {
 *       constexpr int kD = decltype(hd)::value;
 *       launch<kD>(...);
 *   });
 *
 * The lambda is called with std::integral_constant<int, D> for D ∈ {16, 32, 64, 128} (gpu/attention.h's
 * head dims); any other D fails a CHECK. The lambda is generic, so a body that takes fewer head dims
 * guards itself with `if constexpr` and the other cases instantiate nothing.
 */
#ifndef REFINE_GPU_ATTENTION_SWITCH_H
#define REFINE_GPU_ATTENTION_SWITCH_H

#include <type_traits>

#include "io/check.h"

#define ATTN_HEADDIM_CASE_(value, ...) \
    case value: return __VA_ARGS__(std::integral_constant<int, value>{});

#define ATTN_HEADDIM_SWITCH(D, ...)                                                           \
    [&] {                                                                                     \
        switch (D) {                                                                          \
            ATTN_HEADDIM_CASE_(16, __VA_ARGS__)                                               \
            ATTN_HEADDIM_CASE_(32, __VA_ARGS__)                                               \
            ATTN_HEADDIM_CASE_(64, __VA_ARGS__)                                               \
            ATTN_HEADDIM_CASE_(128, __VA_ARGS__)                                              \
        default: CHECK(0, "attention: head dim %d (expected 16, 32, 64 or 128)", (int)(D));   \
        }                                                                                     \
    }()

#endif /* REFINE_GPU_ATTENTION_SWITCH_H */
