"""``composite``: a scenario that evolves its weights and its harness, each part gated alone.

:mod:`recipes.composite.rule` is the per-part rule (pure); :mod:`recipes.composite.recipe`
the recipe (``reef.recipe: composite``). The release layout is :mod:`reef.artifacts.parts`.
"""
