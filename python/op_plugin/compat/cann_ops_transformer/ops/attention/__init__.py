"""cann_ops_transformer.ops.attention: one module per attention op, each with its MaskMode."""
