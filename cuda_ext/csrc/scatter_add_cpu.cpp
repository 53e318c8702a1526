// CPU kernels for gradlint::scatter_add.
//
// deterministic: every target row is summed by one thread, from zero, in ascending source row
// order (the order a serial index_add_ uses), so the bits do not depend on the thread count.
//   wide rows: a stable counting sort of the source rows by target, then one task per range of
//     targets gathers and sums its rows.
//   narrow rows: one serial pass in source order (sorting costs more than the sums).
//   Both give the same bits; which one runs depends on the row width alone.
// atomic: one relaxed atomic add per element into an explicitly zeroed output.
//
// Every path reads the index once before any write through it and stops at the first entry
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
// order[row_begin[r] .. row_begin[r + 1]).
struct RowOrder {
  std::vector<int64_t> row_begin;
  at::Tensor order_storage;
  const int64_t* order = nullptr;
};

int64_t counting_chunks(int64_t n, int64_t dim_size) {
  constexpr int64_t kMinRowsPerChunk = 1 << 15;
  const int64_t by_threads = at::in_parallel_region() ? 1 : at::get_num_threads();
  const int64_t by_work = n / kMinRowsPerChunk;
  // Each chunk owns a dim_size histogram: keep them all no bigger than the index itself.
  const int64_t by_memory = n / std::max<int64_t>(dim_size, 1);
  return std::max<int64_t>(1, std::min({by_threads, by_work, by_memory}));
}

template <typename index_t>
RowOrder stable_order_by_target(const index_t* index, int64_t stride, int64_t n, int64_t dim_size) {
  const int64_t chunks = counting_chunks(n, dim_size);
  const auto chunk_begin = [&](int64_t c) { return n * c / chunks; };
  std::vector<int64_t> slot(chunks * dim_size, 0);

  FirstOutOfRange bad;
  at::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      int64_t* count = slot.data() + c * dim_size;
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
  RowOrder result;
  result.row_begin.resize(dim_size + 1);
  int64_t next = 0;
  for (int64_t r = 0; r < dim_size; ++r) {
    result.row_begin[r] = next;
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t k = slot[c * dim_size + r];
      slot[c * dim_size + r] = next;
      next += k;
    }
  }
  result.row_begin[dim_size] = next;

  result.order_storage = at::empty({n}, at::kLong);
  int64_t* order = result.order_storage.data_ptr<int64_t>();
  at::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      int64_t* fill = slot.data() + c * dim_size;
      for (int64_t i = chunk_begin(c), end = chunk_begin(c + 1); i < end; ++i) order[fill[index[i * stride]]++] = i;
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

template <typename scalar_t>
void sum_rows_in_order(const scalar_t* src, int64_t row_stride, int64_t col_stride, int64_t d,
                       const RowOrder& ro, scalar_t* out, int64_t dim_size) {
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
            const char* ahead = reinterpret_cast<const char*>(src + ro.order[p + kRowsAhead] * row_stride);
            for (int64_t l = 0; l < lines; ++l) __builtin_prefetch(ahead + 64 * l);
          }
          const scalar_t* row = src + ro.order[p] * row_stride;
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

// Narrow rows: one serial pass in source order, checking each index before its write. Per
// target that is the sorted path's order, so the bits are the same as the sorted path's.
template <typename scalar_t, typename index_t>
void sum_rows_in_source_order(const scalar_t* src, int64_t row_stride, int64_t col_stride, int64_t d,
                              const index_t* index, int64_t index_stride, int64_t n, scalar_t* out,
                              int64_t dim_size) {
  using acc_t = at::opmath_type<scalar_t>;
  std::vector<acc_t> buffer(std::is_same_v<acc_t, scalar_t> ? 0 : dim_size * d);
  acc_t* acc;
  if constexpr (std::is_same_v<acc_t, scalar_t>) {
    acc = out;
  } else {
    acc = buffer.data();
  }
  std::fill(acc, acc + dim_size * d, acc_t(0));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t target = static_cast<int64_t>(index[i * index_stride]);
    if (out_of_range(target, dim_size)) fail_index_out_of_range(i, target, dim_size);
    acc_t* sum = acc + target * d;
    const scalar_t* row = src + i * row_stride;
    if (d == 1) {
      *sum += static_cast<acc_t>(*row);
    } else {
      for (int64_t j = 0; j < d; ++j) sum[j] += static_cast<acc_t>(row[j * col_stride]);
    }
  }
  if constexpr (!std::is_same_v<acc_t, scalar_t>) {
    for (int64_t k = 0; k < dim_size * d; ++k) out[k] = static_cast<scalar_t>(acc[k]);
  }
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
        std::atomic_ref<acc_t>(target[j]).fetch_add(static_cast<acc_t>(row[j * col_stride]),
                                                    std::memory_order_relaxed);
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
      } else if (d <= kNarrowRowMax) {
        sum_rows_in_source_order(values, row_stride, col_stride, d, idx, index_stride, n, result, dim_size);
      } else {
        const RowOrder ro = stable_order_by_target(idx, index_stride, n, dim_size);
        sum_rows_in_order(values, row_stride, col_stride, d, ro, result, dim_size);
      }
    });
  });
  return out;
}

}  // namespace
}  // namespace gradlint

TORCH_LIBRARY_IMPL(gradlint, CPU, m) { m.impl("scatter_add", &gradlint::scatter_add_cpu); }
