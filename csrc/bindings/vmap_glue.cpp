#include "bindings/vmap_glue.h"

#include <ATen/functorch/DynamicLayer.h>
#include <ATen/functorch/PlumbingHelper.h>
#include <ATen/ops/stack.h>
#include <c10/util/Exception.h>

namespace op_plugin::vmap {

Level::Level(const char* op) : op_(op) {
  const auto layer = at::functorch::maybeCurrentDynamicLayer();
  TORCH_INTERNAL_ASSERT(layer.has_value() && layer->key() == at::functorch::TransformType::Vmap,
                        op, ": its batching rule ran outside vmap");
  level_ = layer->layerId();
  size_ = layer->batchSize().guard_int(__FILE__, __LINE__);
  switch (layer->randomness()) {
    case at::functorch::RandomnessType::Error: randomness_ = Randomness::kError; break;
    case at::functorch::RandomnessType::Same: randomness_ = Randomness::kSame; break;
    case at::functorch::RandomnessType::Different: randomness_ = Randomness::kDifferent; break;
  }
  TORCH_CHECK(size_ > 0, op, ": torch.vmap over a dim of size 0 is not supported");
}

Arg Level::unwrap(const at::Tensor& t) const {
  auto [value, bdim] = at::functorch::unwrapTensorAtLevel(t, level_);
  return Arg{std::move(value), bdim};
}

Arg Level::unwrap(const std::optional<at::Tensor>& t) const {
  if (!t.has_value()) return Arg{};
  return unwrap(*t);
}

bool Level::any_batched(std::initializer_list<const Arg*> args) {
  for (const Arg* a : args) {
    if (a->bdim.has_value()) return true;
  }
  return false;
}

std::optional<at::Tensor> Level::sample_optional(const Arg& a) {
  if (!a.value.has_value() || !a.bdim.has_value()) return a.value;
  return a.value->select(*a.bdim, 0);
}

bool Level::folds(const std::optional<Fold>& fold, std::initializer_list<const Arg*> args) const {
  if (!fold.has_value()) return false;
  TORCH_INTERNAL_ASSERT(fold->inputs.size() == args.size(), op_, ": a fold needs an axis per tensor argument");
  size_t i = 0;
  for (const Arg* a : args) {
    if (!fold->inputs[i++].has_value() && a->bdim.has_value()) return false;
  }
  return true;
}

bool Level::check_random(bool folds, bool batched) const {
  // torch's text (BatchRulesRandomness.cpp), so a vmapped random op fails as aten's do.
  TORCH_CHECK(randomness_ != Randomness::kError,
              "vmap: called random operation while in randomness error mode. Please either use the 'same' or "
              "'different' randomness flags on vmap or perform the randomness operation out of vmap");
  if (randomness_ == Randomness::kSame) {
    TORCH_CHECK(!batched, op_,
                ": random draws under torch.vmap(randomness='same') with a batched tensor are not supported (its "
                "backward could not replay them); use randomness='different', or draw outside vmap");
    return false;
  }
  TORCH_CHECK(folds, op_,
              ": random draws under torch.vmap need the call to fold into the op's batch, which these arguments "
              "do not allow (see the op's vmap rule in its documentation); draw outside vmap");
  return true;
}

bool Level::replays(bool folds, const Arg& of, const char* of_name) const {
  if (!of.bdim.has_value()) return false;  // its forward ran outside this vmap: replay per sample
  TORCH_CHECK(folds, op_, ": ", of_name,
              " is batched, so its forward folded its random draws into one batch, which these arguments "
              "cannot fold into (see the op's vmap rule in its documentation)");
  return true;
}

std::optional<at::Tensor> Level::fold_optional(const Arg& a, std::optional<int64_t> axis) const {
  if (!a.value.has_value()) return std::nullopt;
  const at::Tensor& t = *a.value;
  if (!axis.has_value()) {
    TORCH_INTERNAL_ASSERT(!a.bdim.has_value(), op_, ": a batched argument without an axis folded");
    return t;
  }
  const int64_t logical_dim = t.dim() - (a.bdim.has_value() ? 1 : 0);
  TORCH_CHECK(*axis >= 0 && *axis < logical_dim, op_, ": the vmap rule's axis ", *axis,
              " is out of range for an argument of ", logical_dim, " dims");
  at::Tensor moved;
  if (a.bdim.has_value()) {
    moved = *a.bdim == *axis ? t : t.movedim(*a.bdim, *axis);
  } else {
    // A shared argument: every sample's slice of the folded batch holds it.
    std::vector<int64_t> sizes(t.sizes().begin(), t.sizes().end());
    sizes.insert(sizes.begin() + *axis, size_);
    moved = t.unsqueeze(*axis).expand(sizes);
  }
  return moved.flatten(*axis, *axis + 1);
}

at::Tensor Level::unfold(const at::Tensor& out, std::optional<int64_t> axis) const {
  if (!axis.has_value()) return out;
  std::vector<int64_t> sizes(out.sizes().begin(), out.sizes().end());
  TORCH_INTERNAL_ASSERT(*axis < static_cast<int64_t>(sizes.size()) && sizes[*axis] % size_ == 0, op_,
                        ": an output's folded axis does not hold the vmapped dim");
  sizes[*axis] /= size_;
  sizes.insert(sizes.begin() + *axis, size_);
  return at::functorch::makeBatched(out.view(sizes), *axis, level_);
}

std::optional<at::Tensor> Level::select_optional(const Arg& a, int64_t i) {
  if (!a.value.has_value() || !a.bdim.has_value()) return a.value;
  return a.value->select(*a.bdim, i);
}

at::Tensor Level::stack(const std::vector<at::Tensor>& per_sample) const {
  return at::functorch::makeBatched(at::stack(per_sample, 0), 0, level_);
}

void Level::same_int(std::optional<c10::SymInt>& kept, const c10::SymInt& value, const char* name) const {
  if (!kept.has_value()) {
    kept = value;
    return;
  }
  // Symbolic values (under torch.compile) are not compared: they are the same expression.
  if (kept->is_heap_allocated() || value.is_heap_allocated()) return;
  TORCH_CHECK(kept->as_int_unchecked() == value.as_int_unchecked(), op_, ": the int output ", name,
              " differs between the samples of a vmap (", kept->as_int_unchecked(), " and ",
              value.as_int_unchecked(), "), and vmap cannot batch an int");
}

}  // namespace op_plugin::vmap
