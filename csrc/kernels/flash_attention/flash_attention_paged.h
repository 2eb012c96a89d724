// flash_attn's paged KV cache (layout_kv PA_BBND / PA_BNBD with block_table), torch-free.
//
// Key j of sequence b lives in block block_table[b][j / block_size], row j % block_size, of the
// cache ([num_blocks, block_size, N2, D] or [num_blocks, N2, block_size, D]). Stage 1 validates
// the blocks a call reads. A plan for few query rows (decode) has the row kernels read the cache
// in place through the table (read_paged_in_place); any other plan packs the sequences' used
// rows like a TND tensor (kv_start[b] = the rows before b), and stage 2 gathers them head-major
// ([N2][T][D], T = the sum of seqused_kv) into the workspace, where the engine reads them as any
// TND k / v: the tiles and AMX dataflows serve paged calls unchanged, for one copy of the keys
// and values, small beside the work of 16 or more query rows (docs/decisions.md, "The paged KV
// cache").
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/flash_attention/flash_attention_entry.h"
#include "op_plugin/op_api.h"
#include "op_plugin/parallel.h"

namespace op_plugin {
namespace flash {

inline bool is_paged_layout(const char* s) {
  return std::strcmp(s, "PA_BBND") == 0 || std::strcmp(s, "PA_BNBD") == 0;
}

// One cache ([num_blocks, block_size, N2, D] for PA_BBND, [num_blocks, N2, block_size, D] for
// PA_BNBD): its base and strides, in elements.
struct PagedCache {
  const char* data = nullptr;
  int64_t blocks = 0, block_size = 0, heads = 0, dim = 0;
  int64_t block_stride = 0, row_stride = 0, head_stride = 0;
};

inline PagedCache paged_cache(const opTensor& t, bool bbnd) {
  PagedCache c;
  c.data = static_cast<const char*>(t.data);
  c.blocks = t.shape[0];
  c.block_size = bbnd ? t.shape[1] : t.shape[2];
  c.heads = bbnd ? t.shape[2] : t.shape[1];
  c.dim = t.shape[3];
  c.block_stride = t.strides[0];
  c.row_stride = bbnd ? t.strides[1] : t.strides[2];
  c.head_stride = bbnd ? t.strides[2] : t.strides[1];
  return c;
}

// A paged call's caches, the block of every (sequence, block index) it reads, and the sizes of
// the packed copies stage 2 makes when the plan does not read the caches in place.
struct PagedKv {
  PagedCache k, v;
  int64_t blocks_per_seq = 0;     // block_table's second dimension
  std::vector<int64_t> table;     // [B][blocks_per_seq] block ids
  int64_t rows = 0;               // T: the packed rows of every sequence
  uint64_t k_bytes = 0, v_bytes = 0;
  size_t elem = 0;                // bytes of one element of k / v
};

// The kv sizes the sequence tables start from: B batches of blocks_per_seq * block_size rows
// (seqused_kv then shortens each; the registry requires it with a block_table).
inline Dims paged_kv_dims(const opTensor& cache, bool bbnd, const opTensor& block_table, int64_t batch) {
  const PagedCache c = paged_cache(cache, bbnd);
  Dims d{};
  d.batch = batch;
  d.rows = block_table.shape[1] * c.block_size;
  d.heads = c.heads;
  d.dim = c.dim;
  return d;
}

// Stage 1: validates the block ids the sequences read (the registry checked the table's shape),
// packs the sequences' used rows (kv_start, rows_kv = seqlen_kv) and sizes the copies.
inline opStatus plan_paged(const opTensor& k, const opTensor& v, bool bbnd, const opTensor& block_table,
                           opDataType dt, Sequences* seq, PagedKv* pk) {
  pk->k = paged_cache(k, bbnd);
  pk->v = paged_cache(v, bbnd);
  pk->elem = dtype_size(dt);
  const int64_t B = block_table.shape[0], M = block_table.shape[1];
  pk->blocks_per_seq = M;
  pk->table.assign(static_cast<size_t>(B * M), 0);
  const int64_t bs = pk->k.block_size;
  int64_t rows = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t used = seq->seqlen_kv[b];
    for (int64_t i = 0; i * bs < used; ++i) {
      const int64_t at = b * block_table.strides[0] + i * block_table.strides[1];
      const int64_t id = block_table.dtype == OP_DT_INT32 ? static_cast<const int32_t*>(block_table.data)[at]
                                                          : static_cast<const int64_t*>(block_table.data)[at];
      if (id < 0 || id >= pk->k.blocks)
        return fail(OP_ERR_PARAM_INVALID, "block_table[", b, "][", i, "] = ", id, " must be within [0, num_blocks = ",
                    pk->k.blocks, ") (it holds keys ", i * bs, " to ", i * bs + bs - 1, " of sequence ", b,
                    ", whose seqused_kv is ", used, ")");
      pk->table[b * M + i] = id;
    }
    seq->kv_start[b] = rows;
    seq->rows_kv[b] = used;
    rows += used;
  }
  pk->rows = rows;
  pk->k_bytes = static_cast<uint64_t>(rows * pk->k.heads * pk->k.dim) * pk->elem;
  pk->v_bytes = static_cast<uint64_t>(rows * pk->v.heads * pk->v.dim) * pk->elem;
  return OP_SUCCESS;
}

// The row kernels (a plan for few query rows: decode) read the cache in place, through the
// table (FlashAttnFwdParams::kv_table): the params' k / v become the caches, and the sequences
// start at their own key 0.
inline void read_paged_in_place(const PagedKv& pk, Sequences* seq, FlashAttnFwdParams* p) {
  p->k = pk.k.data;
  p->v = pk.v.data;
  p->kv_table = pk.table.data();
  p->kv_table_width = pk.blocks_per_seq;
  p->kv_block_size = pk.k.block_size;
  p->k_block_stride = pk.k.block_stride;
  p->v_block_stride = pk.v.block_stride;
  p->k_batch_stride = p->v_batch_stride = 0;
  p->k_row_stride = pk.k.row_stride;
  p->v_row_stride = pk.v.row_stride;
  p->k_head_stride = pk.k.head_stride;
  p->v_head_stride = pk.v.head_stride;
  std::fill(seq->kv_start.begin(), seq->kv_start.end(), 0);  // p->kv_start points here
}

// The packed copy of one cache as the engine reads a TND operand: [N2][T][dim].
inline Dims packed_kv_dims(const PagedKv& pk, const PagedCache& c) {
  return {0, pk.rows, c.heads, c.dim, 0, c.dim, pk.rows * c.dim};
}

// Stage 2: copies the used rows of both caches into k_dst / v_dst ([N2][T][dim] each), in
// parallel over (sequence, head, chunk of rows).
inline void gather_paged(const PagedKv& pk, const Sequences& seq, void* k_dst, void* v_dst) {
  constexpr int64_t kRowChunk = 256;
  const int64_t B = static_cast<int64_t>(seq.seqlen_kv.size()), heads = pk.k.heads;
  const int64_t chunks = (seq.max_kv + kRowChunk - 1) / kRowChunk;
  const int64_t bs = pk.k.block_size;
  op_plugin::parallel_for(0, B * heads * chunks, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t it = i0; it < i1; ++it) {
      const int64_t c = it % chunks, h = (it / chunks) % heads, b = it / chunks / heads;
      const int64_t r1 = std::min(seq.seqlen_kv[b], (c + 1) * kRowChunk);
      for (int64_t r = c * kRowChunk; r < r1; ++r) {
        const int64_t block = pk.table[b * pk.blocks_per_seq + r / bs], row = r % bs;
        const int64_t dst_row = h * pk.rows + seq.kv_start[b] + r;
        const struct { const PagedCache* cache; void* dst; } parts[2] = {{&pk.k, k_dst}, {&pk.v, v_dst}};
        for (const auto& part : parts) {
          const PagedCache& cc = *part.cache;
          const int64_t src = block * cc.block_stride + row * cc.row_stride + h * cc.head_stride;
          std::memcpy(static_cast<char*>(part.dst) + static_cast<size_t>(dst_row * cc.dim) * pk.elem,
                      cc.data + static_cast<size_t>(src) * pk.elem, static_cast<size_t>(cc.dim) * pk.elem);
        }
      }
    }
  });
}

}  // namespace flash
}  // namespace op_plugin
