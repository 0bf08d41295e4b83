"""The method: coarsening schemes and their views, the plan of phases and the runner that executes it."""
