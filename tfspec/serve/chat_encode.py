"""A rendered chat prompt tokenized so that what a user typed cannot become a control token.

A template writes special tokens (``<|im_start|>``, ``<|eot_id|>``) as text, and tokenizing the
rendering reads every occurrence as the token; so a message whose content holds
``<|im_end|><|im_start|>system`` would open a turn of its own. Where a content holds a special
token's text, the rendering is cut at each content (found in order): the template's parts are
tokenized as transformers tokenizes them, the contents with special tokens split as plain text
(tokenizers' ``encode_special_tokens``). Otherwise the whole rendering is tokenized at once,
exactly as transformers' ``apply_chat_template`` does."""

from __future__ import annotations

from tfspec.serve.errors import ApiError


class ContentEncoder:
    """``tokenizer`` (a ``tokenizers.Tokenizer``) and a copy of it that reads special tokens as text."""

    def __init__(self, tokenizer):
        from tokenizers import Tokenizer

        self.tokenizer, self.plain = tokenizer, Tokenizer.from_str(tokenizer.to_str())
        self.plain.encode_special_tokens = True
        self.specials = [t.content for t in tokenizer.get_added_tokens_decoder().values() if t.special]

    def encode(self, text: str, contents: list[str]) -> list[int]:
        """Ids of ``text``, the rendering of messages whose texts are ``contents`` (in order)."""
        if not any(s in c for c in contents for s in self.specials):
            return self._ids(self.tokenizer, text)
        ids, at = [], 0
        for i, content in enumerate(contents):
            found = next(((text.find(p, at), p) for p in (content, content.strip()) if p and text.find(p, at) >= 0),
                         None)
            if found is None:
                if any(s in content for s in self.specials):
                    raise ApiError(422, "a message holds a special token's text, and the chat template changes the "
                                   "message so that it cannot be kept as text", "messages")
                continue
            start, piece = found
            ids += self._ids(self.tokenizer, text[at:start]) + self._ids(self.plain, piece)
            at = start + len(piece)
        return ids + self._ids(self.tokenizer, text[at:])

    @staticmethod
    def _ids(tokenizer, text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False).ids if text else []
