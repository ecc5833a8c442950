"""A ranking checked against scores computed elsewhere (a recording, another library,
another code path): the order is held to the same tolerance as the values, so that
rounding on another CPU cannot flip a check the values pass.

The id in place i must score (in the reference) within `tol` of the reference's i-th
best score: two ids may trade places, and the last may give way to one just outside the
list, only where their reference scores are that close; any other order is a
difference. An argmax is the ranking of one id."""


def ranking_difference(ids, scores, tol: float) -> str | None:
    """None when `ids` (best first) ranks `scores` (indexable by id: a 1-D tensor or a
    list) up to `tol`, else what differs."""
    values = [float(x) for x in (scores.tolist() if hasattr(scores, "tolist") else scores)]
    if len(set(ids)) != len(ids):
        return f"ids {list(ids)} repeat one"
    best = sorted(values, reverse=True)[:len(ids)]
    for place, (i, want) in enumerate(zip(ids, best), 1):
        if abs(values[i] - want) > tol:
            return (f"place {place}: id {i} scores {values[i]:.7g} where the reference's "
                    f"place {place} scores {want:.7g}, more than {tol:.3g} apart")
    return None


def assert_ranked(ids, scores, tol: float, what: str = "") -> None:
    found = ranking_difference(list(ids), scores, tol)
    assert found is None, f"{what}: {found}" if what else found
