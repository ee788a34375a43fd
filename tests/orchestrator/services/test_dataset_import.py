"""dataset_import: good JSONL and CSV files, each kind of bad line, a file too large; nothing is
stored unless every line is good."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import PermissionDenied, ValidationError

from orchestrator.models import AuditEntry, Dataset, DatasetItem, Membership
from orchestrator.scoreboard import dataset_export_lines
from orchestrator.services.datasets import dataset_ensure_suite, dataset_import
from tests.factories import make_member


def jsonl(*rows) -> bytes:
    return "\n".join(row if isinstance(row, str) else json.dumps(row) for row in rows).encode()


def test_a_good_jsonl_file_stores_every_item_in_order(project, project_admin):
    content = jsonl(
        {"input": "What is 2 + 2?", "reference": "4", "tags": ["math", "easy"]},
        "",
        {"input": "Capital of France?", "reference": "Paris"},
        {"input": "Say hello."},
    )
    dataset = dataset_import(
        project=project, name="Mine", content=content, format="jsonl", created_by=project_admin
    )

    items = list(dataset.items.order_by("position"))
    assert [item.input for item in items] == ["What is 2 + 2?", "Capital of France?", "Say hello."]
    # The grader follows the reference's form when none is given; none without a reference.
    assert [item.grader for item in items] == ["numeric", "exact", ""]
    assert items[0].tags == ["math", "easy"]
    assert dataset.item_count == 3
    assert AuditEntry.objects.filter(action="dataset.import", target_id=dataset.pk).exists()


def test_a_good_csv_file_with_a_bom_quotes_and_comma_separated_tags(project, project_admin):
    content = (
        "\ufeffinput,reference,grader,tags\r\n"
        '"Two lines,\nwith a comma",42,numeric,"math, long"\r\n'
        "Capital of Peru?,Lima,,geo\r\n"
    ).encode()
    dataset = dataset_import(
        project=project, name="CSV", content=content, format="csv", created_by=project_admin
    )

    first, second = dataset.items.order_by("position")
    assert first.input == "Two lines,\nwith a comma"
    assert (first.reference, first.grader, first.tags) == ("42", "numeric", ["math", "long"])
    assert (second.reference, second.grader, second.tags) == ("Lima", "exact", ["geo"])


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("{not json", "line 2: not valid JSON"),
        ("[1, 2]", "line 2: give a JSON object, not list"),
        ('{"reference": "4"}', "line 2: input: give a question"),
        ('{"input": 7}', "line 2: input: give text, not int"),
        ('{"input": "q", "answer": "a"}', "line 2: unknown field 'answer'"),
        (
            '{"input": "q", "reference": "a", "grader": "vibes"}',
            'line 2: grader: unknown grader "vibes"',
        ),
        ('{"input": "q", "grader": "exact"}', "line 2: grader: a grader needs a reference"),
        (
            '{"input": "q", "reference": "4", "grader": "code"}',
            "line 2: reference: The reference has no test to run",
        ),
        ('{"input": "q", "tags": "a"}', None),  # a string of tags is accepted
        ('{"input": "q", "tags": [1]}', "line 2: tags: give a list of text tags"),
        ('{"input": "q", "tags": ["' + "t" * 51 + '"]}', "line 2: tags: a tag is at most 50"),
        ('{"input": "' + "x" * (100 * 1024 + 1) + '"}', "line 2: input: Too long"),
    ],
)
def test_each_kind_of_bad_line_is_reported_and_nothing_is_stored(project, line, expected):
    content = jsonl({"input": "A fine first line?"}, line, {"input": "A fine last line?"})
    if expected is None:
        dataset_import(project=project, name="ok", content=content, format="jsonl")
        return
    with pytest.raises(ValidationError) as raised:
        dataset_import(project=project, name="Bad", content=content, format="jsonl")

    messages = raised.value.message_dict["file"]
    assert len(messages) == 1 and messages[0].startswith(expected), messages
    assert not Dataset.objects.filter(name="Bad").exists()
    assert not DatasetItem.objects.exists()


def test_every_bad_line_is_listed_up_to_a_bound(project):
    content = jsonl(*[{"input": ""} for _ in range(60)], {"input": "fine"})
    with pytest.raises(ValidationError) as raised:
        dataset_import(project=project, name="Bad", content=content, format="jsonl")

    messages = raised.value.message_dict["file"]
    assert messages[0] == "line 1: input: give a question"
    assert messages[49].startswith("line 50:")
    assert messages[-1] == "and 10 more bad lines"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"reference,grader\n4,numeric\n", 'line 1: the header row must name an "input" column'),
        (b"input,reference\nq,a,extra\n", "line 2: 3 cells, but the header has 2"),
        (b"input,reference\n,a\n", "line 2: input: give a question"),
    ],
)
def test_bad_csv_lines(project, content, expected):
    with pytest.raises(ValidationError) as raised:
        dataset_import(project=project, name="Bad", content=content, format="csv")
    assert raised.value.message_dict["file"][0].startswith(expected)
    assert not Dataset.objects.exists()


def test_a_file_too_large_or_with_too_many_items_is_refused(project, settings):
    settings.CONDUCTOR_DATASET_MAX_BYTES = 1000
    with pytest.raises(ValidationError) as raised:
        dataset_import(project=project, name="Big", content=b"x" * 1001, format="jsonl")
    assert (
        "Too large: 1,001 bytes; the limit is 1,000 bytes" in raised.value.message_dict["file"][0]
    )

    settings.CONDUCTOR_DATASET_MAX_ITEMS = 3
    content = jsonl(*[{"input": f"q{n}"} for n in range(4)])
    with pytest.raises(ValidationError) as raised:
        dataset_import(project=project, name="Many", content=content, format="jsonl")
    assert "Too many items: more than 3" in raised.value.message_dict["file"][0]
    assert not Dataset.objects.exists()


def test_not_utf8_empty_a_taken_name_and_an_unknown_format(project):
    with pytest.raises(ValidationError) as raised:
        dataset_import(project=project, name="Latin", content="é".encode("latin-1"), format="csv")
    assert raised.value.message_dict["file"] == ["Not UTF-8 text (byte 0)."]
    with pytest.raises(ValidationError) as raised:
        dataset_import(project=project, name="Empty", content=b"\n\n", format="jsonl")
    assert raised.value.message_dict["file"] == ["The file holds no items."]
    with pytest.raises(ValidationError) as raised:
        dataset_import(project=project, name="X", content=b"{}", format="xml")
    assert "format" in raised.value.message_dict
    dataset_import(project=project, name="Taken", content=jsonl({"input": "q"}), format="jsonl")
    with pytest.raises(ValidationError) as raised:
        dataset_import(project=project, name="Taken", content=jsonl({"input": "q"}), format="jsonl")
    assert raised.value.message_dict["name"] == ['The project already has a dataset named "Taken".']


def test_viewers_may_not_import_and_only_admins_import_code_graders(project):
    viewer = make_member(project=project, role=Membership.Role.VIEWER)
    reviewer = make_member(project=project, role=Membership.Role.REVIEWER)
    content = jsonl({"input": "Write f.", "reference": "assert f() == 1", "grader": "code"})
    with pytest.raises(PermissionDenied):
        dataset_import(
            project=project,
            name="V",
            content=jsonl({"input": "q"}),
            format="jsonl",
            created_by=viewer,
        )
    with pytest.raises(PermissionDenied, match="code grader"):
        dataset_import(
            project=project, name="C", content=content, format="jsonl", created_by=reviewer
        )
    assert not Dataset.objects.exists()


def test_export_gives_back_what_import_reads(project):
    content = jsonl(
        {"input": 'Line one\nline two, with "quotes"', "reference": "4", "tags": ["a", "b"]},
        {"input": "Ünïcode?", "reference": "yes", "grader": "exact"},
    )
    original = dataset_import(project=project, name="Round trip", content=content, format="jsonl")
    for format in ("jsonl", "csv"):
        text = "".join(
            dataset_export_lines(items=original.items.order_by("position"), format=format)
        )
        copy = dataset_import(
            project=project, name=f"Copy {format}", content=text.encode(), format=format
        )
        fields = ("input", "reference", "grader", "tags")
        assert list(copy.items.order_by("position").values_list(*fields)) == list(
            original.items.order_by("position").values_list(*fields)
        )


def test_the_bundled_suite_is_a_built_in_dataset_made_once(project):
    from orchestrator.providers.simulator import load_suite

    suite = dataset_ensure_suite(project=project)
    again = dataset_ensure_suite(project=project)

    tasks = load_suite()
    assert again.pk == suite.pk and suite.builtin == "suite"
    assert suite.item_count == len(tasks) == suite.items.count()
    first = suite.items.get(position=0)
    assert (first.input, first.reference, first.grader, first.tags) == (
        tasks[0].question,
        tasks[0].reference,
        tasks[0].grader,
        [tasks[0].domain],
    )
