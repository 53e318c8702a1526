// One relaxed atomic add on plain memory, for the CPU op's atomic variant.
//
// std::atomic_ref is C++20, and torch builds extensions as C++17 up to 2.11 at least (the build
// failed on an H200 with torch 2.11: "'atomic_ref' is not a member of 'std'"). The GCC/Clang
// __atomic builtins work on any 4- or 8-byte type in C++17: a compare-exchange loop adds a
// float as std::atomic_ref<float>::fetch_add does (libstdc++ loops the same way).
#pragma once

namespace gradlint {

template <typename T>
inline void relaxed_atomic_add(T* target, T value) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "lock-free on 4- and 8-byte types only");
  T expected;
  __atomic_load(target, &expected, __ATOMIC_RELAXED);
  T desired = expected + value;
  // On failure `expected` is reloaded with what another thread wrote: add to that.
  while (!__atomic_compare_exchange(target, &expected, &desired, /*weak=*/true, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED)) {
    desired = expected + value;
  }
}

}  // namespace gradlint
