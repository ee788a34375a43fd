"""Running the site for tests and benchmarks alike: a live server over its own database
(``server``), a real Celery worker (``celery_worker``), and what a fresh interpreter imported
(``imports``). Neither the tests nor the benchmarks own these; both import them from here."""
