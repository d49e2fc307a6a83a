"""Training backends: the adapters behind the recipes' ports.

The only part of Reef's trainers that imports torch, transformers, peft or slime (each
module lazily or only when used), and the only one that uses the model kit
(:mod:`reef.modelkit`):

- :mod:`trainers.backends.inprocess` — :class:`~trainers.backends.inprocess.InProcessBackend`,
  the :class:`recipes.training.TrainingBackend` the registry binds to the ``sft``,
  ``grpo`` and ``sao`` recipes; torch-free to import, it loads the modules below on first use;
- :mod:`trainers.backends.torch_backend` — full-weight SFT, GRPO, greedy decoding;
- :mod:`trainers.backends.lora` — LoRA SFT with PEFT;
- :mod:`trainers.backends.sao` — ``sao``: policy and critic from single scored rollouts
  (its tensor math in :mod:`trainers.backends.sao_math`);
- :mod:`trainers.backends.slime_source` — Reef batches as slime rollout groups, in memory;
- :mod:`trainers.backends.slime_job`, :mod:`trainers.backends.slime_run`,
  :mod:`trainers.backends.slime_rollout` — ``training.backend: slime``: slime's own
  ``train.py`` on a Reef batch (its command, the adapter that runs it, and the rollout
  function slime imports).
"""
