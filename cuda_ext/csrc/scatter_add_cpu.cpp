// CPU kernels for gradlint::scatter_add.
//
// deterministic: every target row is summed by one thread, from zero, in ascending source row
// order (the order a serial index_add_ uses), so the bits do not depend on the thread count.
//   source order: one serial pass over the source rows, adding each into its target.
//   sorted: a stable counting sort of the source rows by target, then one task per range of
//     targets gathers and sums its rows.
//   Both give the same bits; which one runs depends on the row width and the thread count.
// atomic: one relaxed atomic add per element into an explicitly zeroed output.
//
// Every path checks an index entry before any write through it and stops at the first entry
// outside [0, dim_size): a bad index raises, it never writes outside `out`.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <type_traits>
#include <vector>

#include "relaxed_add.h"
#include "scatter_add_checks.h"

namespace gradlint {
namespace {

// Rows up to this wide are summed in one serial pass: sorting costs more than the sums it
// orders. Measured on 1e6 rows x D into 1e5 targets, float32, torch 2.13 CPU, 1 thread: sort path
// 12.5 / 19.0 / 23.3 / 26.5 ms at D = 1 / 2 / 4 / 8 against 2.8 / 4.5 / 5.3 / 7.8 ms serial;
// at D = 16 both took 27 ms. A parallel two-pass split by target range (each thread lists the
// rows of each range, then sums one range) was slower than serial at D = 1 on 2 threads
// (8.8-13.6 ms against 2.8 ms), so narrow rows stay serial.
constexpr int64_t kNarrowRowMax = 8;

// Up to this many threads, wide rows take the serial pass too. It streams the source once, in
// order; the sorted path reads whole source rows at random, grouped by target, to split the
// targets over threads. Serial against sorted, float32, medians, torch 2.13 on a 2-core AMD EPYC VM:
//   1e6 x 64 into 1e5 targets: 1 thread 32 / 53 ms, 2 threads 30-37 / 56 ms
//   1e6 x 16 into 1e5 targets: 1 thread 8 / 27 ms, 2 threads 9 / 33 ms
//   1e6 x 64 into 1e6 targets: 1 thread 180 / 227 ms, 2 threads 161-191 / 272-289 ms
// The sorted path hardly gains from a second thread: its random row reads are bound by DRAM,
// which one core nearly saturates here (reading 256 MB in order: 13.4 ms on 1 thread, 16 ms on
// 2). Splitting the serial pass was slower still: by target range, each thread streams the whole
// source (48-55 ms on 2 threads for the first case); by column block, the hardware prefetcher
// fetches whole rows for both threads (41 ms). Past 2 threads the sorted path's parallel gather
// is left to win; this 2-core machine cannot measure where it does.
constexpr int64_t kSourceOrderMaxThreads = 2;

bool sums_in_source_order(int64_t d) {
  const int64_t threads = at::in_parallel_region() ? 1 : at::get_num_threads();
  return d <= kNarrowRowMax || threads <= kSourceOrderMaxThreads;
}

inline bool out_of_range(int64_t value, int64_t dim_size) {
  return static_cast<uint64_t>(value) >= static_cast<uint64_t>(dim_size);
}

// The lowest out-of-range position any chunk saw. Each chunk stops at its own first, so the
// minimum is the global first and the error names the same entry at any thread count.
class FirstOutOfRange {
 public:
  void saw(int64_t position) {
    int64_t seen = first_.load();
    while (position < seen && !first_.compare_exchange_weak(seen, position)) {
    }
  }
  template <typename index_t>
  void raise_if_any(const index_t* index, int64_t stride, int64_t dim_size) const {
    const int64_t position = first_.load();
    if (position != kNone) fail_index_out_of_range(position, static_cast<int64_t>(index[position * stride]), dim_size);
  }

 private:
  static constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  std::atomic<int64_t> first_{kNone};
};

// Source rows grouped by target, ascending inside each group: the rows of target r are
// order[row_begin[r] .. row_begin[r + 1]). Row numbers are int32 whenever n allows: that halves
// the scratch (4 MB, not 8, for 1e6 rows) and the histograms; the time is the gather's, and did
// not change measurably (1e6 x 64 float32 into 1e5 targets, 2 threads: 50-53 ms either way).
template <typename pos_t>
struct RowOrder {
  std::vector<int64_t> row_begin;
  at::Tensor order_storage;
  const pos_t* order = nullptr;
};

int64_t counting_chunks(int64_t n, int64_t dim_size) {
  constexpr int64_t kMinRowsPerChunk = 1 << 15;
  const int64_t by_threads = at::in_parallel_region() ? 1 : at::get_num_threads();
  const int64_t by_work = n / kMinRowsPerChunk;
  // Each chunk owns a dim_size histogram: keep them all no bigger than the index itself.
  const int64_t by_memory = n / std::max<int64_t>(dim_size, 1);
  return std::max<int64_t>(1, std::min({by_threads, by_work, by_memory}));
}

template <typename pos_t, typename index_t>
RowOrder<pos_t> stable_order_by_target(const index_t* index, int64_t stride, int64_t n, int64_t dim_size) {
  const int64_t chunks = counting_chunks(n, dim_size);
  const auto chunk_begin = [&](int64_t c) { return n * c / chunks; };
  std::vector<pos_t> slot(chunks * dim_size, 0);

  FirstOutOfRange bad;
  at::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      pos_t* count = slot.data() + c * dim_size;
      for (int64_t i = chunk_begin(c), end = chunk_begin(c + 1); i < end; ++i) {
        const int64_t target = static_cast<int64_t>(index[i * stride]);
        if (out_of_range(target, dim_size)) {
          bad.saw(i);
          break;
        }
        ++count[target];
      }
    }
  });
  bad.raise_if_any(index, stride, dim_size);

  // Per-chunk counts become each chunk's first slot in each target: chunk c writes after
  // chunks < c, which is what makes the sort stable for any chunk count.
  RowOrder<pos_t> result;
  result.row_begin.resize(dim_size + 1);
  int64_t next = 0;
  for (int64_t r = 0; r < dim_size; ++r) {
    result.row_begin[r] = next;
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t k = slot[c * dim_size + r];
      slot[c * dim_size + r] = static_cast<pos_t>(next);
      next += k;
    }
  }
  result.row_begin[dim_size] = next;

  result.order_storage = at::empty({n}, c10::CppTypeToScalarType<pos_t>::value);
  pos_t* order = result.order_storage.template data_ptr<pos_t>();
  at::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      pos_t* fill = slot.data() + c * dim_size;
      for (int64_t i = chunk_begin(c), end = chunk_begin(c + 1); i < end; ++i) {
        order[fill[index[i * stride]]++] = static_cast<pos_t>(i);
      }
    }
  });
  result.order = order;
  return result;
}

// Task boundaries over targets with about equal work (source rows read + targets written) per
// task, so a skewed index does not leave one thread with most of the rows.
std::vector<int64_t> balanced_target_ranges(const std::vector<int64_t>& row_begin, int64_t tasks) {
  const int64_t rows = static_cast<int64_t>(row_begin.size()) - 1;
  const int64_t total = row_begin[rows] + rows;
  std::vector<int64_t> bounds{0};
  int64_t r = 0;
  for (int64_t t = 1; t < tasks; ++t) {
    const int64_t target = total * t / tasks;
    while (r < rows && row_begin[r] + r < target) ++r;  // work of targets [0, r) reaches `target`
    if (r > bounds.back()) bounds.push_back(r);
  }
  if (rows > bounds.back()) bounds.push_back(rows);
  return bounds;
}

template <typename scalar_t, typename pos_t>
void sum_rows_in_order(const scalar_t* src, int64_t row_stride, int64_t col_stride, int64_t d,
                       const RowOrder<pos_t>& ro, scalar_t* out, int64_t dim_size) {
  using acc_t = at::opmath_type<scalar_t>;
  // The gather reads whole source rows at random: fetch a few rows ahead, every cache line of
  // them when the row is contiguous (a [*, 64] float32 row is 4 lines).
  constexpr int64_t kRowsAhead = 8;
  const int64_t n = ro.row_begin[dim_size];
  const int64_t lines = col_stride == 1 ? std::min<int64_t>((d * sizeof(scalar_t) + 63) / 64, 8) : 1;

  const auto bounds = balanced_target_ranges(ro.row_begin, 4 * at::get_num_threads());
  const int64_t tasks = static_cast<int64_t>(bounds.size()) - 1;
  at::parallel_for(0, tasks, 1, [&](int64_t t0, int64_t t1) {
    std::vector<acc_t> buffer(std::is_same_v<acc_t, scalar_t> ? 0 : d);
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t r = bounds[t]; r < bounds[t + 1]; ++r) {
        acc_t* acc;
        if constexpr (std::is_same_v<acc_t, scalar_t>) {
          acc = out + r * d;
        } else {
          acc = buffer.data();
        }
        std::fill(acc, acc + d, acc_t(0));
        for (int64_t p = ro.row_begin[r], end = ro.row_begin[r + 1]; p < end; ++p) {
          if (p + kRowsAhead < n) {
            const int64_t row_ahead = static_cast<int64_t>(ro.order[p + kRowsAhead]);
            const char* ahead = reinterpret_cast<const char*>(src + row_ahead * row_stride);
            for (int64_t l = 0; l < lines; ++l) __builtin_prefetch(ahead + 64 * l);
          }
          const scalar_t* row = src + static_cast<int64_t>(ro.order[p]) * row_stride;
          if (col_stride == 1) {
            for (int64_t j = 0; j < d; ++j) acc[j] += static_cast<acc_t>(row[j]);
          } else {
            for (int64_t j = 0; j < d; ++j) acc[j] += static_cast<acc_t>(row[j * col_stride]);
          }
        }
        if constexpr (!std::is_same_v<acc_t, scalar_t>) {
          for (int64_t j = 0; j < d; ++j) out[r * d + j] = static_cast<scalar_t>(acc[j]);
        }
      }
    }
  });
}

// One serial pass in source order, checking each index before its write. Per target that is the
// sorted path's order, so the bits are the same as the sorted path's.
template <typename scalar_t, typename index_t>
C10_ALWAYS_INLINE void add_rows_in_source_order(const scalar_t* src, int64_t row_stride, int64_t col_stride,
                                                int64_t d, const index_t* index, int64_t index_stride, int64_t n,
                                                at::opmath_type<scalar_t>* acc, int64_t dim_size) {
  using acc_t = at::opmath_type<scalar_t>;
  const auto target_of = [&](int64_t i) {
    const int64_t target = static_cast<int64_t>(index[i * index_stride]);
    if (C10_UNLIKELY(out_of_range(target, dim_size))) fail_index_out_of_range(i, target, dim_size);
    return target;
  };
  // The sums land at random in the output, which is out of L1 (and of L2 past ~1 MB): start
  // fetching a target row's first line this many source rows before it is summed (the source
  // streams in order, which the hardware prefetcher follows on its own). 1e6 x 64 float32 into
  // 1e5 targets: 36.5 ms without, 30.1 ms with (29.6 ms fetching the whole row: no better); D = 1:
  // 1.5 against 1.3 ms. That index is not checked yet, so the address is formed as an integer: a
  // prefetch of a wild address does nothing.
  const auto prefetch_target_of = [&](int64_t i) {
    const uintptr_t row = reinterpret_cast<uintptr_t>(acc) +
                          static_cast<uintptr_t>(index[i * index_stride]) * static_cast<uintptr_t>(d) * sizeof(acc_t);
    __builtin_prefetch(reinterpret_cast<const void*>(row), 1);
  };

  if (d == 1) {
    constexpr int64_t kAhead = 32;
    int64_t i = 0;
    for (; i + kAhead < n; ++i) {
      prefetch_target_of(i + kAhead);
      acc[target_of(i)] += static_cast<acc_t>(src[i * row_stride]);
    }
    for (; i < n; ++i) acc[target_of(i)] += static_cast<acc_t>(src[i * row_stride]);
  } else if (col_stride == 1) {
    constexpr int64_t kAhead = 16;
    for (int64_t i = 0; i < n; ++i) {
      if (i + kAhead < n) prefetch_target_of(i + kAhead);
      acc_t* __restrict sum = acc + target_of(i) * d;
      const scalar_t* __restrict row = src + i * row_stride;
      for (int64_t j = 0; j < d; ++j) sum[j] += static_cast<acc_t>(row[j]);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      acc_t* sum = acc + target_of(i) * d;
      const scalar_t* row = src + i * row_stride;
      for (int64_t j = 0; j < d; ++j) sum[j] += static_cast<acc_t>(row[j * col_stride]);
    }
  }
}

template <typename scalar_t, typename index_t>
void add_rows_in_source_order_baseline(const scalar_t* src, int64_t row_stride, int64_t col_stride, int64_t d,
                                       const index_t* index, int64_t index_stride, int64_t n,
                                       at::opmath_type<scalar_t>* acc, int64_t dim_size) {
  add_rows_in_source_order(src, row_stride, col_stride, d, index, index_stride, n, acc, dim_size);
}

// The same pass compiled for AVX2, picked at run time: the library is built for baseline x86-64
// (SSE2, 4 floats per add) so that one cached binary runs on any x86-64 CPU, and 8 floats per add
// took 1e6 x 64 float32 into 1e5 targets from 42.0 to 36.3 ms (uniform) and 31.1 to 29.0 ms
// (skewed), medians of 25 on 2 cores. Each element still gets the same IEEE adds in the same
// order, so the bits do not depend on the CPU either.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define GRADLINT_AVX2_CLONE 1
template <typename scalar_t, typename index_t>
__attribute__((target("avx2"))) void add_rows_in_source_order_avx2(
    const scalar_t* src, int64_t row_stride, int64_t col_stride, int64_t d, const index_t* index,
    int64_t index_stride, int64_t n, at::opmath_type<scalar_t>* acc, int64_t dim_size) {
  add_rows_in_source_order(src, row_stride, col_stride, d, index, index_stride, n, acc, dim_size);
}

bool cpu_has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}
#endif

template <typename scalar_t, typename index_t>
void sum_rows_in_source_order(const scalar_t* src, int64_t row_stride, int64_t col_stride, int64_t d,
                              const index_t* index, int64_t index_stride, int64_t n, at::Tensor& out,
                              int64_t dim_size) {
  using acc_t = at::opmath_type<scalar_t>;
  // Half types sum into a float32 buffer, converted once at the end.
  at::Tensor acc_tensor = std::is_same_v<acc_t, scalar_t>
                              ? out.zero_()
                              : at::zeros(out.sizes(), out.options().dtype(c10::CppTypeToScalarType<acc_t>::value));
  acc_t* const acc = acc_tensor.data_ptr<acc_t>();
#ifdef GRADLINT_AVX2_CLONE
  if (cpu_has_avx2()) {
    add_rows_in_source_order_avx2(src, row_stride, col_stride, d, index, index_stride, n, acc, dim_size);
  } else {
    add_rows_in_source_order_baseline(src, row_stride, col_stride, d, index, index_stride, n, acc, dim_size);
  }
#else
  add_rows_in_source_order_baseline(src, row_stride, col_stride, d, index, index_stride, n, acc, dim_size);
#endif
  if constexpr (!std::is_same_v<acc_t, scalar_t>) out.copy_(acc_tensor);
}

template <typename scalar_t, typename index_t>
void add_atomically(const scalar_t* src, int64_t row_stride, int64_t col_stride, int64_t d,
                    const index_t* index, int64_t index_stride, int64_t n, at::Tensor& out, int64_t dim_size) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t grain = std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(d, 1));
  FirstOutOfRange bad;
  at::parallel_for(0, n, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      if (out_of_range(static_cast<int64_t>(index[i * index_stride]), dim_size)) {
        bad.saw(i);
        return;
      }
    }
  });
  bad.raise_if_any(index, index_stride, dim_size);

  // Half types accumulate in a float32 buffer; the output is converted once at the end.
  at::Tensor acc_tensor = std::is_same_v<acc_t, scalar_t>
                              ? out.zero_()
                              : at::zeros(out.sizes(), out.options().dtype(c10::CppTypeToScalarType<acc_t>::value));
  acc_t* acc = acc_tensor.data_ptr<acc_t>();
  at::parallel_for(0, n, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      acc_t* target = acc + static_cast<int64_t>(index[i * index_stride]) * d;
      const scalar_t* row = src + i * row_stride;
      for (int64_t j = 0; j < d; ++j) {
        gradlint::relaxed_atomic_add(target + j, static_cast<acc_t>(row[j * col_stride]));
      }
    }
  });
  if (!std::is_same_v<acc_t, scalar_t>) out.copy_(acc_tensor);
}

at::Tensor scatter_add_cpu(const at::Tensor& src, const at::Tensor& index, int64_t dim_size,
                           bool deterministic, bool check_index) {
  check_scatter_add_args(src, index, dim_size);
  // check_index is a CUDA knob (it costs a device sync there). On CPU the range check is always
  // on: it is the only thing between a bad index and a write outside `out`.
  (void)check_index;
  const int64_t n = src.size(0);
  const int64_t d = src.dim() == 2 ? src.size(1) : 1;
  const int64_t row_stride = src.stride(0);
  const int64_t col_stride = src.dim() == 2 ? src.stride(1) : 1;
  at::Tensor out = at::empty(scatter_add_out_shape(src, dim_size), src.options());

  AT_DISPATCH_INDEX_TYPES(index.scalar_type(), "gradlint_scatter_add_cpu", [&] {
    const index_t* idx = index.const_data_ptr<index_t>();
    const int64_t index_stride = index.stride(0);
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, src.scalar_type(), "gradlint_scatter_add_cpu", [&] {
      const scalar_t* values = src.const_data_ptr<scalar_t>();
      scalar_t* result = out.data_ptr<scalar_t>();
      if (!deterministic) {
        add_atomically(values, row_stride, col_stride, d, idx, index_stride, n, out, dim_size);
      } else if (sums_in_source_order(d)) {
        sum_rows_in_source_order(values, row_stride, col_stride, d, idx, index_stride, n, out, dim_size);
      } else {
        if (n <= std::numeric_limits<int32_t>::max()) {
          const auto ro = stable_order_by_target<int32_t>(idx, index_stride, n, dim_size);
          sum_rows_in_order(values, row_stride, col_stride, d, ro, result, dim_size);
        } else {
          const auto ro = stable_order_by_target<int64_t>(idx, index_stride, n, dim_size);
          sum_rows_in_order(values, row_stride, col_stride, d, ro, result, dim_size);
        }
      }
    });
  });
  return out;
}

}  // namespace
}  // namespace gradlint

TORCH_LIBRARY_IMPL(gradlint, CPU, m) { m.impl("scatter_add", &gradlint::scatter_add_cpu); }
