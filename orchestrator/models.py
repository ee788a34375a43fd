"""What is stored: projects and their members, pools of workers, runs, plans, steps, events.

Models hold data and its constraints only; writes go through ``orchestrator.services`` and reads
through ``orchestrator.selectors``.
"""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.utils.text import slugify

from orchestrator.engine.types import (
    DEFAULT_COST_BUDGET,
    DEFAULT_MAX_TOKENS,
    DEFAULT_TOKEN_BUDGET,
    MAX_ROUNDS,
    MAX_STEPS_PER_ROUND,
)

ENV_VAR_NAME = RegexValidator(
    r"^[A-Za-z_][A-Za-z0-9_]*$",
    "Give the name of an environment variable (letters, digits, underscores), never the key itself.",
)


class Project(models.Model):
    """The unit of access: pools and runs belong to a project, users are members with a role."""

    name = models.CharField(max_length=100, unique=True)
    slug = models.SlugField(max_length=100, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    """A user's role in a project."""

    class Role(models.TextChoices):
        ADMIN = "admin", "Admin"
        REVIEWER = "reviewer", "Reviewer"
        VIEWER = "viewer", "Viewer"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.VIEWER)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "user"], name="membership_unique_user")
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.project} ({self.role})"


class Pool(models.Model):
    """A named set of workers plus the conductor's settings."""

    class AccessMode(models.TextChoices):
        BINARY = "binary", "Binary (all or nothing)"
        FINE = "fine", "Fine (explicit earlier steps)"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="pools")
    name = models.CharField(max_length=100)
    description = models.TextField(blank=True)
    conductor_model = models.CharField(
        max_length=200,
        default="sim/conductor",
        help_text="A litellm model string, or sim/conductor for the offline simulated conductor.",
    )
    conductor_api_base = models.CharField(max_length=300, blank=True)
    conductor_api_key_env = models.CharField(
        max_length=100,
        blank=True,
        validators=[ENV_VAR_NAME],
        help_text="Name of the environment variable holding the conductor's API key.",
    )
    conductor_params = models.JSONField(default=dict, blank=True)
    conductor_prompt_style = models.CharField(
        max_length=10,
        choices=[("full", "Full (format, workers, worked examples)"), ("compact", "Compact")],
        default="full",
        help_text="Full: for general chat models. Compact (the format and the workers, no "
        "examples): for conductors fine-tuned on the format.",
    )
    max_steps = models.PositiveSmallIntegerField(
        default=5,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_STEPS_PER_ROUND)],
        help_text=f"Steps per round, 1 to {MAX_STEPS_PER_ROUND}.",
    )
    max_rounds = models.PositiveSmallIntegerField(
        default=2,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_ROUNDS)],
        help_text=(
            f"Rounds, 1 to {MAX_ROUNDS}. No run holds more than steps per round × rounds steps, "
            "whatever its strategy."
        ),
    )
    access_mode = models.CharField(
        max_length=6, choices=AccessMode.choices, default=AccessMode.FINE
    )
    show_worker_names = models.BooleanField(default=True)
    step_timeout = models.FloatField(default=120.0, validators=[MinValueValidator(0.1)])
    token_budget = models.PositiveIntegerField(
        null=True,
        blank=True,
        default=DEFAULT_TOKEN_BUDGET,
        help_text="Tokens (in + out, the conductor's included) one run may use; empty: no limit.",
    )
    cost_budget = models.FloatField(
        null=True,
        blank=True,
        default=DEFAULT_COST_BUDGET,
        validators=[MinValueValidator(0.0)],
        help_text="Dollars one run may cost; empty: no limit.",
    )
    conductor_output = models.CharField(
        max_length=4,
        choices=[
            ("text", "Text (reasoning, then the three Python lists)"),
            ("json", "JSON (constrained to the plan's schema)"),
        ],
        default="text",
        help_text="Text: for conductors fine-tuned on the lists. JSON: the call asks the server "
        "for output held to a JSON schema of the plan, for small general models.",
    )
    conductor_json_dialect = models.CharField(
        max_length=8,
        choices=[
            ("auto", "Auto (from the model string and API base)"),
            ("openai", "OpenAI (response_format json_schema)"),
            ("llamacpp", "llama.cpp (response_format json_object with schema)"),
            ("vllm", "vLLM (guided_json)"),
            ("ollama", "Ollama (format)"),
        ],
        default="auto",
        help_text="How the schema is asked for in JSON output. Auto: ollama/ models speak "
        "Ollama's, hosted_vllm/ models vLLM's, any other model with an API base llama.cpp's, "
        "the rest OpenAI's.",
    )
    plan_fallback = models.CharField(
        max_length=6,
        choices=[
            ("fail", "Fail the run"),
            ("single", "The first worker answers alone"),
        ],
        default="fail",
        help_text="When the conductor's plan is still unusable after its repairs. A later "
        "round keeps the answer it has instead. Marked as a fallback wherever it shows.",
    )
    conductor_max_concurrency = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Conductor calls of this pool that run at once, over every process that "
        "executes runs; the others wait their turn. Empty: no bound.",
    )
    conductor_max_tokens = models.PositiveIntegerField(
        null=True,
        blank=True,
        default=DEFAULT_MAX_TOKENS,
        validators=[MinValueValidator(1)],
        help_text="Output tokens a conductor call may write unless its parameters say "
        "(max_tokens); empty: no bound but the server's.",
    )
    worker_max_tokens = models.PositiveIntegerField(
        null=True,
        blank=True,
        default=DEFAULT_MAX_TOKENS,
        validators=[MinValueValidator(1)],
        help_text="Output tokens a worker call may write unless the worker or its parameters "
        "say; empty: no bound but the server's.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="pool_unique_name")]

    def __str__(self) -> str:
        return self.name

    @property
    def is_simulated(self) -> bool:
        return self.conductor_model.startswith("sim/")

    @property
    def api_slug(self) -> str:
        """The pool's name as a model name on the OpenAI-compatible endpoint."""
        return slugify(self.name) or f"pool-{self.pk}"


class Worker(models.Model):
    """A model of a pool. Its key stays in the environment: only the variable's name is stored."""

    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="workers")
    position = models.PositiveSmallIntegerField(
        default=0, help_text="Order in the pool; the conductor sees workers as Model 0, 1, ..."
    )
    name = models.CharField(max_length=100)
    model = models.CharField(
        max_length=200, help_text="litellm model string: openai/..., anthropic/..., sim/..."
    )
    api_base = models.CharField(max_length=300, blank=True)
    api_key_env = models.CharField(max_length=100, blank=True, validators=[ENV_VAR_NAME])
    params = models.JSONField(default=dict, blank=True, help_text="Call parameters.")
    price_in = models.FloatField(default=0.0, help_text="Price per million input tokens.")
    price_out = models.FloatField(default=0.0, help_text="Price per million output tokens.")
    description = models.TextField(help_text="Capabilities, as shown to the conductor.")
    enabled = models.BooleanField(default=True)
    max_tokens = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Output tokens one call may write unless its parameters say; empty: the "
        "pool's worker default.",
    )
    max_concurrency = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Calls of this worker that run at once, over every process that executes "
        "runs; the others wait their turn. Empty: no bound.",
    )

    class Meta:
        ordering = ["pool", "position", "id"]
        constraints = [models.UniqueConstraint(fields=["pool", "name"], name="worker_unique_name")]

    def __str__(self) -> str:
        return f"{self.name} ({self.model})"

    @property
    def is_simulated(self) -> bool:
        return self.model.startswith("sim/")


class Run(models.Model):
    """One question answered by one strategy over one pool."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        PLANNING = "planning"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        CANCELLED = "cancelled"

    FINISHED = (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED)

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="runs")
    pool = models.ForeignKey(Pool, on_delete=models.PROTECT, related_name="runs")
    strategy = models.CharField(max_length=20, default="conductor")
    strategy_options = models.JSONField(default=dict, blank=True)
    input = models.TextField()
    reference = models.TextField(blank=True)
    grader = models.CharField(max_length=20, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    answer = models.TextField(blank=True)
    score = models.FloatField(null=True, blank=True)
    error = models.TextField(blank=True)
    tokens_in = models.PositiveBigIntegerField(default=0)
    tokens_out = models.PositiveBigIntegerField(default=0)
    cost = models.FloatField(default=0.0)
    model_calls = models.PositiveIntegerField(default=0)
    wall_time = models.FloatField(null=True, blank=True)
    step_count = models.PositiveIntegerField(default=0)
    last_seq = models.PositiveBigIntegerField(default=0)
    replay_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="replays"
    )
    edits = models.JSONField(default=list, blank=True)
    # Runs asked for over the OpenAI-compatible endpoint (/v1): the step of another run whose
    # worker called this server (recursion), how deep in such calls this run is, call
    # parameters for every worker (temperature), and the caller's own end-user id.
    called_from = models.ForeignKey(
        "Step", null=True, blank=True, on_delete=models.SET_NULL, related_name="nested_runs"
    )
    depth = models.PositiveSmallIntegerField(default=0)
    worker_params = models.JSONField(default=dict, blank=True)
    end_user = models.CharField(max_length=256, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="runs",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Who executes the run (services/ownership.py): an execution's token, empty when none does
    # (a finished run keeps its last one); until when its claim holds unless renewed (empty
    # while a broker lease guards it);
    # the fencing token (raised by every execution that takes the run over: a write carrying an
    # older one is refused); how many executions died holding the run.
    executor = models.CharField(max_length=200, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    fence = models.PositiveIntegerField(default=0)
    interruptions = models.PositiveIntegerField(default=0)
    # Whether anything has subscribed to the run's live events (``run_watch``: a socket, a /v1
    # completion following its run), set before it reads what is stored. Until then an
    # execution on PostgreSQL stores the run's events without sending them to the channel
    # layer, where nobody would hear them (most runs, created over the API or by experiments,
    # are never watched live).
    watched = models.BooleanField(default=False)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            # Superusers and members of several projects walk the newest runs of every project.
            models.Index(fields=["-created_at", "-id"], name="run_recent"),
            models.Index(fields=["project", "-created_at", "-id"], name="run_project_recent"),
            models.Index(fields=["project", "status", "-created_at"], name="run_status_recent"),
            models.Index(fields=["project", "pool", "-created_at"], name="run_pool_recent"),
            models.Index(fields=["project", "strategy", "-created_at"], name="run_strategy_recent"),
            # Finding interrupted runs at start must not walk every finished run.
            models.Index(
                fields=["lease_expires_at"],
                condition=~models.Q(status__in=["succeeded", "failed", "cancelled"]),
                name="run_unfinished_lease",
            ),
            # The sweep that enqueues runs left queued reads only queued runs, oldest first.
            models.Index(
                fields=["created_at", "id"],
                condition=models.Q(status="queued"),
                name="run_queued_oldest",
            ),
        ]

    def __str__(self) -> str:
        return f"Run {self.pk}"

    @property
    def is_finished(self) -> bool:
        return self.status in self.FINISHED


class Plan(models.Model):
    """How the workflow of one round came to be: the conductor's calls, raw output, parse errors."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="plans")
    round = models.PositiveSmallIntegerField()
    strategy = models.CharField(max_length=20)
    messages = models.JSONField(default=list, blank=True)
    attempts = models.JSONField(
        default=list, blank=True, help_text="[{raw, error, tokens_in, tokens_out, cost, latency}]"
    )
    workflow = models.JSONField(
        null=True, blank=True, help_text="[{worker, instruction, access}]; [] accepts."
    )
    error = models.TextField(blank=True)
    form = models.CharField(
        max_length=5, blank=True, help_text='What the workflow was read from: "lists" or "json".'
    )
    constrained = models.CharField(
        max_length=10,
        blank=True,
        help_text="How the conductor's output was held to the plan's schema (the dialect).",
    )
    fallback = models.CharField(
        max_length=6,
        blank=True,
        help_text='"single" or "kept": the pool\'s plan_fallback stood in for an unusable '
        "plan (error says why); the workflow is not the conductor's.",
    )
    # A replay keeps its source's plan of a round: the plan it was copied from (its conductor
    # calls are not counted again).
    reused_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="reused_by"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "round"]
        constraints = [models.UniqueConstraint(fields=["run", "round"], name="plan_unique_round")]


class Step(models.Model):
    """One step of a run: its instruction, worker, what it read, and exactly what was sent back."""

    class Status(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        # The run ended while the step ran (cancelled) or before it started (skipped); the
        # step's error says why.
        CANCELLED = "cancelled"
        SKIPPED = "skipped"

    FINISHED = (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED, Status.SKIPPED)
    OPEN = (Status.PENDING, Status.RUNNING)

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="steps")
    plan = models.ForeignKey(
        Plan, null=True, blank=True, on_delete=models.CASCADE, related_name="steps"
    )
    round = models.PositiveSmallIntegerField()
    index = models.PositiveSmallIntegerField()
    instruction = models.TextField()
    worker = models.ForeignKey(
        Worker, null=True, blank=True, on_delete=models.SET_NULL, related_name="steps"
    )
    worker_index = models.PositiveSmallIntegerField()
    worker_name = models.CharField(max_length=100)
    model = models.CharField(max_length=200)
    access = models.JSONField(default=list, blank=True, help_text='As given: "all" or indices.')
    reads = models.JSONField(default=list, blank=True, help_text="Resolved to step ids.")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    messages = models.JSONField(default=list, blank=True)
    response = models.TextField(blank=True)
    tokens_in = models.PositiveIntegerField(default=0)
    tokens_out = models.PositiveIntegerField(default=0)
    cost = models.FloatField(default=0.0)
    latency = models.FloatField(null=True, blank=True)
    queued = models.FloatField(
        default=0.0, help_text="Seconds its calls waited for a slot of the worker's bound."
    )
    attempts = models.PositiveSmallIntegerField(default=0)
    error = models.TextField(blank=True)
    attempt_log = models.JSONField(
        default=list,
        blank=True,
        help_text="Every call when one failed: [{attempt, offset, seconds, error, backoff}] "
        "(offset: seconds after the first call; backoff: the wait before the next call).",
    )
    reused_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="reused_by"
    )
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["run", "round", "index"]
        constraints = [
            models.UniqueConstraint(fields=["run", "round", "index"], name="step_unique_position")
        ]
        indexes = [models.Index(fields=["worker_name", "run"], name="step_worker_run")]

    def __str__(self) -> str:
        return f"Step {self.round}.{self.index} of run {self.run_id}"


class RunEvent(models.Model):
    """Every live event of a run, kept so a reconnecting page gets exactly what it missed."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveBigIntegerField()
    type = models.CharField(max_length=20)
    data = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "seq"]
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="event_unique_seq")]


class ApiKey(models.Model):
    """A key to the OpenAI-compatible endpoint (/v1): one user's, for one project's pools.

    Only a hash of the key is stored; the key itself is shown once, when it is made. ``prefix``
    (its first characters) tells keys apart on the account page.
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_keys"
    )
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=16)
    key_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user}, {self.project})"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


class AuditEntry(models.Model):
    """One admin action in a project (a pool or worker change, a replay, a membership change, a
    review resolution...), with who did it, when, and the target's state before and after.

    Written only by ``orchestrator.services.audit.audit_record``; never updated or deleted by the
    application. ``before`` and ``after`` hold the fields that changed (never a secret: a key is
    named by its environment variable, never stored).
    """

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="audit_entries")
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="audit_entries",
    )
    actor_name = models.CharField(max_length=150, blank=True, help_text="Kept if the user goes.")
    action = models.CharField(max_length=40, help_text='A dotted verb: "pool.update", ...')
    target_type = models.CharField(max_length=40)
    target_id = models.PositiveBigIntegerField(null=True, blank=True)
    target_label = models.CharField(max_length=200, blank=True)
    before = models.JSONField(default=dict, blank=True)
    after = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["project", "-created_at"], name="audit_project_recent")]

    def __str__(self) -> str:
        return f"{self.action} {self.target_type} {self.target_id} by {self.actor_name}"


class Dataset(models.Model):
    """A named list of items (a question, a reference, a grader, tags) in a project.

    ``builtin`` names where a built-in dataset comes from ("suite": the simulator's bundled
    suite); empty for an imported one. Items are written once, at import (all or none).
    """

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="datasets")
    name = models.CharField(max_length=100)
    description = models.TextField(blank=True)
    builtin = models.CharField(max_length=20, blank=True)
    item_count = models.PositiveIntegerField(default=0)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="datasets",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name", "id"]
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="dataset_unique_name")
        ]

    def __str__(self) -> str:
        return self.name


class DatasetItem(models.Model):
    """One question of a dataset; ``source_run`` is the run it was added from, if any."""

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="items")
    position = models.PositiveIntegerField()
    input = models.TextField()
    reference = models.TextField(blank=True)
    grader = models.CharField(max_length=20, blank=True)
    tags = models.JSONField(default=list, blank=True)
    source_run = models.ForeignKey(
        Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="dataset_items"
    )

    class Meta:
        ordering = ["dataset", "position"]
        constraints = [
            models.UniqueConstraint(fields=["dataset", "position"], name="dataset_item_position")
        ]


class Experiment(models.Model):
    """A dataset (or a sample of it) run against several arms; every item × arm is a Trial
    whose run is an ordinary run. ``done`` counts finished trials (the progress bar)."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        FINISHED = "finished"
        CANCELLED = "cancelled"
        FAILED = "failed"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="experiments")
    dataset = models.ForeignKey(Dataset, on_delete=models.PROTECT, related_name="experiments")
    name = models.CharField(max_length=200, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    sample = models.PositiveIntegerField(null=True, blank=True)
    seed = models.BigIntegerField(default=0)
    tags = models.JSONField(default=list, blank=True, help_text="Only items with one of these.")
    total = models.PositiveIntegerField(default=0)
    done = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="experiments",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.name or f"Experiment {self.pk}"


class ExperimentArm(models.Model):
    """One contender of an experiment: a strategy with its options, over a pool."""

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="arms")
    position = models.PositiveSmallIntegerField()
    label = models.CharField(max_length=100)
    strategy = models.CharField(max_length=20)
    options = models.JSONField(default=dict, blank=True)
    pool = models.ForeignKey(Pool, on_delete=models.PROTECT, related_name="experiment_arms")

    class Meta:
        ordering = ["experiment", "position"]
        constraints = [
            models.UniqueConstraint(fields=["experiment", "position"], name="arm_unique_position")
        ]


class Trial(models.Model):
    """One item of an experiment answered by one arm. ``run`` is made when the trial is first
    claimed; ``finished`` once that run ended while the experiment ran (a finished trial is never
    run again); ``claimed_until``: an execution holds the trial until then."""

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="trials")
    arm = models.ForeignKey(ExperimentArm, on_delete=models.CASCADE, related_name="trials")
    item = models.ForeignKey(DatasetItem, on_delete=models.CASCADE, related_name="trials")
    run = models.OneToOneField(
        Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="trial"
    )
    finished = models.BooleanField(default=False)
    claimed_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["experiment", "id"]
        constraints = [
            models.UniqueConstraint(fields=["arm", "item"], name="trial_unique_arm_item")
        ]
        indexes = [models.Index(fields=["experiment", "finished", "id"], name="trial_pending")]


# Review ------------------------------------------------------------------------------------------

DEFAULT_FAILURE_KINDS = (
    "bad plan",
    "wrong worker",
    "missing context in the access list",
    "worker error",
    "conductor format error",
    "wrong reference",
    "other",
)


class FailureKind(models.Model):
    """A label a project's reviewers put on runs: what went wrong. Each project has its own
    list (``DEFAULT_FAILURE_KINDS`` when it is first used), edited by its admins."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="failure_kinds")
    name = models.CharField(max_length=60)
    position = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["project", "position", "id"]
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="failure_kind_unique_name")
        ]

    def __str__(self) -> str:
        return self.name


class RunLabel(models.Model):
    """A failure kind put on a run, by whom and when."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="labels")
    kind = models.ForeignKey(FailureKind, on_delete=models.PROTECT, related_name="labels")
    added_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    added_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "kind__position", "kind_id"]
        constraints = [models.UniqueConstraint(fields=["run", "kind"], name="run_label_unique")]
        indexes = [models.Index(fields=["kind", "run"], name="run_label_kind")]


class RunReview(models.Model):
    """A run's review state, made on the first review action: who it is assigned to, the
    human score, the flag, and the resolution (optionally the run, a replay, that fixed it)."""

    run = models.OneToOneField(Run, on_delete=models.CASCADE, related_name="review")
    assignee = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="assigned_reviews",
    )
    human_score = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(0.0), MaxValueValidator(1.0)]
    )
    scored_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    flagged = models.BooleanField(default=False)
    flagged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    resolution_note = models.TextField(blank=True)
    fixed_by = models.ForeignKey(
        Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="fixes"
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [
            models.Index(fields=["assignee"], name="review_assignee"),
            models.Index(fields=["flagged"], name="review_flagged"),
        ]


class Comment(models.Model):
    """A reviewer's note on a run, or on one of its steps: Markdown, shown as untrusted text."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="comments")
    step = models.ForeignKey(
        Step, null=True, blank=True, on_delete=models.CASCADE, related_name="comments"
    )
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="comments"
    )
    body = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)
    edited_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["run", "created_at", "id"]
        indexes = [models.Index(fields=["run", "created_at"], name="comment_run_recent")]


class Batch(models.Model):
    """Many replays made at once: every run a filter of the runs list matched, replayed with one
    override (a worker swapped for another, or an instruction rewrite), in the background.

    ``filters`` are the runs list's filters as data (``selectors.run_list`` keywords, dates in
    ISO 8601); ``override`` is ``{"kind": "worker", "from": NAME, "to": NAME}`` or ``{"kind":
    "instruction", "match": "literal" | "regex", "pattern": ..., "replacement": ...}``. Written
    only by ``orchestrator.services.batches``. ``status`` is ``creating`` while replays are being
    made and ``created`` once every item has its replay or its error; whether the replays have
    finished is read from them (``selectors.batch_summary``).
    """

    class Status(models.TextChoices):
        CREATING = "creating"
        CREATED = "created"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="batches")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="batches",
    )
    filters = models.JSONField(default=dict, blank=True)
    override = models.JSONField(default=dict)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.CREATING)
    total = models.PositiveIntegerField(default=0, help_text="Source runs the filter matched.")
    replayed = models.PositiveIntegerField(default=0, help_text="Items whose replay was made.")
    not_replayed = models.PositiveIntegerField(
        default=0, help_text="Items stopped by an error (nothing to change, a missing worker...)."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    created_all_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["project", "-created_at"], name="batch_project_recent")]

    def __str__(self) -> str:
        return f"Batch {self.pk}"


class BatchItem(models.Model):
    """One source run of a batch: its replay once made, or why none was made."""

    batch = models.ForeignKey(Batch, on_delete=models.CASCADE, related_name="items")
    position = models.PositiveIntegerField()
    source = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="batch_items")
    replay = models.OneToOneField(
        Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="batch_item"
    )
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["batch", "position"]
        constraints = [
            models.UniqueConstraint(fields=["batch", "position"], name="batch_item_position"),
            models.UniqueConstraint(fields=["batch", "source"], name="batch_item_source"),
        ]

    def __str__(self) -> str:
        return f"Item {self.position} of batch {self.batch_id}"

    @property
    def is_pending(self) -> bool:
        return self.replay_id is None and not self.error
