"""The simulated badge says which parts of a pool are simulated, not only whether its conductor is."""

from __future__ import annotations

from orchestrator import selectors
from tests.factories import make_pool, make_worker
from webui.views import simulated_text


def pool_as_listed(pool, user):
    return next(p for p in selectors.pools_for(user=user) if p.pk == pool.pk)


def test_badge_names_the_simulated_parts(project, superuser):
    everything = make_pool(project=project, workers=2)
    assert simulated_text(pool_as_listed(everything, superuser)) == "Simulated pool"

    mixed = make_pool(project=project, workers=1)
    make_worker(pool=mixed, name="GPT", model="openai/gpt-5")
    assert (
        simulated_text(pool_as_listed(mixed, superuser))
        == "Simulated: conductor and 1 of 2 workers"
    )

    real_conductor = make_pool(project=project, workers=2, conductor_model="openai/gpt-5")
    assert simulated_text(pool_as_listed(real_conductor, superuser)) == "Simulated: all workers"

    nothing = make_pool(project=project, workers=0, conductor_model="openai/gpt-5")
    make_worker(pool=nothing, name="GPT", model="openai/gpt-5")
    assert simulated_text(pool_as_listed(nothing, superuser)) == ""
