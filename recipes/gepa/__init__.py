"""``gepa``: reflective evolution of a harness over an archive of candidates.

* :mod:`recipes.gepa.pareto` — per-task fronts and the seeded parent draw (pure);
* :mod:`recipes.gepa.method` — the component cursor and the two strict acceptances (pure);
* :mod:`recipes.gepa.archive` — the archive as a fold over committed releases (pure);
* :mod:`recipes.gepa.reflection` — the reflection request and the reading of its answer;
* :mod:`recipes.gepa.recipe` — the recipe: configuration, episodes, one step per batch.
"""
