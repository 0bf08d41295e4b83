"""The method: the run, phase and step vocabularies (kinds), coarsening schemes and their views, the plan
of phases and the runner that executes it."""
