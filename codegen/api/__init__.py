"""Pure translations of the model into one target each: ``cpp`` (binding and kernel C API),
``python`` (fakes, wrappers, stubs)."""
