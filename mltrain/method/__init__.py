"""The method: the run, phase and step vocabularies (kinds), coarsening schemes and the plan of phases
(training/runner.py executes it)."""
