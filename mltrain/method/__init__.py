"""The method: what is trained, as descriptions (no torch): the run, phase and step vocabularies (kinds),
the depth methods' registry (registry) and the methods themselves, coarsening schemes, sub-paths and the
plan of phases (training/runner.py executes it).

Importing the package registers the built-in depth methods, in the order the run kinds are listed:
"""

from mltrain.method import single, multilevel, stacking, layer_drop, raptr  # noqa: F401  (registers them)
