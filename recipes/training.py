"""The training port: what the ``sft`` and ``grpo`` recipes need from a training backend.

A recipe decides *what* to train on and how a candidate is judged; the effects (loading
weights, running an optimiser, decoding) come in through a :class:`TrainingBackend`.
The recipes never import one: whoever builds a recipe injects it (the registry,
:func:`recipes.registry.build_recipe`, binds the in-process torch backend of
:mod:`trainers.backends`). The backend's options are the recipes' ``training``
sections, defined here so that a backend depends on this module alone, never on a
recipe's module.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

from pydantic import Field, model_validator

from recipes.errors import DeviceUnavailableError, RecipeError
from recipes.rendering import TrainedTurns, Trajectory
from recipes.strict import StrictModel

#: a conversation: OpenAI-style messages (``role``, ``content``)
Conversation = Sequence[Mapping[str, str]]
#: one supervised example: (conversation, target answer), or a whole tool-using
#: trajectory rendered by the model's template (:mod:`recipes.rendering`)
Example = tuple[Conversation, str] | Trajectory

#: the linear layers of a Llama-style decoder block (PEFT's module names)
LLAMA_LINEAR_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class LoraSettings(StrictModel):
    """The adapter's shape (``training.method: lora``); PEFT's LoraConfig fields."""

    r: int = Field(default=16, ge=1, description="Rank of the update matrices.")
    alpha: int = Field(
        default=32, ge=1, description="Scaling numerator (lora_alpha); scale alpha/r."
    )
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0, description="Dropout on the LoRA input.")
    target_modules: tuple[str, ...] = Field(
        default=LLAMA_LINEAR_MODULES,
        min_length=1,
        description="Names of the linear modules that get an adapter.",
    )


#: ``training.device``: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``
DEVICE_PATTERN = r"^(auto|cpu|cuda(:[0-9]+)?)$"


def resolve_device(spec: str, cuda_devices: int) -> str:
    """The torch device ``training.device`` names on a machine with ``cuda_devices`` GPUs.

    ``auto`` is ``cuda:0`` when there is a GPU, else ``cpu``; ``cuda`` is ``cuda:0``; a
    GPU the machine lacks raises :class:`DeviceUnavailableError`.
    """
    if spec == "cpu" or (spec == "auto" and cuda_devices == 0):
        return "cpu"
    if spec == "auto":
        return "cuda:0"
    kind, _, number = spec.partition(":")
    if kind != "cuda" or not (number or "0").isdigit():
        raise DeviceUnavailableError(f"training.device {spec!r}: use auto, cpu, cuda or cuda:N")
    index = int(number or 0)
    if cuda_devices == 0:
        raise DeviceUnavailableError(
            f"training.device {spec!r}: this machine has no CUDA device (use cpu or auto)"
        )
    if index >= cuda_devices:
        raise DeviceUnavailableError(
            f"training.device {spec!r}: this machine has {cuda_devices} CUDA device(s), "
            f"cuda:0 to cuda:{cuda_devices - 1}"
        )
    return f"cuda:{index}"


class DeviceSettings(StrictModel):
    """Where and how a torch backend trains (and the gate evaluates) a candidate."""

    device: str = Field(
        default="auto",
        pattern=DEVICE_PATTERN,
        description="auto (cuda:0 if there is a GPU, else cpu) | cpu | cuda | cuda:N.",
    )
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        default="auto",
        description="Compute dtype (autocast; weights stay float32): auto = bfloat16 on a "
        "GPU, float32 on the CPU.",
    )
    micro_batch_tokens: int = Field(
        default=8192,
        ge=1,
        description="Most padded tokens in one forward/backward pass; an optimiser step "
        "accumulates the gradients of all its micro-batches.",
    )
    gradient_checkpointing: bool = Field(
        default=False, description="Recompute activations in the backward pass (less memory)."
    )
    seed: int = Field(default=0, description="Seed of the training RNG.")


class SftTraining(DeviceSettings):
    backend: Literal["torch"] = Field(default="torch", description="Training backend.")
    method: Literal["full", "lora"] = Field(
        default="full", description="full: all weights; lora: a PEFT adapter over base_model."
    )
    lora: LoraSettings = Field(default_factory=LoraSettings, description="method lora: shape.")
    base_model: str = Field(
        default="tiny", description="Creation weights: built-in name or HF folder."
    )
    learning_rate: float = Field(default=3e-3, gt=0, description="AdamW learning rate.")
    steps: int = Field(default=30, ge=1, description="Optimizer steps per batch.")
    weight_decay: float = Field(default=0.0, ge=0, description="AdamW weight decay.")
    imitate_min_score: float = Field(
        default=1.0, description="Samples scoring at least this imitate their own answer."
    )
    max_length: int = Field(default=512, ge=8, description="Longest example in tokens (then cut).")
    threads: int = Field(default=1, ge=1, description="torch CPU threads while training.")
    trained_turns: TrainedTurns = Field(
        default="last",
        description="Which assistant turns of a tool-using trajectory carry the loss: last "
        "(the answer the feedback is about) or all.",
    )

    @model_validator(mode="after")
    def _lora_needs_method(self) -> SftTraining:
        if "lora" in self.model_fields_set and self.method != "lora":
            raise ValueError("training.lora is set but training.method is not 'lora'")
        return self


class SlimeSettings(StrictModel):
    """``training.backend: slime``: where slime is and what it passes to Megatron.

    slime (THUDM/slime) trains with Megatron-LM on GPUs; it is installed from its source
    checkout (the PyPI package of that name is unrelated). See
    :mod:`trainers.backends.slime_job` for the command built from these fields.
    """

    train_script: str = Field(
        min_length=1, description="slime's train.py (in the user's slime checkout)."
    )
    python: str | None = Field(
        default=None,
        description="Interpreter with slime, Megatron-LM and Ray (default: Reef's own).",
    )
    megatron_checkpoint: str = Field(
        min_length=1,
        description="base_model as a Megatron checkpoint (--ref-load; slime's converter "
        "writes it from the HF folder).",
    )
    gpus: int = Field(default=1, ge=1, description="GPUs of the training actor (one node).")
    megatron_args: tuple[str, ...] = Field(
        default=(),
        description="Model and parallelism flags passed through to Megatron as slime "
        "documents (e.g. --num-layers 28 --hidden-size 1024 ... --tensor-model-parallel-size 1).",
    )
    timeout_s: float = Field(default=7200.0, gt=0, description="Most seconds one run may take.")


class GrpoTraining(DeviceSettings):
    backend: Literal["torch", "slime"] = Field(
        default="torch",
        description="torch: in this process; slime: slime's train.py with Megatron (GPUs).",
    )
    slime: SlimeSettings | None = Field(
        default=None, description="backend slime: where slime is and its Megatron flags."
    )
    base_model: str = Field(default="tiny", description="Creation weights (built-in or folder).")
    learning_rate: float = Field(default=3e-4, gt=0, description="AdamW learning rate.")
    steps: int = Field(default=4, ge=1, description="Optimizer steps per batch.")
    clip: float = Field(default=0.2, gt=0, lt=1, description="Importance-ratio clip epsilon.")
    threads: int = Field(default=1, ge=1, description="torch CPU threads while training.")

    @model_validator(mode="after")
    def _slime_needs_its_settings(self) -> GrpoTraining:
        if (self.backend == "slime") != (self.slime is not None):
            raise ValueError("training.slime is set exactly when training.backend is 'slime'")
        return self


@dataclass(frozen=True, slots=True)
class Rollout:
    """One recorded answer, token for token, with its group-relative advantage."""

    prompt_ids: list[int]
    output_ids: list[int]
    logprobs: list[float]
    advantage: float


@runtime_checkable
class TrainingBackend(Protocol):
    """Trains candidates and decodes for evaluation (blocking; run in worker threads).

    ``parent``/``folder`` is a release folder or None for the creation release
    (``base_model``); each ``train_*`` writes the candidate into ``out_dir`` and returns
    its training metrics. Failures raise :class:`recipes.errors.TrainingError` (running
    out of device memory too: that candidate fails, the trainer goes on).
    """

    def check_device(self, device: str) -> None:
        """Raise :class:`DeviceUnavailableError` when this machine lacks ``device``
        (``training.device``); called when a recipe is bound, i.e. at start."""
        ...

    def train_sft(
        self, parent: Path | None, examples: Sequence[Example], out_dir: Path, options: SftTraining
    ) -> dict[str, float]:
        """Full-weight supervised fine-tuning of the parent on the examples."""
        ...

    def train_sft_lora(
        self, parent: Path | None, examples: Sequence[Example], out_dir: Path, options: SftTraining
    ) -> dict[str, float]:
        """A LoRA adapter over ``options.base_model`` (the parent's, continued, or fresh)."""
        ...

    def train_grpo(
        self, parent: Path | None, rollouts: Sequence[Rollout], out_dir: Path, options: GrpoTraining
    ) -> dict[str, float]:
        """Clipped policy-gradient steps on recorded rollouts."""
        ...

    def generate_greedy(
        self,
        folder: Path | None,
        conversations: Sequence[Conversation],
        *,
        base_model: str,
        max_new_tokens: int,
        threads: int = 1,
        device: str = "cpu",
        dtype: str = "auto",
    ) -> list[str]:
        """Greedy answers as the engine serves the release (an adapter merged on the base),
        decoded on ``device`` (``training.device``: the gate evaluates where it trains)."""
        ...


@runtime_checkable
class BackendBound(Protocol):
    """A recipe that trains or evaluates through a :class:`TrainingBackend`."""

    def bind_backend(self, backend: TrainingBackend) -> None: ...


class UsesBackend:
    """Mixin of a recipe that trains or evaluates through an injected backend."""

    _backend: TrainingBackend | None = None

    def bind_backend(self, backend: TrainingBackend) -> None:
        """Set the backend (the registry does this when it builds the recipe) and check
        that this machine has the recipe's ``training.device``."""
        training = getattr(getattr(self, "config", None), "training", None)
        if isinstance(training, DeviceSettings):
            backend.check_device(training.device)
        self._backend = backend

    @property
    def backend(self) -> TrainingBackend:
        if self._backend is None:
            raise RecipeError(
                f"recipe {type(self).__name__} has no training backend "
                "(build it with recipes.registry.build_recipe, or call bind_backend)"
            )
        return self._backend
