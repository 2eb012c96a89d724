"""cann_ops_transformer (CANN ops-transformer's torch extension) on the CPU: op_plugin's ops.

The names of seed 000 (``flash_attn_metadata``, ``flash_attn``, ``flash_attn_grad`` and their
``MaskMode``) and seed 003 (``block_attention_residuals``, ``block_attention_residuals_backward``),
here and under ``cann_ops_transformer.ops``. ``op_plugin.compat.install()`` makes
``import cann_ops_transformer`` give this package.
"""
from op_plugin.compat.cann_ops_transformer import ops
from op_plugin.compat.cann_ops_transformer.ops import (MaskMode, block_attention_residuals,
                                                       block_attention_residuals_backward, flash_attn,
                                                       flash_attn_grad, flash_attn_metadata)

__all__ = ["MaskMode", "block_attention_residuals", "block_attention_residuals_backward", "flash_attn",
           "flash_attn_grad", "flash_attn_metadata", "ops"]
