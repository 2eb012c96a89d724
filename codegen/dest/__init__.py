"""One emitter per generated artifact; each renders one template of templates/."""
from codegen.dest import autocast, autograd, bindings, fakes, kernel_checks, kernel_headers, sharding, vmap, wrappers

EMITTERS = (kernel_headers.emit, kernel_checks.emit, bindings.emit, fakes.emit, autograd.emit, vmap.emit, autocast.emit,
            sharding.emit, wrappers.emit)
