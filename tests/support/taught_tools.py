"""The tiny model taught one tool call, shared by the tests that serve it (taught once
per test process: the teaching is the slow part).

With the weather tool offered it calls ``get_weather(city="paris")``; given the tool's
result it says ``it is sunny.``; offered no tools it says ``i cannot look.``; asked about
two cities it calls the tool twice in one answer. Every dialect renders the same
conversation to the same prompt, so one taught model serves all three.
"""

from __future__ import annotations

import functools
from typing import Any

from reef.engine.model import EngineModel

QUESTION = "weather in paris?"
CALL_TEXT = '[get_weather(city="paris")]'
TWO_CITIES = "weather in paris and rome?"
TWO_CALLS = '[get_weather(city="paris"), get_weather(city="rome")]'
SUNNY = "it is sunny."
NO_TOOLS = "i cannot look."
DESCRIPTION = "the weather in a city"
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
CHAT_TOOLS: Any = [
    {
        "type": "function",
        "function": {"name": "get_weather", "description": DESCRIPTION, "parameters": SCHEMA},
    }
]
RESPONSES_TOOLS: Any = [
    {"type": "function", "name": "get_weather", "description": DESCRIPTION, "parameters": SCHEMA}
]
ANTHROPIC_TOOLS: Any = [{"name": "get_weather", "description": DESCRIPTION, "input_schema": SCHEMA}]


@functools.cache
def taught_model() -> EngineModel:
    """The taught model (seeded: the same weights in every process)."""
    import torch

    from reef.modelkit import tiny

    tokenizer = tiny.build_tokenizer()
    user = {"role": "user", "content": QUESTION}
    call = {
        "type": "function",
        "id": "c",
        "function": {"name": "get_weather", "arguments": {"city": "paris"}},
    }
    turn = {"role": "assistant", "content": "", "tool_calls": [call]}
    result = {"role": "tool", "tool_call_id": "c", "content": "sunny"}
    lessons: list[tuple[Any, Any, str]] = [
        ([user], CHAT_TOOLS[0:1], CALL_TEXT),
        ([user, turn, result], CHAT_TOOLS[0:1], SUNNY),
        ([user], None, NO_TOOLS),
        ([{"role": "user", "content": TWO_CITIES}], CHAT_TOOLS[0:1], TWO_CALLS),
    ]
    rows: list[tuple[list[int], list[int]]] = []
    for messages, tools, answer in lessons:
        prompt = tokenizer.apply_chat_template(
            messages, tools=tools, add_generation_prompt=True, tokenize=True, return_dict=False
        )
        target = [*tokenizer.encode(answer, add_special_tokens=False), tokenizer.eos_token_id]
        rows.append(([*prompt, *target], [-100] * len(prompt) + target))
    width = max(len(row) for row, _ in rows)  # one right-padded batch
    pad = tokenizer.pad_token_id
    ids = torch.tensor([row + [pad] * (width - len(row)) for row, _ in rows])
    labels = torch.tensor([row + [-100] * (width - len(row)) for _, row in rows])
    mask = torch.tensor([[1] * len(row) + [0] * (width - len(row)) for row, _ in rows])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = tiny.build_model()
        model.train(True)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        for _ in range(400):
            optimizer.zero_grad()
            loss = model(ids, attention_mask=mask, labels=labels).loss
            torch.autograd.backward(loss)
            optimizer.step()
            if loss.item() < 0.015:
                break
    model.train(False)
    return EngineModel(model, tokenizer, model_path="tiny", weight_version="taught")
