"""op_plugin's generator: op_plugin_functions.yaml -> bindings, fakes, autograd, wrappers, docs.

Layers, as in torchgen: ``model`` (frozen dataclasses parsed from the registry), ``api``
(pure translations of the model into one target language each), ``dest`` (one emitter per
generated artifact, rendering a Jinja template of ``templates/``).
"""
