// The hand-written half of the generated batching rules (bindings/<op>_vmap.cpp). Each op's rule
// is plumbing in the shape of torchgen's generated vmap plumbing (VmapGeneratedPlumbing.h): unwrap
// every tensor argument at the current vmap level, call a batch rule on (value, bdim), wrap the
// results. The batch rule is one for every op: fold the vmapped dim into the op's own batch axis
// where the registry's `vmap:` says the op allows it (one call), else call the op once per sample
// and stack. Both run below the FuncTorchBatched key, so autograd and outer transforms see the
// calls the rule makes (torch.func.grad over vmap, jacrev's vmapped backward).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/SymInt.h>

namespace op_plugin::vmap {

// One tensor argument of a call at the current vmap level.
struct Arg {
  std::optional<at::Tensor> value;  // one level down; nullopt for an absent optional tensor
  std::optional<int64_t> bdim;      // its vmapped dim; nullopt when the tensor is shared by every sample
};

// A fold of the registry's `vmap:`: the axis each tensor argument's vmapped dim merges into (schema
// order; nullopt: the argument must be shared), and the axis each Tensor return's splits out of
// (nullopt: every sample has the same value).
struct Fold {
  std::vector<std::optional<int64_t>> inputs;
  std::vector<std::optional<int64_t>> outputs;
};

// What the registry says of one call, read on sample 0's arguments (bindings/<op>_vmap.cpp).
struct Plan {
  std::optional<Fold> fold;  // `vmap:` and its `when` (nullopt: one call per sample)
  bool draws = false;        // `random: {when}` holds: the call draws random numbers
  bool replays = false;      // `vmap.replays.when` holds: the call replays another's draws
};

// The vmap level an op's batching rule runs at. Only vmap_glue.cpp includes functorch's headers
// (they need functorch_compat/ on the include path): the generated rules include this one.
class Level {
 public:
  explicit Level(const char* op);

  int64_t size() const { return size_; }
  Arg unwrap(const at::Tensor& t) const;
  Arg unwrap(const std::optional<at::Tensor>& t) const;
  static bool any_batched(std::initializer_list<const Arg*> args);

  // Sample 0's argument: what the registry's fold rule reads (the per-sample shapes).
  static at::Tensor sample(const Arg& a) { return *sample_optional(a); }
  static std::optional<at::Tensor> sample_optional(const Arg& a);

  // Whether the call folds: the rule gave a fold, and every argument it gives no axis is shared.
  bool folds(const std::optional<Fold>& fold, std::initializer_list<const Arg*> args) const;
  // An op drawing random numbers (registry `random:`): vmap's randomness flag decides, as for
  // torch's random ops. "error" raises torch's own message. "same" over unbatched tensors is one
  // plain call (returns false: one draw for every sample); with a batched tensor it is refused (a
  // backward replaying the draws could not tell it from a fold). "different" needs the fold (one
  // draw for the whole folded batch, a different slice of it per sample; unbatched tensors are
  // repeated for it).
  bool check_random(bool folds, bool batched) const;
  // An op replaying another call's draws (registry `vmap.replays`): it folds exactly when the
  // forward did, which is when `of` (that forward's output) is batched here; calling per sample
  // then would read another slice of the draws, so a call that cannot fold raises.
  bool replays(bool folds, const Arg& of, const char* of_name) const;

  at::Tensor fold(const Arg& a, std::optional<int64_t> axis) const { return *fold_optional(a, axis); }
  std::optional<at::Tensor> fold_optional(const Arg& a, std::optional<int64_t> axis) const;
  at::Tensor unfold(const at::Tensor& out, std::optional<int64_t> axis) const;

  static at::Tensor select(const Arg& a, int64_t i) { return *select_optional(a, i); }
  static std::optional<at::Tensor> select_optional(const Arg& a, int64_t i);
  at::Tensor stack(const std::vector<at::Tensor>& per_sample) const;
  // An int return of a per-sample call: vmap cannot batch ints, so every sample's must agree.
  void same_int(std::optional<c10::SymInt>& kept, const c10::SymInt& value, const char* name) const;

 private:
  const char* op_;
  int64_t level_ = 0;
  int64_t size_ = 0;
  enum class Randomness { kError, kSame, kDifferent };  // vmap's randomness flag
  Randomness randomness_ = Randomness::kError;
};

}  // namespace op_plugin::vmap
