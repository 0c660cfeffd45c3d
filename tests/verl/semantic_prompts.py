"""Prompt sets for the semantic data-layer tests: paraphrases of one question, unrelated questions of
the same length, and a many-topic stream that can be switched to a single topic."""

from __future__ import annotations

import random

# eight wordings of one question, and eight unrelated questions of about the same length (characters)
PARAPHRASES = [
    "How do I bake sourdough bread at home?",
    "What is the way to make sourdough bread at home?",
    "How can I bake a loaf of sourdough in my kitchen?",
    "What steps do I follow to bake sourdough bread?",
    "Can you tell me how to make homemade sourdough?",
    "How should I go about baking sourdough at home?",
    "What is the method for baking sourdough bread?",
    "How do you make a sourdough loaf from scratch?",
]
UNRELATED = [
    "How do I bake sourdough bread at home?",
    "Why did the Western Roman Empire finally collapse?",
    "What is the derivative of sin x multiplied by x?",
    "How can I fix a flat tire on my old bicycle?",
    "Which planets in our solar system have rings?",
    "What does a central bank do with interest rates?",
    "How many players are on a rugby union team?",
    "What causes the northern lights to glow green?",
]

TEMPLATES = ["How does {} work?", "What should a beginner know about {}?", "Explain {} in simple terms.",
             "Why does {} matter?", "What are common mistakes with {}?"]
TOPICS = {
    "cooking": ["kneading bread dough", "a french omelette", "braising beef", "tempering chocolate",
                "making fresh pasta", "a sourdough starter"],
    "astronomy": ["a black hole", "the orbit of Mars", "a solar eclipse", "neutron stars", "the Big Bang",
                  "exoplanet detection"],
    "history": ["the French Revolution", "the fall of Rome", "the Silk Road", "the printing press",
                "the Cold War", "the Ming dynasty"],
    "programming": ["a hash table", "garbage collection", "recursion in Python", "a SQL join",
                    "git rebase", "unit testing"],
    "medicine": ["a vaccine", "blood pressure", "antibiotic resistance", "an MRI scan", "insulin",
                 "the immune system"],
    "finance": ["compound interest", "an index fund", "inflation", "a mortgage", "stock options",
                "a credit score"],
}


def topic_prompts(*topics: str) -> list[str]:
    return [t.format(s) for topic in topics for s in TOPICS[topic] for t in TEMPLATES]


class PromptStream:
    """Batches drawn (seeded) from every topic, or from ``switch_to`` from step ``switch_at`` on."""

    def __init__(self, switch_at: int | None = None, switch_to: str = "cooking", seed: int = 0) -> None:
        self.mixed, self.single = topic_prompts(*TOPICS), topic_prompts(switch_to)
        self.switch_at, self.rng = switch_at, random.Random(seed)

    def batch(self, step: int, size: int = 16) -> list[str]:
        pool = self.single if self.switch_at is not None and step >= self.switch_at else self.mixed
        return [self.rng.choice(pool) for _ in range(size)]
