"""A real Daphne server for the /v1 tests (and browser tests of nested runs), with keys and extra
pools made before it starts.

Pools (project "default" unless said): the demo pool (``offline-demo-simulated``); ``broken``,
whose only worker needs a key that is not set (its runs fail); ``recursive``, whose worker is
the demo pool's single strategy through this server's own /v1; ``loop``, whose worker is
``loop`` itself; and ``secret-pool`` in project "other", which the default key must not reach.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from harness.server import LiveServer

DEMO_MODEL = "offline-demo-simulated"
SELF_KEY_ENV = "CONDUCTOR_TEST_SELF_KEY"
RATE_LIMIT = 60

SETUP = """
from django.contrib.auth import get_user_model
from orchestrator.models import Membership, Pool, Project, Worker
admin = get_user_model().objects.get(username="admin")
default = Project.objects.get(slug="default")
base = {base!r}
def pool(project, name, model, **worker):
    p = Pool.objects.create(project=project, name=name, conductor_params={{"latency": 0}})
    Worker.objects.create(pool=p, name=name + " worker", model=model, description="test",
                          params={{"latency": 0}}, **worker)
pool(default, "Broken", "openai/gpt-none", api_key_env="CONDUCTOR_TEST_UNSET_KEY")
pool(default, "Recursive", "openai/offline-demo-simulated:single", api_base=base,
     api_key_env={env!r})
pool(default, "Loop", "openai/loop:single", api_base=base, api_key_env={env!r})
other = Project.objects.create(name="Other", slug="other")
Membership.objects.create(project=other, user=admin, role="admin")
pool(other, "Secret pool", "sim/swift")
viewer = get_user_model().objects.create_user(username="vic", password="x")
Membership.objects.create(project=default, user=viewer, role="viewer")
"""


@dataclass
class V1Server:
    server: LiveServer
    key: str
    other_key: str

    @property
    def base_url(self) -> str:
        return f"{self.server.url}/v1"

    def new_key(self, project: str = "default", username: str = "admin") -> str:
        output = self.server.manage("api_key", "create", username, "--project", project)
        return output.stdout.strip().splitlines()[-1]

    def query(self, code: str):
        """Evaluate Python against the server's database; the code sets ``result`` (JSON)."""
        script = f"import json\n{code}\nprint('RESULT=' + json.dumps(result, default=str))"
        for line in self.server.shell(script).splitlines():
            if line.startswith("RESULT="):
                return json.loads(line[len("RESULT=") :])
        raise AssertionError("no result printed")

    def run(self, run_id: int) -> dict:
        return self.query(
            "from orchestrator.models import Run\n"
            f"r = Run.objects.get(pk={run_id})\n"
            "result = {f: getattr(r, f) for f in ('status', 'answer', 'input', 'tokens_in', "
            "'tokens_out', 'depth', 'called_from_id', 'worker_params', 'end_user', 'strategy', "
            "'strategy_options', 'error')}"
        )


def start_v1_server(directory: Path, **extra_env: str) -> V1Server:
    """A migrated, seeded server with the pools above and keys, started."""
    server = LiveServer(
        directory=directory,
        extra_env={
            "CONDUCTOR_SIM_LATENCY_SCALE": "0",
            "CONDUCTOR_API_RATE_LIMIT": str(RATE_LIMIT),
            "CONDUCTOR_MAX_DEPTH": "2",
            **extra_env,
        },
    )
    server.prepare()
    server.shell(SETUP.format(base=f"{server.url}/v1", env=SELF_KEY_ENV))
    made = V1Server(server=server, key="", other_key="")
    made.key = made.new_key()
    made.other_key = made.new_key("other")
    server.extra_env[SELF_KEY_ENV] = made.new_key()
    server.start()
    return made
