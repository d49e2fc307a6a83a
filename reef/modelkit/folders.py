"""What makes a model folder a chat model Reef can serve and train.

Checked when the engine (``reef engine --model <folder>``) or a trainer
(``training.base_model``) loads a folder, so a folder that cannot work fails at once and
by name, not with a shape error deep in a forward pass or a reply in the wrong format:

- the tokenizer carries a **chat template** (``chat_template`` in
  ``tokenizer_config.json``, or ``chat_template.jinja``): the engine renders every chat
  request with it, and a trainer builds the same prompt ids from it;
- the tokenizer **fits the weights**: each of its token ids (``len(tokenizer)``, added
  tokens included) has a row in the input embeddings; a model may have more rows than
  the tokenizer has tokens (vocabularies padded to a multiple of 64 are common);
- it has an **eos token**: where the engine stops and what ends a trained answer.

Torch-free: it reads the loaded objects' attributes only.
"""

from __future__ import annotations

from typing import Any

from reef.modelkit.errors import ModelFolderError


def embedding_rows(model: Any) -> int:
    """Rows of the model's input embeddings (its vocabulary size)."""
    return int(model.get_input_embeddings().weight.shape[0])


def check_model_pair(model: Any, tokenizer: Any, where: str) -> None:
    """Raise :class:`ModelFolderError` (naming ``where``) unless ``tokenizer`` has a chat
    template and an eos token and fits ``model``'s embeddings."""
    if not getattr(tokenizer, "chat_template", None):
        raise ModelFolderError(
            f"model folder {where} has no chat template (tokenizer_config.json "
            "'chat_template' or chat_template.jinja): Reef renders chat requests and "
            "training examples with it"
        )
    if tokenizer.eos_token_id is None:
        raise ModelFolderError(f"the tokenizer of model folder {where} has no eos token")
    tokens, rows = len(tokenizer), embedding_rows(model)
    if tokens > rows:
        raise ModelFolderError(
            f"the tokenizer of model folder {where} has {tokens} tokens but the model's "
            f"embeddings have {rows} rows: the tokenizer does not belong to these weights"
        )
