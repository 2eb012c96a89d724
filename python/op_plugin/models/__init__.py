"""End-to-end models on op_plugin's ops (issue 8): a Block-AttnRes transformer and its plain
PyTorch reference, a tiny byte-level corpus, and the training behind ``op-plugin demo train``."""
from op_plugin.models.block_attnres_transformer import BlockAttnResTransformer, ModelConfig, lm_loss
from op_plugin.models.reference import ReferenceBlockAttnResTransformer

__all__ = ["BlockAttnResTransformer", "ModelConfig", "ReferenceBlockAttnResTransformer", "lm_loss"]
