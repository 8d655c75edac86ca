"""Prompt helpers the task families share."""

from __future__ import annotations


def chat_prompt(text: str, tokenizer=None) -> str:
    """``text`` as the user's turn of the tokenizer's own chat template, ready for the assistant's
    reply; the plain text when the tokenizer has no chat template (or there is no tokenizer)."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
        )
    return text
