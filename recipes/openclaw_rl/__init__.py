"""``openclaw_rl``: learning from judged turns (computed feedback), no report needed.

- :mod:`recipes.openclaw_rl.training` — the ``training`` section, the judged turn a
  backend trains on and the port (:class:`~recipes.openclaw_rl.training.OpenClawBackend`);
- :mod:`recipes.openclaw_rl.turns` — from a joined sample to a judged turn (pure);
- :mod:`recipes.openclaw_rl.recipe` — :class:`~recipes.openclaw_rl.recipe.OpenClawRLRecipe`
  (``reef.recipe: openclaw_rl``).

Nothing here imports torch: the tensor math is :mod:`trainers.backends.openclaw_rl_math`.
"""
