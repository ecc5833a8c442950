"""Counted nouns for messages and views: "1 layer", "12 layers"."""


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """`n` and `noun`, plural unless n is 1 (`plural` for irregular ones)."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
