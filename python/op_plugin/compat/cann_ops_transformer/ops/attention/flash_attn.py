"""cann_ops_transformer.ops.attention.flash_attn: the op and the MaskMode enum (seed 000 §4.3)."""
from op_plugin import MaskMode, flash_attn

__all__ = ["MaskMode", "flash_attn"]
