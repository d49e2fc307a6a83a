"""``sao``: Single-rollout Asynchronous Optimisation (one scored rollout per report).

- :mod:`recipes.sao.training` — the ``training`` section, the rollout a backend trains on
  and the port (:class:`~recipes.sao.training.SaoBackend`) that trains it;
- :mod:`recipes.sao.rollouts` — from a joined sample to a rollout (pure);
- :mod:`recipes.sao.recipe` — :class:`~recipes.sao.recipe.SAORecipe`, the recipe itself
  (``reef.recipe: sao`` or ``recipes.sao.recipe:SAORecipe``).

Nothing here imports torch: the tensor math is :mod:`trainers.backends.sao_math`.
"""
