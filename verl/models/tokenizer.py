"""A byte-level tokenizer built in code, so the tiny model needs no downloaded vocabulary.

Ids 0-255 are the UTF-8 bytes; three special ids follow. It implements the slice of the HF tokenizer
interface the trainer uses (encode/decode, pad/eos/bos ids), nothing more.
"""

from __future__ import annotations


class ByteTokenizer:
    pad_token_id = 256
    eos_token_id = 257
    bos_token_id = 258
    vocab_size = 259
    padding_side = "left"

    # C0 controls other than tab/newline/CR, and DEL: text carrying them fails rollout validation
    # (verl.data.guards.ILLEGAL_CHARS), so the tiny model never emits them (see loading.py)
    unprintable_ids = (*range(0, 9), 11, 12, *range(14, 32), 127)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        ids = list(text.encode("utf-8"))
        return [self.bos_token_id, *ids] if add_special_tokens else ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        data = bytes(i for i in ids if i < 256)
        return data.decode("utf-8", errors="replace")

    def batch_decode(self, batch: list[list[int]], skip_special_tokens: bool = True) -> list[str]:
        return [self.decode(ids, skip_special_tokens) for ids in batch]
