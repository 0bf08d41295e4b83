"""The run-time objects of the depth methods that need more than the fine model: each such method's build
hook (method/registry.py `DepthMethod.build`, named by its `parts`) makes its `Parts` (training/parts.py)
here. multilevel.py: the hierarchy of coarse models, the coarse batch stream, the diagnostics and the
restrict, diagnose and prolong phases of multilevel training and its schedule control.

A layer above training (tests/test_layers.py): it uses the runner's registry of phase handlers and the
trainer; the training layer imports nothing of it.
"""
