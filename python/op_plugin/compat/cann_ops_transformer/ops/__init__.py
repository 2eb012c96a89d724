"""cann_ops_transformer.ops: ``from cann_ops_transformer.ops import flash_attn_grad`` (seed 000 §3.3).

Aliases of op_plugin's wrappers, which take mask_mode as a MaskMode member, its int value or its
name in any case, as the extension does. seed 003's ``block_attention_residuals_backward`` is
op_plugin's ``block_attention_residuals_grad`` (the same arguments, ``valid_block_num``
keyword-only). ``ops.attention.<op>`` holds MaskMode where seed 000 says the extension defines it.
"""
from op_plugin import MaskMode, block_attention_residuals, flash_attn, flash_attn_grad, flash_attn_metadata
from op_plugin import block_attention_residuals_grad as block_attention_residuals_backward
from op_plugin.compat.cann_ops_transformer.ops import attention

__all__ = ["MaskMode", "attention", "block_attention_residuals", "block_attention_residuals_backward", "flash_attn",
           "flash_attn_grad", "flash_attn_metadata"]
