"""The workflow engine: plan format, context assembly, scheduler, conductors and strategies.

Pure Python, no Django. Entry points:

- ``plan.parse_workflow(text, *, pool_size, max_steps=5, access_mode="fine") -> Workflow``
- ``context.build_messages(...) -> list[Message]``: exactly what a worker is sent.
- ``scheduler.execute_run(...) -> RunResult``: runs a question through a strategy over a pool.
- ``strategies.build_strategy(name, ...) -> Strategy``: conductor, single, reflection, moa.
- ``grading.grade(answer, reference, kind)``: checks an answer against a reference.
- ``sandbox.run_python(script=..., files=..., limits=...)``: runs untrusted Python in bubblewrap,
  each sandbox with a uid and a cgroup of its own; ``code_grading.grade_code`` grades a code
  answer in two of them.
"""
